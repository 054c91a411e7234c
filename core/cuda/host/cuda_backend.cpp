#include "cuda/host/cuda_backend.hpp"

#include <dlfcn.h>

#include <cstdlib>
#include <exception>

#include <fmt/format.h>

#include "cuda/backend_abi.hpp"
#include "rig/version.hpp"

#ifndef RIG_CUDA_BACKEND_FILE
#error "RIG_CUDA_BACKEND_FILE (librig_cuda's file name) must be defined by the build"
#endif

namespace rig::cuda {
namespace {

// 13000 -> "13.0".
std::string cuda_version_text(int version) {
  return fmt::format("{}.{}", version / 1000, version % 1000 / 10);
}

std::string visible_devices_note() {
  const char* visible = std::getenv("CUDA_VISIBLE_DEVICES");
  return visible == nullptr ? std::string() : fmt::format(" (CUDA_VISIBLE_DEVICES='{}')", visible);
}

CudaProbe failed(CudaProbe::Status status, std::string reason) {
  CudaProbe probe;
  probe.status = status;
  probe.reason = std::move(reason);
  return probe;
}

CudaProbe from_backend(const BackendTable& table) {
  CudaProbe probe;
  probe.runs_ops = table.runs_ops != 0;
  probe.architectures = table.architectures;
  ProbeResult result;
  table.probe(&result);
  switch (result.status) {
    case ProbeStatus::ok:
      probe.status = CudaProbe::Status::ok;
      break;
    case ProbeStatus::no_driver:
      probe.status = CudaProbe::Status::no_driver;
      probe.reason = "no CUDA driver is installed (libcuda.so.1 not found)";
      break;
    case ProbeStatus::old_driver:
      probe.status = CudaProbe::Status::old_driver;
      probe.reason = fmt::format(
          "the CUDA driver supports CUDA {}, older than the CUDA {} runtime rig was built with; "
          "update the NVIDIA driver",
          cuda_version_text(result.driver_version), cuda_version_text(result.runtime_version));
      break;
    case ProbeStatus::no_device:
      probe.status = CudaProbe::Status::no_device;
      probe.reason = fmt::format("the CUDA driver ({}) found no GPU{}",
                                 cuda_version_text(result.driver_version), visible_devices_note());
      break;
    default:
      probe.status = CudaProbe::Status::error;
      probe.reason =
          fmt::format("probing for GPUs failed: {}{}", result.message, visible_devices_note());
      break;
  }
  for (int index = 0; index < result.device_count; ++index) {
    DeviceDescription d;
    if (table.describe_device(index, &d) != 0) {
      return failed(CudaProbe::Status::error,
                    fmt::format("cannot read the properties of cuda:{}: {}", index, d.message));
    }
    probe.devices.push_back({index, d.name, d.compute_major, d.compute_minor, d.total_bytes});
  }
  return probe;
}

}  // namespace

std::filesystem::path cuda_backend_path() {
  Dl_info info{};
  // This function's own library: librig, wherever it was loaded from.
  if (dladdr(reinterpret_cast<void*>(&cuda_backend_path), &info) != 0 &&
      info.dli_fname != nullptr) {
    return std::filesystem::path(info.dli_fname).parent_path() / RIG_CUDA_BACKEND_FILE;
  }
  return RIG_CUDA_BACKEND_FILE;  // the dynamic linker's search path
}

CudaProbe probe_cuda_library(const std::filesystem::path& library) {
  // Never closed: the back end's runtime must outlive every use of a device.
  void* handle = dlopen(library.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    const char* error = dlerror();
    return failed(CudaProbe::Status::backend_unavailable,
                  fmt::format("the CUDA back end could not be loaded: {}",
                              error != nullptr ? error : library.string()));
  }
  void* entry = dlsym(handle, kBackendEntryPoint);
  if (entry == nullptr) {
    return failed(CudaProbe::Status::backend_unavailable,
                  fmt::format("{} is not rig's CUDA back end (it has no {} function)",
                              library.string(), kBackendEntryPoint));
  }
  using Entry = const BackendTable* (*)();
  const BackendTable* table = reinterpret_cast<Entry>(entry)();
  if (table == nullptr || table->abi_version != kBackendAbiVersion) {
    return failed(CudaProbe::Status::backend_unavailable,
                  fmt::format("the CUDA back end {} has interface version {}, this librig needs {}",
                              library.string(), table == nullptr ? 0 : table->abi_version,
                              kBackendAbiVersion));
  }
  try {
    return from_backend(*table);
  } catch (const std::exception& e) {  // std::bad_alloc, fmt errors: still no throw
    return failed(CudaProbe::Status::error, fmt::format("probing for GPUs failed: {}", e.what()));
  }
}

const CudaProbe& probe_cuda() {
  static const CudaProbe probe = [] {
    if (!RIG_WITH_CUDA) {
      return failed(CudaProbe::Status::built_without_cuda,
                    "this rig was built without CUDA (RIG_WITH_CUDA=OFF)");
    }
    return probe_cuda_library(cuda_backend_path());
  }();
  return probe;
}

}  // namespace rig::cuda
