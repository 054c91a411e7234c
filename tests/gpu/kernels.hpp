// The GPU tests' own kernels (kernels.cu), callable from plain C++.
#pragma once

#include <cuda_runtime_api.h>

namespace rig_gpu_test {

// Queues a kernel on `stream` that first spins for about `cycles` GPU clock
// cycles, then writes `value` to data[0, n): long enough that the host and
// other streams see it still running.
void launch_slow_fill(float* data, int n, float value, long long cycles, cudaStream_t stream);

// About 75 ms of spinning at 2 GHz, 150 ms at 1 GHz.
constexpr long long kSlowCycles = 150'000'000;

}  // namespace rig_gpu_test
