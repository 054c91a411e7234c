// librig's side of the CUDA back end: finds librig_cuda next to librig, loads
// it with dlopen and asks it which GPUs this process can see. Compiled in every
// build (a build without CUDA answers "built without CUDA" without looking).
#pragma once

#include <cstddef>
#include <filesystem>
#include <string>
#include <vector>

namespace rig::cuda {

struct GpuInfo {
  int index = 0;  // among the visible devices (after CUDA_VISIBLE_DEVICES)
  std::string name;
  int compute_major = 0;
  int compute_minor = 0;
  std::size_t total_bytes = 0;
};

struct CudaProbe {
  enum class Status {
    ok,                   // at least one visible device
    built_without_cuda,   // RIG_WITH_CUDA=OFF
    backend_unavailable,  // librig_cuda missing, unloadable or of another ABI version
    no_driver,
    old_driver,
    no_device,
    error,
  };
  Status status = Status::built_without_cuda;
  std::string reason;  // why no GPU can be used, in words; empty when ok
  std::vector<GpuInfo> devices;
  bool runs_ops = false;      // whether the back end has tensor-op kernels
  std::string architectures;  // CMAKE_CUDA_ARCHITECTURES of the back end's device code
};

// Where librig looks for its back end: RIG_CUDA_BACKEND_FILE in librig's folder.
std::filesystem::path cuda_backend_path();

// Loads the back end at `library` and probes it. Never throws: every failure
// is a status and a reason. The library stays loaded for the process's life.
CudaProbe probe_cuda_library(const std::filesystem::path& library);

// probe_cuda_library(cuda_backend_path()) in a CUDA build, once per process;
// built_without_cuda otherwise.
const CudaProbe& probe_cuda();

}  // namespace rig::cuda
