// librig_cuda's entry point: the table librig finds with dlsym (backend_abi.hpp).
#include <cstdio>
#include <cstring>

#include <cuda_runtime_api.h>

#include "cuda/backend_abi.hpp"

#ifndef RIG_CUDA_ARCHITECTURES
#error "RIG_CUDA_ARCHITECTURES (CMAKE_CUDA_ARCHITECTURES) must be defined by the build"
#endif

namespace rig::cuda {
namespace {

template <std::size_t N>
void copy_text(char (&out)[N], const char* text) {
  std::snprintf(out, N, "%s", text);
}

void probe(ProbeResult* out) {
  *out = ProbeResult{};
  cudaRuntimeGetVersion(&out->runtime_version);
  // 0 when libcuda.so.1 cannot be loaded: the static runtime loads it with dlopen.
  cudaDriverGetVersion(&out->driver_version);
  int count = 0;
  const cudaError_t code = cudaGetDeviceCount(&count);
  cudaGetLastError();  // a failed probe must not leave a sticky error behind
  copy_text(out->message, code == cudaSuccess ? "" : cudaGetErrorString(code));
  out->device_count = code == cudaSuccess ? count : 0;
  if (out->driver_version == 0 || code == cudaErrorStubLibrary) {
    out->status = ProbeStatus::no_driver;
  } else if (code == cudaErrorInsufficientDriver) {
    out->status = ProbeStatus::old_driver;
  } else if (code == cudaErrorNoDevice || (code == cudaSuccess && count == 0)) {
    out->status = ProbeStatus::no_device;
  } else if (code != cudaSuccess) {
    out->status = ProbeStatus::error;
  } else {
    out->status = ProbeStatus::ok;
  }
}

int describe_device(int index, DeviceDescription* out) {
  *out = DeviceDescription{};
  cudaDeviceProp prop{};
  // Properties come from the driver; no context is created.
  const cudaError_t code = cudaGetDeviceProperties(&prop, index);
  if (code != cudaSuccess) {
    cudaGetLastError();
    copy_text(out->message, cudaGetErrorString(code));
    return 1;
  }
  out->compute_major = prop.major;
  out->compute_minor = prop.minor;
  out->total_bytes = prop.totalGlobalMem;
  copy_text(out->name, prop.name);
  return 0;
}

// The op back end: rig_cuda_make_backend (runtime/gpu_device.cpp).
constexpr int kRunsOps = 1;

const BackendTable kTable{kBackendAbiVersion, kRunsOps, RIG_CUDA_ARCHITECTURES, &probe,
                          &describe_device};

}  // namespace
}  // namespace rig::cuda

extern "C" __attribute__((visibility("default"))) const rig::cuda::BackendTable*
rig_cuda_backend() {
  return &rig::cuda::kTable;
}
