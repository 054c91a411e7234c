// The CUDA caching allocator's bookkeeping, on the CPU with a fake device
// memory source: size classes, reuse on the same stream without waiting,
// cross-stream uses held back until their markers complete, exact counters,
// out-of-memory retries, caching off, empty_cache and thread safety.
#include <gtest/gtest.h>

#include <cstdlib>
#include <map>
#include <mutex>
#include <new>
#include <set>
#include <thread>
#include <vector>

#include "cuda/allocator/device_caching_allocator.hpp"

namespace {

using rig::cuda::DeviceBlock;
using rig::cuda::DeviceCachingAllocator;
using rig::cuda::DeviceMemorySource;
using rig::cuda::StreamId;

constexpr StreamId kStreamA = 0x1000;
constexpr StreamId kStreamB = 0x2000;

// Host memory standing in for a device, with a byte limit, and markers whose
// completion the test controls: finish(stream) completes what was recorded on
// it so far, as a GPU finishing a stream's queued work would.
class FakeDevice final : public DeviceMemorySource {
 public:
  explicit FakeDevice(std::size_t limit = std::size_t{1} << 40U) : limit_(limit) {}
  ~FakeDevice() override {
    for (auto& [p, bytes] : live_) std::free(p);
  }

  std::byte* allocate(std::size_t bytes) override {
    std::lock_guard<std::mutex> lock(mutex_);
    ++allocations;
    if (live_bytes_ + bytes > limit_) {
      ++refused;
      throw std::bad_alloc();
    }
    auto* p = static_cast<std::byte*>(std::aligned_alloc(512, bytes));
    live_[p] = bytes;
    live_bytes_ += bytes;
    return p;
  }
  void release(std::byte* data) noexcept override {
    std::lock_guard<std::mutex> lock(mutex_);
    live_bytes_ -= live_.at(data);
    live_.erase(data);
    std::free(data);
    ++releases;
  }
  Marker record(StreamId stream) override {
    std::lock_guard<std::mutex> lock(mutex_);
    const Marker m = next_marker_++;
    markers_[m] = {stream, false};
    return m;
  }
  bool completed(Marker marker) override {
    std::lock_guard<std::mutex> lock(mutex_);
    return markers_.at(marker).done;
  }
  void wait(Marker marker) override {
    std::lock_guard<std::mutex> lock(mutex_);
    markers_.at(marker).done = true;  // the host blocked until the GPU got there
    ++waits;
  }
  void release_marker(Marker marker) noexcept override {
    std::lock_guard<std::mutex> lock(mutex_);
    markers_.erase(marker);
  }

  void finish(StreamId stream) {
    std::lock_guard<std::mutex> lock(mutex_);
    for (auto& [m, state] : markers_) {
      if (state.stream == stream) state.done = true;
    }
  }
  std::size_t live_blocks() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return live_.size();
  }
  std::size_t live_markers() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return markers_.size();
  }

  int allocations = 0;
  int refused = 0;
  int releases = 0;
  int waits = 0;

 private:
  struct MarkerState {
    StreamId stream;
    bool done;
  };
  const std::size_t limit_;
  mutable std::mutex mutex_;
  std::map<std::byte*, std::size_t> live_;
  std::size_t live_bytes_ = 0;
  std::map<Marker, MarkerState> markers_;
  Marker next_marker_ = 1;
};

TEST(DeviceAllocator, SizeClasses) {
  EXPECT_EQ(DeviceCachingAllocator::round_size(0), 512U);
  EXPECT_EQ(DeviceCachingAllocator::round_size(1), 512U);
  EXPECT_EQ(DeviceCachingAllocator::round_size(512), 512U);
  EXPECT_EQ(DeviceCachingAllocator::round_size(513), 1024U);
  EXPECT_EQ(DeviceCachingAllocator::round_size(4096), 4096U);
  EXPECT_EQ(DeviceCachingAllocator::round_size(4097), 4608U);  // 4096 + 4096 / 8
  EXPECT_EQ(DeviceCachingAllocator::round_size(1000000), 1048576U);
  EXPECT_EQ(DeviceCachingAllocator::round_size(900000), 917504U);
  for (std::size_t bytes = 1; bytes < (std::size_t{1} << 40U); bytes = bytes * 3 / 2 + 1) {
    const auto r = DeviceCachingAllocator::round_size(bytes);
    EXPECT_GE(r, bytes);
    EXPECT_EQ(r % 512, 0U);
    EXPECT_LE(static_cast<double>(r), 1.125 * static_cast<double>(bytes) + 512);
  }
}

TEST(DeviceAllocator, EverySizeClassIsReusedAndReleasedWithItsCapacity) {
  FakeDevice device;
  DeviceCachingAllocator a(device, true);
  std::vector<std::size_t> sizes;
  for (std::size_t bytes = 1; bytes < (std::size_t{1} << 24U); bytes = bytes * 9 / 8 + 1) {
    sizes.push_back(bytes);
  }
  std::vector<DeviceBlock> blocks;
  std::size_t total = 0;
  for (auto bytes : sizes) {
    blocks.push_back(a.allocate(bytes, kStreamA));
    total += blocks.back().capacity;
  }
  for (const auto& b : blocks) a.deallocate(b);
  EXPECT_EQ(a.stats().cached_bytes, total);
  const auto system = a.stats().system_allocations;
  std::set<std::byte*> first_round;
  for (const auto& b : blocks) first_round.insert(b.data);
  blocks.clear();
  for (auto bytes : sizes) {
    blocks.push_back(a.allocate(bytes, kStreamA));
    EXPECT_TRUE(first_round.count(blocks.back().data)) << bytes;
  }
  EXPECT_EQ(a.stats().system_allocations, system);
  EXPECT_EQ(a.stats().cached_bytes, 0U);
  for (const auto& b : blocks) a.deallocate(b);
  // empty_cache takes each block's capacity from its size class: exact only if
  // every class maps back to its own capacity.
  a.empty_cache();
  EXPECT_EQ(a.stats().cached_bytes, 0U);
  EXPECT_EQ(device.live_blocks(), 0U);
}

TEST(DeviceAllocator, ReusesOnTheSameStreamWithoutWaiting) {
  FakeDevice device;
  DeviceCachingAllocator a(device, true);
  const DeviceBlock first = a.allocate(1000, kStreamA);
  EXPECT_EQ(first.capacity, 1024U);
  EXPECT_EQ(first.stream, kStreamA);
  a.deallocate(first);
  // Same class, same stream: the cached block, with no marker and no wait.
  const DeviceBlock second = a.allocate(600, kStreamA);
  EXPECT_EQ(second.data, first.data);
  EXPECT_EQ(device.allocations, 1);
  EXPECT_EQ(device.live_markers(), 0U);
  EXPECT_EQ(device.waits, 0);
  a.deallocate(second);
}

TEST(DeviceAllocator, AnotherStreamGetsItsOwnBlock) {
  FakeDevice device;
  DeviceCachingAllocator a(device, true);
  const DeviceBlock on_a = a.allocate(1 << 20, kStreamA);
  a.deallocate(on_a);
  // Work on stream A may still use the block: stream B must not get it.
  const DeviceBlock on_b = a.allocate(1 << 20, kStreamB);
  EXPECT_NE(on_b.data, on_a.data);
  EXPECT_EQ(a.stats().system_allocations, 2U);
  a.deallocate(on_b);
  EXPECT_EQ(a.allocate(1 << 20, kStreamA).data, on_a.data);
  EXPECT_EQ(a.allocate(1 << 20, kStreamB).data, on_b.data);
}

TEST(DeviceAllocator, BlockUsedOnAnotherStreamWaitsForThatStream) {
  FakeDevice device;
  DeviceCachingAllocator a(device, true);
  const DeviceBlock block = a.allocate(8192, kStreamA);
  const StreamId used_on[] = {kStreamB, kStreamA};  // its own stream needs no marker
  a.deallocate(block, used_on);
  EXPECT_EQ(device.live_markers(), 1U);
  // Stream B has not finished: the block is held back, a new one is made.
  const DeviceBlock while_busy = a.allocate(8192, kStreamA);
  EXPECT_NE(while_busy.data, block.data);
  device.finish(kStreamB);
  const DeviceBlock after = a.allocate(8192, kStreamA);
  EXPECT_EQ(after.data, block.data);
  EXPECT_EQ(device.live_markers(), 0U);  // the completed marker went back
  EXPECT_EQ(device.waits, 0);            // never blocked the host
  a.deallocate(while_busy);
  a.deallocate(after);
}

TEST(DeviceAllocator, CountsExactly) {
  FakeDevice device;
  DeviceCachingAllocator a(device, true);
  const DeviceBlock b1 = a.allocate(1000, kStreamA);
  const DeviceBlock b2 = a.allocate(100000, kStreamA);
  auto s = a.stats();
  EXPECT_EQ(s.current_bytes, b1.capacity + b2.capacity);
  EXPECT_EQ(s.peak_bytes, b1.capacity + b2.capacity);
  EXPECT_EQ(s.cached_bytes, 0U);
  EXPECT_EQ(s.requests, 2U);
  EXPECT_EQ(s.system_allocations, 2U);
  a.deallocate(b2);
  s = a.stats();
  EXPECT_EQ(s.current_bytes, b1.capacity);
  EXPECT_EQ(s.peak_bytes, b1.capacity + b2.capacity);
  EXPECT_EQ(s.cached_bytes, b2.capacity);
  a.reset_peak();
  EXPECT_EQ(a.stats().peak_bytes, b1.capacity);
  const DeviceBlock b3 = a.allocate(99000, kStreamA);  // b2's class
  s = a.stats();
  EXPECT_EQ(b3.data, b2.data);
  EXPECT_EQ(s.requests, 3U);
  EXPECT_EQ(s.system_allocations, 2U);
  EXPECT_EQ(s.cached_bytes, 0U);
  EXPECT_EQ(s.current_bytes, b1.capacity + b2.capacity);
  a.deallocate(b1);
  a.deallocate(b3);
  EXPECT_EQ(a.stats().current_bytes, 0U);
  EXPECT_EQ(a.stats().cached_bytes, b1.capacity + b2.capacity);
  a.empty_cache();
  EXPECT_EQ(a.stats().cached_bytes, 0U);
  EXPECT_EQ(device.live_blocks(), 0U);
}

TEST(DeviceAllocator, OutOfMemoryGivesTheCacheBackAndRetries) {
  FakeDevice device(16384);
  DeviceCachingAllocator a(device, true);
  a.deallocate(a.allocate(8192, kStreamA));
  a.deallocate(a.allocate(4096, kStreamB));
  // 12 KiB cached + 8 KiB > 16 KiB: refused once, then served from freed cache.
  const DeviceBlock big = a.allocate(8192 + 512, kStreamA);
  EXPECT_NE(big.data, nullptr);
  EXPECT_EQ(device.refused, 1);
  EXPECT_EQ(a.stats().cached_bytes, 0U);
  EXPECT_EQ(a.stats().current_bytes, big.capacity);
  a.deallocate(big);
}

TEST(DeviceAllocator, OutOfMemoryWaitsForBlocksOtherStreamsStillUse) {
  FakeDevice device(16384);
  DeviceCachingAllocator a(device, true);
  const DeviceBlock shared = a.allocate(16384, kStreamA);
  const StreamId used_on[] = {kStreamB};
  a.deallocate(shared, used_on);
  // The only cached block is pending on stream B: the first retry cannot free
  // it, the second waits for B and then can.
  const DeviceBlock next = a.allocate(16384, kStreamB);
  EXPECT_EQ(device.refused, 2);
  EXPECT_EQ(device.waits, 1);
  EXPECT_EQ(device.live_markers(), 0U);
  EXPECT_EQ(a.stats().current_bytes, 16384U);
  a.deallocate(next);
}

TEST(DeviceAllocator, OutOfMemoryWithNothingCachedThrowsAndCountsNothing) {
  FakeDevice device(4096);
  DeviceCachingAllocator a(device, true);
  const DeviceBlock held = a.allocate(4096, kStreamA);
  EXPECT_THROW(a.allocate(512, kStreamA), std::bad_alloc);
  EXPECT_EQ(device.refused, 1);  // nothing cached: no second try
  EXPECT_EQ(a.stats().current_bytes, 4096U);
  EXPECT_EQ(a.stats().peak_bytes, 4096U);  // a refused request is not counted
  a.deallocate(held);
}

TEST(DeviceAllocator, CachingOffGivesEveryBlockBack) {
  FakeDevice device;
  DeviceCachingAllocator a(device, false);
  const DeviceBlock b = a.allocate(3000, kStreamA);
  const StreamId used_on[] = {kStreamB};
  a.deallocate(b, used_on);
  EXPECT_EQ(device.releases, 1);
  EXPECT_EQ(device.live_markers(), 0U);
  a.deallocate(a.allocate(3000, kStreamA));
  const auto s = a.stats();
  EXPECT_EQ(s.system_allocations, 2U);
  EXPECT_EQ(s.cached_bytes, 0U);
  EXPECT_EQ(s.current_bytes, 0U);
  EXPECT_EQ(s.peak_bytes, 3072U);
}

TEST(DeviceAllocator, EmptyCacheAndDestructionReleaseEverythingAfterPendingWork) {
  FakeDevice device;
  {
    DeviceCachingAllocator a(device, true);
    const StreamId used_on[] = {kStreamB};
    a.deallocate(a.allocate(1 << 16, kStreamA), used_on);
    a.deallocate(a.allocate(1 << 12, kStreamA));
    a.empty_cache();
    EXPECT_EQ(device.waits, 1);
    EXPECT_EQ(device.live_blocks(), 0U);
    EXPECT_EQ(a.stats().cached_bytes, 0U);
    a.deallocate(a.allocate(1 << 16, kStreamA), used_on);
    EXPECT_EQ(device.live_blocks(), 1U);
  }
  EXPECT_EQ(device.waits, 2);
  EXPECT_EQ(device.live_blocks(), 0U);
  EXPECT_EQ(device.live_markers(), 0U);
}

TEST(DeviceAllocator, ThreadsOnTheirOwnStreams) {
  FakeDevice device;
  DeviceCachingAllocator a(device, true);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&a, t] {
      const StreamId stream = 0x100 * static_cast<StreamId>(t + 1);
      std::vector<DeviceBlock> held;
      for (int i = 0; i < 2000; ++i) {
        held.push_back(a.allocate(static_cast<std::size_t>(512 * (1 + (i * 7 + t) % 40)), stream));
        if (held.size() > 8) {
          a.deallocate(held.front());
          held.erase(held.begin());
        }
      }
      for (const auto& b : held) a.deallocate(b);
    });
  }
  for (auto& t : threads) t.join();
  const auto s = a.stats();
  EXPECT_EQ(s.current_bytes, 0U);
  EXPECT_EQ(s.requests, 8000U);
  EXPECT_LT(s.system_allocations, 8000U / 10);  // most requests were reused
  EXPECT_EQ(device.live_blocks(), s.system_allocations);
  a.empty_cache();
  EXPECT_EQ(device.live_blocks(), 0U);
}

}  // namespace
