// The definition of rig::cuda::run, included by the translation units that
// instantiate it (kernel_runs.cu, kernel_runs_exact.cu).
#pragma once

#include "cuda/runtime/cuda_context.cuh"
#include "cuda/runtime/device_properties.cuh"
#include "cuda/runtime/kernel_runs.cuh"

namespace rig::cuda {

template <class Kernel>
void run(const Kernel& kernel, cudaStream_t stream) {
  launch(kernel.plan(current_device_properties()), stream, kernel);
}

}  // namespace rig::cuda
