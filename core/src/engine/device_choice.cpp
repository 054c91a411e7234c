#include "engine/device_choice.hpp"

#include <charconv>
#include <cstdlib>
#include <optional>
#include <stdexcept>
#include <string_view>

#include <fmt/format.h>

#include "launch/launcher_env.hpp"
#include "rig/environment_switch.hpp"
#include "rig/error.hpp"

namespace rig::engine {
namespace {

// One entry of CMAKE_CUDA_ARCHITECTURES: "90", "80-real", "90a-virtual", "100f".
struct Architecture {
  int major = 0;
  int minor = 0;
  bool machine_code = true;  // SASS: runs on the same major, minor at least this one
  bool ptx = true;           // PTX: compiled by the driver for this or any newer GPU
  bool exact = false;        // "a" (architecture-specific) features: only this GPU
};

std::optional<Architecture> parse_architecture(std::string_view text) {
  Architecture arch;
  if (text.ends_with("-real")) {
    arch.ptx = false;
    text.remove_suffix(5);
  } else if (text.ends_with("-virtual")) {
    arch.machine_code = false;
    text.remove_suffix(8);
  }
  if (text.ends_with('a')) {
    arch.exact = true;
    text.remove_suffix(1);
  } else if (text.ends_with('f')) {  // family-specific: same major, as plain machine code
    text.remove_suffix(1);
  }
  int number = 0;
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), number);
  if (error != std::errc() || end != text.data() + text.size() || number < 10) return std::nullopt;
  arch.major = number / 10;
  arch.minor = number % 10;
  return arch;
}

bool runs_on(const Architecture& arch, int major, int minor) {
  if (arch.exact) return arch.major == major && arch.minor == minor;
  const bool sass = arch.machine_code && arch.major == major && arch.minor <= minor;
  const bool jit = arch.ptx && (arch.major < major || (arch.major == major && arch.minor <= minor));
  return sass || jit;
}

std::string describe(const cuda::GpuInfo& gpu) {
  return fmt::format("cuda:{} ({}, compute capability {}.{}, {:.0f} GiB)", gpu.index, gpu.name,
                     gpu.compute_major, gpu.compute_minor,
                     static_cast<double>(gpu.total_bytes) / (1024.0 * 1024.0 * 1024.0));
}

// Why this process cannot run on a GPU, or nullopt when it can (then `gpu` is set).
std::optional<std::string> why_no_gpu(const cuda::CudaProbe& probe, int local_rank,
                                      const cuda::GpuInfo*& gpu) {
  if (probe.status != cuda::CudaProbe::Status::ok) return probe.reason;
  const int visible = static_cast<int>(probe.devices.size());
  if (local_rank >= visible) {
    const char* env = std::getenv("CUDA_VISIBLE_DEVICES");
    return fmt::format(
        "this process has local rank {} but only {} GPU(s) are visible{}: one process per GPU",
        local_rank, visible, env ? fmt::format(" (CUDA_VISIBLE_DEVICES='{}')", env) : "");
  }
  gpu = &probe.devices[static_cast<std::size_t>(local_rank)];
  if (!has_code_for(probe.architectures, gpu->compute_major, gpu->compute_minor)) {
    return fmt::format(
        "found {}, but this rig has GPU code only for CUDA architectures {} (rebuild with "
        "-DCMAKE_CUDA_ARCHITECTURES={}{})",
        describe(*gpu), probe.architectures, gpu->compute_major, gpu->compute_minor);
  }
  if (!probe.runs_ops) {
    return fmt::format(
        "found {}, but this rig's CUDA back end has only its device runtime, no tensor-op "
        "kernels yet",
        describe(*gpu));
  }
  return std::nullopt;
}

}  // namespace

bool has_code_for(const std::string& architectures, int major, int minor) {
  std::string_view rest = architectures;
  while (!rest.empty()) {
    const auto cut = rest.find_first_of(";,");
    const std::string_view entry = rest.substr(0, cut);
    rest = cut == std::string_view::npos ? std::string_view() : rest.substr(cut + 1);
    // CMake's "all", "all-major" and "native" cover every GPU they are built on.
    if (entry == "all" || entry == "all-major" || entry == "native") return true;
    const auto arch = parse_architecture(entry);
    if (arch && runs_on(*arch, major, minor)) return true;
  }
  return false;
}

namespace {

DeviceChoice sim_choice() {
  return {Device::sim(),
          "Device: sim (a test device: the CPU kernels on memory the host cannot touch; slow)",
          std::nullopt};
}

}  // namespace

DeviceChoice choose_device(const std::string& request, const cuda::CudaProbe& probe, int local_rank,
                           const std::string& where) {
  if (request == "cpu") return {};
  if (request == "sim") return sim_choice();
  const cuda::GpuInfo* gpu = nullptr;
  const auto problem = why_no_gpu(probe, local_rank, gpu);
  if (!problem) return {Device::cuda(gpu->index), fmt::format("Device: {}", describe(*gpu)), *gpu};
  if (request == "auto")
    return {Device::cpu(), fmt::format("Device: cpu (auto: {})", *problem), std::nullopt};
  throw UserError(fmt::format(
      "{}: {} requested, but no GPU can be used: {}; set device: cpu or auto to run on the CPU",
      where, request, *problem));
}

DeviceChoice choose_run_device(const config::ResolvedConfig& config, const std::string& request) {
  try {
    (void)host_memory_check_enabled();  // every device's host memory
  } catch (const std::invalid_argument& e) {
    throw UserError(e.what());
  }
  if (request == "cpu") return {};
  if (request == "sim") return sim_choice();
  const auto where = config.where("device");
  const std::string key = where.key_path.empty() ? "device" : where.key_path;
  bool emulate = false, host_only = false;
  try {
    emulate = request == "cuda" && cuda_emulator_requested();
    host_only = emulate && cuda_emulator_host_only_requested();
    // Read where the back end is made or first multiplies: a bad value
    // stops the run here, before anything is built.
    (void)gemm_autotune_requested();
    (void)census_shapes_requested();
    if (emulate) (void)cuda_emulator_memory_bytes();
    (void)relu_masks_enabled();
  } catch (const std::invalid_argument& e) {
    throw UserError(e.what());
  }
  if (host_only) {
    return {Device::cuda(0),
            "Device: cuda:0 (RIG_CUDA_EMULATOR=1 with RIG_CUDA_EMULATOR_HOST_ONLY=1: every CUDA "
            "kernel queued, none run; the time of a step is the host's, its numbers mean nothing)",
            std::nullopt};
  }
  if (emulate) {
    return {Device::cuda(0),
            "Device: cuda:0 (RIG_CUDA_EMULATOR=1: the CUDA kernels in the SIMT emulator on the "
            "CPU; a test device, very slow)",
            std::nullopt};
  }
  return choose_device(request, cuda::probe_cuda(), launch::launcher_local_rank(),
                       fmt::format("{}: {}", where.describe(), key));
}

}  // namespace rig::engine
