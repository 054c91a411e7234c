// CUDA runtime errors as exceptions inside librig_cuda and the GPU tests.
#pragma once

#include <stdexcept>
#include <string>

#include <cuda_runtime_api.h>

namespace rig::cuda {

class CudaError : public std::runtime_error {
 public:
  CudaError(cudaError_t code, const std::string& what) : std::runtime_error(what), code_(code) {}
  cudaError_t code() const { return code_; }

 private:
  cudaError_t code_;
};

// Throws CudaError naming `call` and where it was made unless `code` is cudaSuccess.
void check(cudaError_t code, const char* call, const char* file, int line);

}  // namespace rig::cuda

#define RIG_CUDA_CHECK(call) ::rig::cuda::check((call), #call, __FILE__, __LINE__)
