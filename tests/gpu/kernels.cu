// The GPU tests' own kernel: a slow producer whose result shows whether work
// that should wait for it did.
#include "kernels.hpp"

#include <stdexcept>
#include <string>

namespace rig_gpu_test {
namespace {

__global__ void slow_fill(float* data, int n, float value, long long cycles) {
  if (threadIdx.x == 0) {
    const long long start = clock64();
    while (clock64() - start < cycles) {
    }
  }
  __syncthreads();
  for (int i = static_cast<int>(threadIdx.x); i < n; i += static_cast<int>(blockDim.x)) {
    data[i] = value;
  }
}

}  // namespace

void launch_slow_fill(float* data, int n, float value, long long cycles, cudaStream_t stream) {
  // One block, so that every thread waits for the spin (__syncthreads).
  slow_fill<<<1, 256, 0, stream>>>(data, n, value, cycles);
  const cudaError_t code = cudaGetLastError();
  if (code != cudaSuccess) {
    throw std::runtime_error(std::string("slow_fill launch failed: ") + cudaGetErrorString(code));
  }
}

}  // namespace rig_gpu_test
