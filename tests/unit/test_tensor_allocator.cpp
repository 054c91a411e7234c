// The caching allocator: size classes, reuse without system allocations,
// exact counters, alignment, empty_cache, and thread safety.
#include <gtest/gtest.h>

#include <cstdlib>
#include <thread>
#include <vector>

#include "backend/caching_allocator.hpp"
#include "rig/tensor.hpp"

namespace {

using rig::Tensor;
using rig::backend::CachingAllocator;

bool caching() {
  const char* env = std::getenv("RIG_ALLOCATOR");
  return env == nullptr || std::string(env) != "system";
}

// A RawMemory that counts what it hands out.
struct CountingMemory final : rig::backend::RawMemory {
  int live = 0;
  int allocations = 0;
  std::byte* allocate(std::size_t bytes) override {
    ++live;
    ++allocations;
    return static_cast<std::byte*>(std::aligned_alloc(64, bytes));
  }
  void release(std::byte* data) noexcept override {
    --live;
    std::free(data);
  }
};

TEST(TensorAllocator, SizeClasses) {
  EXPECT_EQ(CachingAllocator::round_size(0), 64U);
  EXPECT_EQ(CachingAllocator::round_size(1), 64U);
  EXPECT_EQ(CachingAllocator::round_size(64), 64U);
  EXPECT_EQ(CachingAllocator::round_size(65), 128U);
  EXPECT_EQ(CachingAllocator::round_size(4096), 4096U);
  EXPECT_EQ(CachingAllocator::round_size(4097), 4608U);  // 4096 + 4096 / 8
  EXPECT_EQ(CachingAllocator::round_size(8192), 8192U);
  EXPECT_EQ(CachingAllocator::round_size(1000000), 1048576U);
  EXPECT_EQ(CachingAllocator::round_size(900000), 917504U);
  for (std::size_t bytes = 1; bytes < (std::size_t{1} << 26U); bytes = bytes * 3 / 2 + 1) {
    const auto r = CachingAllocator::round_size(bytes);
    EXPECT_GE(r, bytes);
    EXPECT_EQ(r % 64, 0U);
    EXPECT_LE(static_cast<double>(r), 1.125 * static_cast<double>(bytes) + 64);
  }
}

TEST(TensorAllocator, ReusesBlocksAndCountsExactly) {
  CountingMemory raw;
  {
    CachingAllocator a(raw, true, std::size_t{1} << 30U);
    const auto [p1, c1, streamp1] = a.allocate(1000);
    const auto [p2, c2, streamp2] = a.allocate(100000);
    EXPECT_EQ(c1, 1024U);
    EXPECT_EQ(streamp1, 0U);  // the host has one stream
    EXPECT_EQ(reinterpret_cast<std::uintptr_t>(p1) % 64, 0U);
    EXPECT_EQ(reinterpret_cast<std::uintptr_t>(p2) % 64, 0U);
    auto s = a.stats();
    EXPECT_EQ(s.current_bytes, c1 + c2);
    EXPECT_EQ(s.peak_bytes, c1 + c2);
    EXPECT_EQ(s.cached_bytes, 0U);
    EXPECT_EQ(s.system_allocations, 2U);
    EXPECT_EQ(s.requests, 2U);
    a.deallocate({p2, c2});
    s = a.stats();
    EXPECT_EQ(s.current_bytes, c1);
    EXPECT_EQ(s.peak_bytes, c1 + c2);
    EXPECT_EQ(s.cached_bytes, c2);
    const auto [p3, c3, streamp3] = a.allocate(99000);  // the same size class: the cached block
    EXPECT_EQ(p3, p2);
    EXPECT_EQ(a.stats().system_allocations, 2U);
    EXPECT_EQ(a.stats().cached_bytes, 0U);
    EXPECT_EQ(a.stats().peak_reserved_bytes, c1 + c2);  // reuse takes nothing more
    a.deallocate({p3, c3});
    a.deallocate({p1, c1});
    a.reset_peak();
    EXPECT_EQ(a.stats().peak_bytes, 0U);
    EXPECT_EQ(a.stats().peak_reserved_bytes, c1 + c2);  // all of it cached
    EXPECT_EQ(a.stats().cached_bytes, c1 + c2);
    EXPECT_EQ(raw.live, 2);
    a.empty_cache();
    EXPECT_EQ(raw.live, 0);
    EXPECT_EQ(a.stats().cached_bytes, 0U);
    EXPECT_EQ(a.stats().current_bytes, 0U);
  }
  // Passing through (RIG_ALLOCATOR=system): nothing kept.
  CachingAllocator system(raw, false, std::size_t{1} << 30U);
  system.deallocate(system.allocate(10));
  EXPECT_EQ(raw.live, 0);
  EXPECT_EQ(system.stats().cached_bytes, 0U);
  EXPECT_EQ(system.stats().peak_bytes, 64U);
  // A cache limit: blocks beyond it go back.
  CachingAllocator small(raw, true, 4096);
  const rig::backend::Block a4 = small.allocate(4096);
  const rig::backend::Block b4 = small.allocate(4096);
  small.deallocate(a4);
  small.deallocate(b4);
  EXPECT_EQ(small.stats().cached_bytes, 4096U);
  EXPECT_EQ(raw.live, 1);
}

TEST(TensorAllocator, TensorsOfAWarmLoopTakeNothingFromTheSystem) {
  if (!caching()) GTEST_SKIP() << "RIG_ALLOCATOR=system";
  auto step = [] {
    Tensor a = Tensor::empty({256, 256});
    Tensor b = Tensor::zeros({1000}, rig::DType::i64);
    Tensor c = a.transpose(0, 1).contiguous();
    Tensor d = Tensor::full({3, 5}, 1.0F, rig::DType::f16);
    return c.numel() + b.numel() + d.numel();
  };
  step();  // warm up
  const auto before = rig::allocator_stats();
  for (int i = 0; i < 100; ++i) step();
  const auto after = rig::allocator_stats();
  EXPECT_EQ(after.system_allocations, before.system_allocations);
  EXPECT_EQ(after.requests, before.requests + 400);
  EXPECT_EQ(after.current_bytes, before.current_bytes);
}

TEST(TensorAllocator, PeakTracksTheMaximumAndEmptyCacheReleases) {
  rig::reset_peak_bytes();
  const auto base = rig::allocator_stats();
  EXPECT_EQ(base.peak_bytes, base.current_bytes);
  {
    Tensor big = Tensor::empty({1 << 20});  // 4 MiB
    Tensor other = Tensor::empty({1 << 18});
    const auto s = rig::allocator_stats();
    EXPECT_EQ(s.current_bytes, base.current_bytes + (4U << 20U) + (1U << 20U));
    EXPECT_EQ(s.peak_bytes, s.current_bytes);
  }
  const auto after = rig::allocator_stats();
  EXPECT_EQ(after.current_bytes, base.current_bytes);
  EXPECT_EQ(after.peak_bytes, base.current_bytes + (5U << 20U));
  if (caching()) {
    EXPECT_GE(after.cached_bytes, 5U << 20U);
  }
  rig::empty_allocator_cache();
  EXPECT_EQ(rig::allocator_stats().cached_bytes, 0U);
  rig::reset_peak_bytes();
  EXPECT_EQ(rig::allocator_stats().peak_bytes, rig::allocator_stats().current_bytes);
  EXPECT_THROW(rig::allocator_stats(rig::Device::cuda(0)), std::invalid_argument);
}

TEST(TensorAllocator, StoragesAreAlignedAndThreadSafe) {
  std::vector<std::thread> threads;
  std::atomic<int> misaligned{0};
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 2000; ++i) {
        Tensor x = Tensor::empty({(i * 7 + t) % 300 + 1}, rig::DType::u8);
        misaligned += reinterpret_cast<std::uintptr_t>(x.raw_data()) % 64 != 0;
        x.fill_(static_cast<float>(t));
        if (x.to_int_vector().back() != t) ++misaligned;
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(misaligned.load(), 0);
}

}  // namespace
