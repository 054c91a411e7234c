#include "cuda/runtime/cuda_error.hpp"

#include <string>

namespace rig::cuda {

void check(cudaError_t code, const char* call, const char* file, int line) {
  if (code == cudaSuccess) return;
  // Clear the sticky "last error" of a non-fatal failure, so later calls start clean.
  cudaGetLastError();
  throw CudaError(code, std::string(call) + " failed at " + file + ":" + std::to_string(line) +
                            ": " + cudaGetErrorName(code) + ": " + cudaGetErrorString(code));
}

}  // namespace rig::cuda
