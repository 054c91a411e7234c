// The execution context on a real GPU (simt::CudaContext) against the SIMT
// emulator running the same kernel body: indices, shuffles, dynamic shared
// memory and the collectives give the same bits on both.
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "context_probe.hpp"
#include "cuda/runtime/cuda_context.cuh"
#include "device_array.hpp"
#include "gpu_test.hpp"

namespace {

using rig::simt::Dim3;
using rig::simt::LaunchShape;
using rig_gpu_test::ContextProbe;
using rig_gpu_test::DeviceArray;

class GpuContext : public rig_gpu_test::GpuTest {};

TEST_F(GpuContext, KernelBodiesGiveTheEmulatorsBits) {
  const LaunchShape shape{Dim3{3, 2, 1}, Dim3{64, 2, 2}, 256 * sizeof(float)};
  const std::size_t threads = shape.grid.count() * shape.block.count();
  std::vector<float> x(threads);
  for (std::size_t i = 0; i < threads; ++i) {
    x[i] = static_cast<float>((i * 7919) % 1000) * 0.001F - 0.3F;  // rounding in the sums
  }
  const rig_gpu_test::ProbeOutputs want = rig_gpu_test::emulate_context_probe(shape, x);

  const DeviceArray<float> dx(x);
  DeviceArray<std::uint32_t> ids(want.ids.size());
  DeviceArray<float> shuffled(want.shuffled.size()), reduced(want.reduced.size());
  rig::cuda::launch(shape, nullptr,
                    ContextProbe{dx.data(), ids.data(), shuffled.data(), reduced.data()});
  EXPECT_EQ(ids.to_host(), want.ids);
  EXPECT_EQ(shuffled.to_host(), want.shuffled);
  EXPECT_EQ(reduced.to_host(), want.reduced);  // the same order of additions: the same bits
}

}  // namespace
