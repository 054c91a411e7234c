#include "cuda/runtime/nvml_utilisation.hpp"

#include <dlfcn.h>

#include <cuda_runtime_api.h>

#include <fmt/format.h>

namespace rig::cuda {

namespace {

// NVML's C ABI, as much as is used (nvml.h is not needed to build rig).
using NvmlReturn = int;  // nvmlReturn_t: 0 is NVML_SUCCESS
using NvmlDevice = struct NvmlDeviceOpaque*;
struct NvmlUtilization {
  unsigned int gpu = 0;
  unsigned int memory = 0;
};

}  // namespace

struct NvmlUtilisation::Library {
  void* handle = nullptr;
  NvmlReturn (*shutdown)() = nullptr;
  NvmlReturn (*utilization)(NvmlDevice, NvmlUtilization*) = nullptr;
  NvmlDevice device = nullptr;
  bool initialised = false;

  ~Library() {
    if (initialised && shutdown != nullptr) shutdown();
    if (handle != nullptr) dlclose(handle);
  }
};

NvmlUtilisation::NvmlUtilisation(int cuda_device) {
  auto library = std::make_unique<Library>();
  library->handle = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
  if (library->handle == nullptr) {
    why_ = "NVML (libnvidia-ml.so.1, part of the NVIDIA driver) is not installed";
    return;
  }
  const auto symbol = [&](const char* name) { return dlsym(library->handle, name); };
  auto init = reinterpret_cast<NvmlReturn (*)()>(symbol("nvmlInit_v2"));
  auto by_bus = reinterpret_cast<NvmlReturn (*)(const char*, NvmlDevice*)>(
      symbol("nvmlDeviceGetHandleByPciBusId_v2"));
  library->shutdown = reinterpret_cast<NvmlReturn (*)()>(symbol("nvmlShutdown"));
  library->utilization = reinterpret_cast<NvmlReturn (*)(NvmlDevice, NvmlUtilization*)>(
      symbol("nvmlDeviceGetUtilizationRates"));
  if (init == nullptr || by_bus == nullptr || library->shutdown == nullptr ||
      library->utilization == nullptr) {
    why_ =
        "NVML lacks nvmlInit_v2, nvmlDeviceGetHandleByPciBusId_v2 or "
        "nvmlDeviceGetUtilizationRates";
    return;
  }
  if (const NvmlReturn r = init(); r != 0) {
    why_ = fmt::format("nvmlInit_v2 failed (NVML error {})", r);
    return;
  }
  library->initialised = true;
  char bus_id[32] = {};
  if (cudaDeviceGetPCIBusId(bus_id, static_cast<int>(sizeof(bus_id)), cuda_device) != cudaSuccess) {
    why_ = fmt::format("cudaDeviceGetPCIBusId failed for cuda:{}", cuda_device);
    return;
  }
  if (const NvmlReturn r = by_bus(bus_id, &library->device); r != 0) {
    why_ = fmt::format("NVML has no GPU at PCI bus id {} (NVML error {})", bus_id, r);
    return;
  }
  library_ = std::move(library);
}

NvmlUtilisation::~NvmlUtilisation() = default;

std::optional<double> NvmlUtilisation::sample() {
  if (!library_) return std::nullopt;
  NvmlUtilization u;
  if (const NvmlReturn r = library_->utilization(library_->device, &u); r != 0) {
    why_ = fmt::format("nvmlDeviceGetUtilizationRates failed (NVML error {})", r);
    return std::nullopt;
  }
  return static_cast<double>(u.gpu);
}

}  // namespace rig::cuda
