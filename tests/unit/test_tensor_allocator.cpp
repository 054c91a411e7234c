// The caching allocator: size classes, reuse without system allocations,
// large blocks as pieces of segments, exact counters, the cache limit, out of
// memory, alignment, empty_cache, and thread safety.
#include <gtest/gtest.h>

#include <cstdlib>
#include <limits>
#include <map>
#include <random>
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

constexpr std::size_t kMiB = std::size_t{1} << 20U;

// A RawMemory that counts what it hands out, up to `budget` bytes.
struct CountingMemory final : rig::backend::RawMemory {
  int live = 0;
  int allocations = 0;
  std::size_t bytes_live = 0;
  std::size_t budget = std::numeric_limits<std::size_t>::max();
  std::map<std::byte*, std::size_t> sizes;
  std::byte* allocate(std::size_t bytes) override {
    if (bytes > budget - bytes_live) throw std::bad_alloc();
    auto* data = static_cast<std::byte*>(std::aligned_alloc(64, bytes));
    ++live;
    ++allocations;
    bytes_live += bytes;
    sizes[data] = bytes;
    return data;
  }
  void release(std::byte* data) noexcept override {
    --live;
    bytes_live -= sizes[data];
    sizes.erase(data);
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
  // Above 1 MiB: pieces of segments, multiples of 64 B.
  EXPECT_EQ(CachingAllocator::round_size(kMiB + 1), kMiB + 64);
  EXPECT_EQ(CachingAllocator::round_size(100 * kMiB - 63), 100 * kMiB);
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

TEST(TensorAllocator, LargeBlocksArePiecesOfASharedSegment) {
  CountingMemory raw;
  CachingAllocator a(raw, true, std::size_t{1} << 30U);
  const auto first = a.allocate(3 * kMiB);
  const auto second = a.allocate(5 * kMiB);
  EXPECT_EQ(raw.allocations, 1);  // one 20 MiB segment
  EXPECT_EQ(second.data, first.data + 3 * kMiB);
  EXPECT_EQ(a.stats().current_bytes, 8 * kMiB);
  EXPECT_EQ(a.stats().cached_bytes, 12 * kMiB);  // the segment's rest
  EXPECT_EQ(a.stats().peak_reserved_bytes, 20 * kMiB);
  a.deallocate(first);
  a.deallocate(second);
  EXPECT_EQ(a.stats().cached_bytes, 20 * kMiB);
  // The pieces merged: an 8 MiB block fits where the 3 and 5 MiB ones were.
  const auto merged = a.allocate(8 * kMiB);
  EXPECT_EQ(merged.data, first.data);
  EXPECT_EQ(raw.allocations, 1);
  // A block larger than the rest of the segment gets a segment of its own,
  // rounded up to 2 MiB; its rest (1 MiB - 64 B) is too small to split off.
  const auto big = a.allocate(31 * kMiB + 1);
  EXPECT_EQ(big.capacity, 32 * kMiB);
  EXPECT_EQ(raw.allocations, 2);
  a.deallocate(merged);
  a.deallocate(big);
  a.empty_cache();
  EXPECT_EQ(raw.live, 0);
  EXPECT_EQ(a.stats().cached_bytes, 0U);
  EXPECT_EQ(a.stats().current_bytes, 0U);
}

// The Transformer's case: batches of varying shapes. Size classes alone would
// cache a block of every size seen; pieces of segments serve the smaller
// shapes from the largest step's memory.
TEST(TensorAllocator, ALoopOfVaryingShapesReusesTheLargestStepsMemory) {
  CountingMemory raw;
  CachingAllocator a(raw, true, std::size_t{1} << 34U);
  std::mt19937 random(7);
  const auto step = [&](double scale) {
    std::vector<rig::backend::Block> live;
    for (std::size_t layer = 1; layer <= 12; ++layer) {
      const auto bytes = static_cast<std::size_t>(scale * static_cast<double>(layer * kMiB));
      live.push_back(a.allocate(bytes));
      live.push_back(a.allocate(bytes / 3 + kMiB));
    }
    for (const auto& block : live) a.deallocate(block);
  };
  step(1.0);  // the largest step comes first, as bucketed batches can
  const auto first = static_cast<double>(a.stats().peak_reserved_bytes);
  std::uniform_real_distribution<double> scale(0.3, 1.0);
  for (int i = 0; i < 100; ++i) step(scale(random));
  // Best fit leaves some pieces where a larger block cannot go: a few more
  // segments early on, then none.
  const auto reserved = a.stats().peak_reserved_bytes;
  const int segments = raw.allocations;
  EXPECT_LE(static_cast<double>(reserved), 1.1 * first);
  for (int i = 0; i < 1000; ++i) step(scale(random));
  EXPECT_EQ(a.stats().peak_reserved_bytes, reserved);
  EXPECT_EQ(raw.allocations, segments);
  EXPECT_EQ(a.stats().current_bytes, 0U);
}

TEST(TensorAllocator, TheCacheLimitGivesFreeSegmentsBack) {
  CountingMemory raw;
  CachingAllocator a(raw, true, 40 * kMiB);
  std::vector<rig::backend::Block> blocks;
  for (int i = 0; i < 4; ++i) blocks.push_back(a.allocate(15 * kMiB));  // a 16 MiB segment each
  EXPECT_EQ(raw.live, 4);
  for (const auto& block : blocks) a.deallocate(block);
  EXPECT_LE(a.stats().cached_bytes, 40 * kMiB);
  EXPECT_EQ(raw.live, 2);
  EXPECT_EQ(raw.bytes_live, a.stats().cached_bytes);
}

TEST(TensorAllocator, OutOfMemoryGivesTheCacheBackAndTriesAgain) {
  CountingMemory raw;
  raw.budget = 48 * kMiB;
  CachingAllocator a(raw, true, std::size_t{1} << 30U);
  a.deallocate(a.allocate(2 * kMiB));  // a free 20 MiB segment stays cached
  a.deallocate(a.allocate(kMiB));      // and a 1 MiB small block
  EXPECT_EQ(raw.bytes_live, 21 * kMiB);
  const auto big = a.allocate(40 * kMiB);  // only fits once the cache is gone
  EXPECT_EQ(raw.live, 1);
  EXPECT_EQ(a.stats().cached_bytes, 0U);
  EXPECT_THROW(a.allocate(10 * kMiB), std::bad_alloc);  // nothing left to give back
  EXPECT_EQ(a.stats().current_bytes, 40 * kMiB);
  a.deallocate(big);
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
  if (!rig::cuda_emulator_requested()) {  // else cuda:0 is the emulator (see test_tensor_views)
    EXPECT_THROW(rig::allocator_stats(rig::Device::cuda(0)), std::invalid_argument);
  }
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
