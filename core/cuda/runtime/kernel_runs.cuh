// Runs the kernel bodies of core/cuda/kernels on the GPU: each with the launch
// its plan() gives for the calling thread's current device. The bodies are
// compiled into librig_cuda once (kernel_runs.cu, and kernel_runs_exact.cu for
// the families whose bits must equal the CPU back end's); callers include no
// CUDA kernel code. Throws CudaError when the device refuses a launch.
#pragma once

#include <cuda_runtime_api.h>

#include "cuda/kernels/kernel_list.hpp"

namespace rig::cuda {

template <class Kernel>
void run(const Kernel& kernel, cudaStream_t stream);

#define RIG_CUDA_DECLARE_RUN(K) \
  extern template void run<kernels::K>(const kernels::K&, cudaStream_t);
RIG_CUDA_KERNELS(RIG_CUDA_DECLARE_RUN)
#undef RIG_CUDA_DECLARE_RUN

}  // namespace rig::cuda
