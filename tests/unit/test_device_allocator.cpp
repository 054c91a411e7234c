// The CUDA caching allocator's bookkeeping, on the CPU with a fake device
// memory source: size classes, large blocks as pieces of segments (split,
// merged, reused across shapes), reuse on the same stream without waiting,
// cross-stream uses held back until their markers complete, exact counters,
// out-of-memory retries, caching off, empty_cache and thread safety.
#include <gtest/gtest.h>

#include <cstdlib>
#include <map>
#include <mutex>
#include <new>
#include <random>
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
constexpr std::size_t kMiB = std::size_t{1} << 20U;

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
  std::size_t live_bytes() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return live_bytes_;
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
  // Above 1 MiB: pieces of segments, multiples of 512 B.
  EXPECT_EQ(DeviceCachingAllocator::round_size(kMiB + 1), kMiB + 512);
  EXPECT_EQ(DeviceCachingAllocator::round_size(411041792), 411041792U);  // 256x64x112x112 bf16
  EXPECT_EQ(DeviceCachingAllocator::segment_size(kMiB + 512), 20 * kMiB);
  EXPECT_EQ(DeviceCachingAllocator::segment_size(10 * kMiB), 20 * kMiB);
  EXPECT_EQ(DeviceCachingAllocator::segment_size(10 * kMiB + 512), 12 * kMiB);
  EXPECT_EQ(DeviceCachingAllocator::segment_size(411041792), 392 * kMiB);  // exact
  EXPECT_EQ(DeviceCachingAllocator::segment_size(411041793), 394 * kMiB);
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
  for (std::size_t bytes = 1; bytes <= kMiB; bytes = bytes * 9 / 8 + 1) {
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

TEST(DeviceAllocator, LargeBlocksArePiecesOfASharedSegment) {
  FakeDevice device;
  DeviceCachingAllocator a(device, true);
  const DeviceBlock first = a.allocate(3 * kMiB, kStreamA);
  const DeviceBlock second = a.allocate(4 * kMiB + 1, kStreamA);
  EXPECT_EQ(first.capacity, 3 * kMiB);  // no size class: exact to 512 B
  EXPECT_EQ(second.capacity, 4 * kMiB + 512);
  EXPECT_EQ(second.data, first.data + 3 * kMiB);  // the same 20 MiB segment
  EXPECT_EQ(device.allocations, 1);
  EXPECT_EQ(device.live_bytes(), 20 * kMiB);
  auto s = a.stats();
  EXPECT_EQ(s.current_bytes, 7 * kMiB + 512);
  EXPECT_EQ(s.cached_bytes, 20 * kMiB - s.current_bytes);
  EXPECT_EQ(s.system_allocations, 1U);
  a.deallocate(first);
  a.deallocate(second);
  s = a.stats();
  EXPECT_EQ(s.current_bytes, 0U);
  EXPECT_EQ(s.cached_bytes, 20 * kMiB);
  a.empty_cache();  // the pieces merged back into the whole segment
  EXPECT_EQ(device.live_blocks(), 0U);
  EXPECT_EQ(a.stats().cached_bytes, 0U);
}

TEST(DeviceAllocator, ARestOfAtMostOneMiBStaysWithTheBlock) {
  FakeDevice device;
  DeviceCachingAllocator a(device, true);
  // 50 MiB + 1 B: a 52 MiB segment; the 2 MiB - 512 B left is split off.
  const DeviceBlock split = a.allocate(50 * kMiB + 1, kStreamA);
  EXPECT_EQ(split.capacity, 50 * kMiB + 512);
  EXPECT_EQ(a.stats().cached_bytes, 2 * kMiB - 512);
  // 19.5 MiB from a new 20 MiB segment: the 0.5 MiB left is too small to split.
  const DeviceBlock whole = a.allocate(19 * kMiB + kMiB / 2, kStreamA);
  EXPECT_EQ(whole.capacity, 20 * kMiB);
  EXPECT_EQ(device.allocations, 2);
  // The split-off rest serves a request that fits it.
  const DeviceBlock rest = a.allocate(kMiB + kMiB / 2, kStreamA);
  EXPECT_EQ(rest.data, split.data + split.capacity);
  EXPECT_EQ(rest.capacity, 2 * kMiB - 512);
  EXPECT_EQ(device.allocations, 2);
  EXPECT_EQ(a.stats().cached_bytes, 0U);
  for (const auto& b : {split, whole, rest}) a.deallocate(b);
  a.empty_cache();
  EXPECT_EQ(device.live_blocks(), 0U);
}

TEST(DeviceAllocator, FreedLargeBlocksServeOtherShapes) {
  FakeDevice device;
  DeviceCachingAllocator a(device, true);
  constexpr std::size_t kActivation = 411041792;  // 256 x 64 x 112 x 112 bf16
  const DeviceBlock big = a.allocate(kActivation, kStreamA);
  a.deallocate(big);
  // Two halves, then a quarter and a three-quarter block: all from the one segment.
  const DeviceBlock h1 = a.allocate(kActivation / 2, kStreamA);
  const DeviceBlock h2 = a.allocate(kActivation / 2, kStreamA);
  EXPECT_EQ(h1.data, big.data);
  EXPECT_EQ(h2.data, big.data + kActivation / 2);
  a.deallocate(h1);
  a.deallocate(h2);  // merges with h1 and the segment's rest
  const DeviceBlock q = a.allocate(kActivation / 4, kStreamA);
  const DeviceBlock q3 = a.allocate(3 * (kActivation / 4), kStreamA);
  EXPECT_EQ(q.data, big.data);
  EXPECT_EQ(q3.data, big.data + kActivation / 4);
  EXPECT_EQ(device.allocations, 1);
  EXPECT_EQ(a.stats().system_allocations, 1U);
  // Smallest piece that fits: freeing q and asking for less takes q's piece,
  // not the segment's larger rest.
  a.deallocate(q);
  const DeviceBlock small = a.allocate(kActivation / 8, kStreamA);
  EXPECT_EQ(small.data, big.data);
  for (const auto& b : {q3, small}) a.deallocate(b);
  EXPECT_EQ(a.stats().cached_bytes, 392 * kMiB);
  a.empty_cache();
  EXPECT_EQ(device.live_blocks(), 0U);
}

TEST(DeviceAllocator, LargePiecesStayWithTheirStream) {
  FakeDevice device;
  DeviceCachingAllocator a(device, true);
  const DeviceBlock on_a = a.allocate(64 * kMiB, kStreamA);
  a.deallocate(on_a);
  const DeviceBlock on_b = a.allocate(32 * kMiB, kStreamB);
  EXPECT_NE(on_b.data, on_a.data);
  EXPECT_EQ(device.allocations, 2);
  EXPECT_EQ(a.allocate(32 * kMiB, kStreamA).data, on_a.data);
  a.deallocate(on_b);
}

TEST(DeviceAllocator, ALargePieceUsedOnAnotherStreamWaitsAndDoesNotMerge) {
  FakeDevice device;
  DeviceCachingAllocator a(device, true);
  const DeviceBlock first = a.allocate(4 * kMiB, kStreamA);
  const DeviceBlock second = a.allocate(4 * kMiB, kStreamA);
  const StreamId used_on[] = {kStreamB};
  a.deallocate(first, used_on);
  a.deallocate(second);  // free, but cannot merge with the pending first
  EXPECT_EQ(device.live_markers(), 1U);
  // Stream B has not finished: the request takes the free rest, not `first`.
  const DeviceBlock while_busy = a.allocate(6 * kMiB, kStreamA);
  EXPECT_EQ(while_busy.data, second.data);
  device.finish(kStreamB);
  const DeviceBlock after = a.allocate(4 * kMiB, kStreamA);
  EXPECT_EQ(after.data, first.data);
  EXPECT_EQ(device.live_markers(), 0U);
  EXPECT_EQ(device.waits, 0);
  EXPECT_EQ(device.allocations, 1);
  a.deallocate(while_busy);
  a.deallocate(after);
  a.empty_cache();
  EXPECT_EQ(device.live_blocks(), 0U);
}

TEST(DeviceAllocator, LargeOutOfMemoryGivesFreeSegmentsBackAndWaitsForPendingPieces) {
  FakeDevice device(64 * kMiB);
  DeviceCachingAllocator a(device, true);
  a.deallocate(a.allocate(30 * kMiB, kStreamA));
  // 30 MiB cached on stream A + 40 MiB > 64 MiB: refused, the free segment
  // goes back, then the retry fits.
  const DeviceBlock on_b = a.allocate(40 * kMiB, kStreamB);
  EXPECT_EQ(device.refused, 1);
  EXPECT_EQ(a.stats().cached_bytes, 0U);
  // A piece pending on stream A is freed after waiting for A: the second retry.
  const StreamId used_on[] = {kStreamA};
  a.deallocate(on_b, used_on);
  const DeviceBlock next = a.allocate(60 * kMiB, kStreamA);
  EXPECT_EQ(device.refused, 3);
  EXPECT_EQ(device.waits, 1);
  EXPECT_EQ(a.stats().current_bytes, 60 * kMiB);
  EXPECT_EQ(device.live_markers(), 0U);
  a.deallocate(next);
}

TEST(DeviceAllocator, LargeOutOfMemoryReusesAPieceThatWaitingFreed) {
  FakeDevice device(64 * kMiB);
  DeviceCachingAllocator a(device, true);
  const DeviceBlock held = a.allocate(32 * kMiB, kStreamA);
  const DeviceBlock shared = a.allocate(32 * kMiB, kStreamA);
  const StreamId used_on[] = {kStreamB};
  a.deallocate(shared, used_on);
  // No room for a new segment, and the only cached piece is pending on B:
  // after waiting for B it is free, and the request takes it.
  const DeviceBlock again = a.allocate(32 * kMiB, kStreamA);
  EXPECT_EQ(again.data, shared.data);
  EXPECT_EQ(device.waits, 1);
  a.deallocate(held);
  a.deallocate(again);
}

// Random large and small requests on two streams: blocks never overlap, the
// counters always add up to what the source holds, and everything goes back.
TEST(DeviceAllocator, RandomRequestsKeepBlocksDisjointAndCountersExact) {
  FakeDevice device;
  DeviceCachingAllocator a(device, true);
  std::mt19937_64 random(7);
  std::map<std::byte*, DeviceBlock> live;
  std::size_t peak = 0;
  std::size_t reserved_peak = 0;
  for (int i = 0; i < 4000; ++i) {
    if (live.size() < 40 && (live.empty() || random() % 3 != 0)) {
      const std::size_t bytes =
          random() % 4 == 0 ? 1 + random() % kMiB : 1 + random() % (48 * kMiB);
      const StreamId stream = random() % 5 == 0 ? kStreamB : kStreamA;
      const DeviceBlock b = a.allocate(bytes, stream);
      ASSERT_GE(b.capacity, bytes);
      ASSERT_EQ(b.stream, stream);
      ASSERT_EQ(reinterpret_cast<std::uintptr_t>(b.data) % 512, 0U);
      // Disjoint from its neighbours by address.
      const auto next = live.lower_bound(b.data);
      if (next != live.end()) {
        ASSERT_LE(b.data + b.capacity, next->first);
      }
      if (next != live.begin()) {
        const auto& before = std::prev(next)->second;
        ASSERT_LE(before.data + before.capacity, b.data);
      }
      live[b.data] = b;
    } else {
      auto it = live.begin();
      std::advance(it, static_cast<std::ptrdiff_t>(random() % live.size()));
      const StreamId used_on[] = {kStreamB};
      a.deallocate(it->second, random() % 4 == 0 ? std::span<const StreamId>(used_on)
                                                 : std::span<const StreamId>());
      live.erase(it);
      if (random() % 7 == 0) device.finish(kStreamB);
    }
    std::size_t in_use = 0;
    for (const auto& [data, b] : live) in_use += b.capacity;
    const auto s = a.stats();
    ASSERT_EQ(s.current_bytes, in_use);
    ASSERT_EQ(s.current_bytes + s.cached_bytes, device.live_bytes());
    peak = std::max(peak, in_use);
    reserved_peak = std::max(reserved_peak, device.live_bytes());
  }
  EXPECT_EQ(a.stats().peak_bytes, peak);
  EXPECT_EQ(a.stats().peak_reserved_bytes, reserved_peak);
  for (const auto& [data, b] : live) a.deallocate(b);
  a.empty_cache();
  EXPECT_EQ(device.live_blocks(), 0U);
  EXPECT_EQ(device.live_markers(), 0U);
  EXPECT_EQ(a.stats().cached_bytes, 0U);
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
  EXPECT_EQ(s.peak_reserved_bytes, b1.capacity + b2.capacity);
  a.reset_peak();
  EXPECT_EQ(a.stats().peak_bytes, b1.capacity);
  EXPECT_EQ(a.stats().peak_reserved_bytes, b1.capacity + b2.capacity);  // b2 is cached
  const DeviceBlock b3 = a.allocate(99000, kStreamA);                   // b2's class
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

TEST(DeviceAllocator, ARequestNearTheEndOfTheAddressSpaceIsRefused) {
  FakeDevice device;
  DeviceCachingAllocator a(device, true);
  // Rounding them up (to a segment of 2 MiB steps, to 512 B) would wrap around.
  EXPECT_THROW(a.allocate(~std::size_t{0} - kMiB, kStreamA), std::bad_alloc);
  EXPECT_THROW(a.allocate(~std::size_t{0}, kStreamA), std::bad_alloc);
  EXPECT_EQ(device.allocations, 0);
  EXPECT_EQ(a.stats().current_bytes, 0U);
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
        // Every fifth request large: a piece of a segment.
        const std::size_t bytes = static_cast<std::size_t>(512 * (1 + (i * 7 + t) % 40));
        held.push_back(a.allocate(i % 5 == 0 ? bytes * 200 : bytes, stream));
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
