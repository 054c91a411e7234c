// Pinned host buffers and asynchronous copies on a real device: a round trip,
// a copy call that returns while the stream is busy, a copy that overlaps a
// kernel on another stream, and bounds.
#include <gtest/gtest.h>

#include <cstring>
#include <stdexcept>

#include "cuda/runtime/copies.hpp"
#include "cuda/runtime/device_memory.hpp"
#include "cuda/runtime/event.hpp"
#include "cuda/runtime/pinned_buffer.hpp"
#include "cuda/runtime/stream.hpp"
#include "gpu_test.hpp"

namespace {

using rig::cuda::DeviceBuffer;
using rig::cuda::PinnedBuffer;
using rig::cuda::Stream;
using rig_gpu_test::kDevice;
using rig_gpu_test::kSlowCycles;

class GpuCopies : public rig_gpu_test::GpuTest {};

void fill_pattern(PinnedBuffer& buffer) {
  for (std::size_t i = 0; i < buffer.size(); ++i) {
    buffer.data()[i] = static_cast<std::byte>((i * 131 + 7) % 251);
  }
}

TEST_F(GpuCopies, RoundTripThroughPinnedBuffers) {
  constexpr std::size_t bytes = (8 << 20) + 123;
  Stream stream(kDevice);
  PinnedBuffer in(bytes);
  PinnedBuffer out(bytes);
  cudaPointerAttributes attributes{};
  ASSERT_EQ(cudaPointerGetAttributes(&attributes, in.data()), cudaSuccess);
  EXPECT_EQ(attributes.type, cudaMemoryTypeHost);  // page-locked, not pageable
  fill_pattern(in);
  std::memset(out.data(), 0, bytes);
  DeviceBuffer device(bytes, stream);
  rig::cuda::copy_to_device_async(device.data(), in, bytes, stream);
  rig::cuda::copy_to_host_async(out, device.data(), bytes, stream);
  stream.synchronize();
  EXPECT_EQ(std::memcmp(in.data(), out.data(), bytes), 0);
}

TEST_F(GpuCopies, TheCopyCallReturnsBeforeTheCopyRuns) {
  constexpr std::size_t bytes = 1 << 20;
  Stream stream(kDevice);
  PinnedBuffer in(bytes);
  PinnedBuffer out(bytes);
  fill_pattern(in);
  DeviceBuffer device(bytes, stream);
  rig_gpu_test::launch_slow_fill(reinterpret_cast<float*>(device.data()), 1, 0.0F, kSlowCycles,
                                 stream.native());
  rig::cuda::copy_to_device_async(device.data(), in, bytes, stream);
  if (rig_gpu_test::launches_run_asynchronously()) {
    EXPECT_FALSE(stream.idle());  // queued behind the kernel, and the host went on
  }
  rig::cuda::copy_to_host_async(out, device.data(), bytes, stream);
  stream.synchronize();
  // The copy ran after the kernel: the kernel's write to the first float was overwritten.
  EXPECT_EQ(std::memcmp(in.data(), out.data(), bytes), 0);
}

TEST_F(GpuCopies, ACopyOverlapsAKernelOnAnotherStream) {
  constexpr std::size_t bytes = 64 << 20;
  Stream compute(kDevice);
  Stream copy(kDevice);
  DeviceBuffer busy(sizeof(float), compute);
  PinnedBuffer in(bytes);
  fill_pattern(in);
  DeviceBuffer device(bytes, copy);
  rig_gpu_test::launch_slow_fill(reinterpret_cast<float*>(busy.data()), 1, 0.0F, kSlowCycles,
                                 compute.native());
  rig::cuda::Event copied;
  rig::cuda::copy_to_device_async(device.data(), in, bytes, copy);
  copied.record(copy);
  copied.synchronize();
  // 64 MiB take a few ms over PCIe or NVLink-C2C; the kernel spins ~75 ms.
  if (rig_gpu_test::launches_run_asynchronously()) {
    EXPECT_FALSE(compute.idle()) << "the copy did not run while the kernel did";
  }
  compute.synchronize();
  PinnedBuffer out(bytes);
  rig::cuda::copy_to_host_async(out, device.data(), bytes, copy);
  copy.synchronize();
  EXPECT_EQ(std::memcmp(in.data(), out.data(), bytes), 0);
}

TEST_F(GpuCopies, ACopyLargerThanItsPinnedBufferIsRefused) {
  Stream stream(kDevice);
  PinnedBuffer small(100);
  DeviceBuffer device(1000, stream);
  EXPECT_THROW(rig::cuda::copy_to_device_async(device.data(), small, 101, stream),
               std::invalid_argument);
  EXPECT_THROW(rig::cuda::copy_to_host_async(small, device.data(), 101, stream),
               std::invalid_argument);
  rig::cuda::copy_to_device_async(device.data(), small, 0, stream);  // nothing to do
  stream.synchronize();
}

TEST_F(GpuCopies, PinnedBuffersAreOwnedAndMovable) {
  PinnedBuffer a(4096);
  std::byte* p = a.data();
  PinnedBuffer b(std::move(a));
  EXPECT_EQ(b.data(), p);
  EXPECT_EQ(b.size(), 4096U);
  EXPECT_EQ(a.data(), nullptr);  // NOLINT(bugprone-use-after-move): moved-from is empty
  EXPECT_EQ(a.size(), 0U);
  PinnedBuffer empty;
  EXPECT_EQ(empty.data(), nullptr);
  b = std::move(empty);
  EXPECT_EQ(b.data(), nullptr);
}

}  // namespace
