// The caching device allocator on a real device: reuse on the allocation
// stream, another stream's own block, large blocks as pieces of a segment, a
// block another stream still uses held back until that stream is done,
// counters, and out of memory.
#include <gtest/gtest.h>

#include <new>
#include <optional>
#include <vector>

#include "cuda/runtime/device_memory.hpp"
#include "cuda/runtime/stream.hpp"
#include "gpu_test.hpp"

namespace {

using rig::cuda::DeviceBuffer;
using rig::cuda::Stream;
using rig_gpu_test::kDevice;
using rig_gpu_test::kSlowCycles;

class GpuAllocator : public rig_gpu_test::GpuTest {
 protected:
  void SetUp() override {
    GpuTest::SetUp();
    if (IsSkipped()) return;
    rig::cuda::device_allocator(kDevice).empty_cache();
    rig::cuda::device_allocator(kDevice).reset_peak();
  }
};

TEST_F(GpuAllocator, ReusesABlockOnItsStreamAndCountsBytes) {
  auto& allocator = rig::cuda::device_allocator(kDevice);
  Stream stream(kDevice);
  const auto before = allocator.stats();
  std::byte* first = nullptr;
  {
    DeviceBuffer a(1 << 20, stream);
    first = a.data();
    ASSERT_NE(first, nullptr);
    EXPECT_EQ(a.capacity(), std::size_t{1} << 20U);
    cudaPointerAttributes attributes{};
    ASSERT_EQ(cudaPointerGetAttributes(&attributes, first), cudaSuccess);
    EXPECT_EQ(attributes.type, cudaMemoryTypeDevice);
    EXPECT_EQ(attributes.device, kDevice);
    ASSERT_EQ(cudaMemsetAsync(first, 1, 1 << 20, stream.native()), cudaSuccess);
    const auto held = allocator.stats();
    EXPECT_EQ(held.current_bytes, before.current_bytes + (1 << 20));
    EXPECT_EQ(held.system_allocations, before.system_allocations + 1);
  }
  EXPECT_EQ(allocator.stats().cached_bytes, before.cached_bytes + (1 << 20));
  // The memset may still be running: reuse on the same stream needs no wait.
  DeviceBuffer b(1'000'000, stream);  // the same 1 MiB size class
  EXPECT_EQ(b.data(), first);
  const auto after = allocator.stats();
  EXPECT_EQ(after.system_allocations, before.system_allocations + 1);
  EXPECT_EQ(after.requests, before.requests + 2);
  EXPECT_EQ(after.current_bytes, before.current_bytes + (1 << 20));
  EXPECT_EQ(after.peak_bytes, before.current_bytes + (1 << 20));
  stream.synchronize();
}

TEST_F(GpuAllocator, AnotherStreamGetsAnotherBlock) {
  Stream one(kDevice);
  Stream two(kDevice);
  std::byte* freed = nullptr;
  {
    DeviceBuffer a(4 << 20, one);
    freed = a.data();
  }
  DeviceBuffer b(4 << 20, two);
  EXPECT_NE(b.data(), freed);
  DeviceBuffer c(4 << 20, one);
  EXPECT_EQ(c.data(), freed);
}

// Large blocks are pieces of one cudaMalloc'd segment: written through
// separately, merged when freed, and the merged piece serves a larger block.
TEST_F(GpuAllocator, LargeBlocksArePiecesOfASegment) {
  constexpr std::size_t kMiB = std::size_t{1} << 20U;
  auto& allocator = rig::cuda::device_allocator(kDevice);
  Stream stream(kDevice);
  const auto before = allocator.stats();
  std::byte* first = nullptr;
  {
    DeviceBuffer a(4 * kMiB, stream);
    DeviceBuffer b(4 * kMiB, stream);
    first = a.data();
    EXPECT_EQ(b.data(), a.data() + 4 * kMiB);
    EXPECT_EQ(allocator.stats().system_allocations, before.system_allocations + 1);
    ASSERT_EQ(cudaMemsetAsync(a.data(), 1, 4 * kMiB, stream.native()), cudaSuccess);
    ASSERT_EQ(cudaMemsetAsync(b.data(), 2, 4 * kMiB, stream.native()), cudaSuccess);
    std::vector<unsigned char> edge(2);
    ASSERT_EQ(
        cudaMemcpyAsync(edge.data(), b.data() - 1, 2, cudaMemcpyDeviceToHost, stream.native()),
        cudaSuccess);
    stream.synchronize();
    EXPECT_EQ(edge, (std::vector<unsigned char>{1, 2}));
  }
  DeviceBuffer merged(12 * kMiB, stream);
  EXPECT_EQ(merged.data(), first);
  EXPECT_EQ(allocator.stats().system_allocations, before.system_allocations + 1);
  ASSERT_EQ(cudaMemsetAsync(merged.data(), 0, 12 * kMiB, stream.native()), cudaSuccess);
  stream.synchronize();
}

TEST_F(GpuAllocator, ABlockAnotherStreamUsesWaitsForThatStream) {
  constexpr int n = 1 << 18;
  Stream owner(kDevice);
  Stream user(kDevice);
  std::byte* freed = nullptr;
  {
    DeviceBuffer data(n * sizeof(float), owner);
    freed = data.data();
    rig_gpu_test::launch_slow_fill(reinterpret_cast<float*>(data.data()), n, 1.0F, kSlowCycles,
                                   user.native());
    data.record_use(user);
  }
  std::optional<DeviceBuffer> while_busy;  // held, so that `after` cannot get its block
  if (rig_gpu_test::launches_run_asynchronously()) {
    ASSERT_FALSE(user.idle());  // the slow kernel still writes the freed block
    while_busy.emplace(n * sizeof(float), owner);
    EXPECT_NE(while_busy->data(), freed);
  }
  user.synchronize();
  DeviceBuffer after(n * sizeof(float), owner);
  EXPECT_EQ(after.data(), freed);
}

TEST_F(GpuAllocator, OutOfMemoryThrowsBadAllocAndCountsNothing) {
  auto& allocator = rig::cuda::device_allocator(kDevice);
  Stream stream(kDevice);
  const auto before = allocator.stats();
  EXPECT_THROW(DeviceBuffer(std::size_t{1} << 50U, stream), std::bad_alloc);  // 1 PiB
  EXPECT_EQ(allocator.stats().current_bytes, before.current_bytes);
  // The failure is not sticky: the device still works.
  DeviceBuffer fine(1 << 20, stream);
  EXPECT_EQ(cudaMemsetAsync(fine.data(), 0, 1 << 20, stream.native()), cudaSuccess);
  stream.synchronize();
}

}  // namespace
