// The device a run uses, from the experiment's `device` key (auto | cpu |
// cuda), what the CUDA probe found and the process's local rank.
#pragma once

#include <optional>
#include <string>

#include "config/resolved_config.hpp"
#include "cuda/host/cuda_backend.hpp"
#include "rig/tensor.hpp"

namespace rig::engine {

struct DeviceChoice {
  Device device = Device::cpu();
  // One console line about the choice ("Device: cpu (auto: no CUDA driver ...)");
  // empty for device: cpu.
  std::string note;
  // The GPU of device cuda:N as the probe found it; empty for the CPU, sim and
  // the emulator.
  std::optional<cuda::GpuInfo> gpu;
};

// `where` names the `device` key for error messages ("x.yaml:4:11: base_params.device").
// device: cuda without a usable GPU throws UserError saying what was found;
// auto falls back to the CPU with a note saying why.
DeviceChoice choose_device(const std::string& request, const cuda::CudaProbe& probe, int local_rank,
                           const std::string& where);

// choose_device for a run: probes only when the request is not cpu, takes the
// local rank from the launcher.
DeviceChoice choose_run_device(const config::ResolvedConfig& config, const std::string& request);

// Whether device code built for `architectures` (CMAKE_CUDA_ARCHITECTURES:
// "80-real;90", "all", ...) runs on a GPU of compute capability major.minor.
bool has_code_for(const std::string& architectures, int major, int minor);

}  // namespace rig::engine
