// The interface between librig and librig_cuda (core/cuda/runtime). librig
// never links the CUDA runtime: it loads librig_cuda with dlopen at start-up
// and reaches it only through this table, so rig runs on machines where no
// CUDA library is installed. Plain C types only, and no exception crosses it.
#pragma once

#include <cstddef>
#include <memory>

namespace rig::cuda {

// Bumped whenever a field or a function below changes meaning; librig refuses
// a back end of another version.
inline constexpr int kBackendAbiVersion = 1;
// The symbol librig looks up with dlsym.
inline constexpr const char* kBackendEntryPoint = "rig_cuda_backend";

enum class ProbeStatus : int {
  ok = 0,          // device_count >= 1
  no_driver = 1,   // libcuda.so.1 is not installed
  old_driver = 2,  // the driver supports an older CUDA than the runtime in librig_cuda
  no_device = 3,   // a driver, but no visible device
  error = 4,       // any other CUDA error; see message
};

struct ProbeResult {
  ProbeStatus status = ProbeStatus::error;
  int driver_version = 0;   // cudaDriverGetVersion: 1000 * major + 10 * minor, 0 without a driver
  int runtime_version = 0;  // the CUDA runtime linked into librig_cuda
  int device_count = 0;     // visible devices (CUDA_VISIBLE_DEVICES applied by the driver)
  char message[512] = {};   // the CUDA error text when status is not ok
};

struct DeviceDescription {
  int compute_major = 0;
  int compute_minor = 0;
  std::size_t total_bytes = 0;
  char name[256] = {};
  char message[256] = {};  // the CUDA error text when describe_device fails
};

struct BackendTable {
  int abi_version;
  // Whether the back end runs tensor ops (kernels). 0 for the device runtime
  // alone: the engine then keeps every run on the CPU.
  int runs_ops;
  // CMAKE_CUDA_ARCHITECTURES the device code was compiled for, comma-separated ("80-real,90").
  const char* architectures;
  // Queries the driver; creates no CUDA context.
  void (*probe)(ProbeResult* out);
  // Describes visible device `index`; returns 0 on success.
  int (*describe_device)(int index, DeviceDescription* out);
};

// The factory of the op back end (a C++ backend::Backend, see DESIGN.md's
// "librig / librig_cuda boundary"): librig looks it up with dlsym once the
// probe has loaded librig_cuda. Both sides are built from the same headers by
// the same compiler; kFactoryVersion guards against a stale librig_cuda.
inline constexpr const char* kBackendFactory = "rig_cuda_make_backend";
inline constexpr int kFactoryVersion = 1;

}  // namespace rig::cuda

namespace rig::backend {
class Backend;
}

// The symbols librig_cuda exports for librig (kBackendEntryPoint, kBackendFactory).
extern "C" const rig::cuda::BackendTable* rig_cuda_backend();
// Makes the back end of visible device `device` into *out; returns 0, or
// non-zero with the reason in error[error_bytes] (no exception crosses).
using RigCudaMakeBackend = int (*)(int factory_version, int device,
                                   std::unique_ptr<rig::backend::Backend>* out, char* error,
                                   std::size_t error_bytes);
