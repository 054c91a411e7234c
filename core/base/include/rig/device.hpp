// Where a tensor's memory lives: the CPU, a CUDA GPU, or `sim`, the testing
// device whose memory the host cannot touch (core/sim).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace rig {

struct Device {
  enum class Type : std::uint8_t { cpu, cuda, sim };
  Type type = Type::cpu;
  int index = 0;
  static Device cpu() { return {}; }
  static Device cuda(int index = 0) { return {Type::cuda, index}; }
  static Device sim() { return {Type::sim, 0}; }
  bool is_cpu() const { return type == Type::cpu; }
  friend bool operator==(const Device&, const Device&) = default;
};
std::string to_string(Device device);  // "cpu", "cuda:0", "sim"

// RIG_CUDA_EMULATOR=1: `device: cuda` runs the CUDA back end's kernels in the
// SIMT emulator on the CPU (tests without a GPU). Unset or 0: no. Anything
// else throws std::invalid_argument naming the variable.
bool cuda_emulator_requested();
// RIG_CUDA_EMULATOR_HOST_ONLY=1: the emulated device queues every kernel but
// runs none (cuda::EmulatedWork::host_only), to time the host's part of a
// step. Unset or 0: no. Anything else throws std::invalid_argument.
bool cuda_emulator_host_only_requested();
// RIG_CUDA_EMULATOR_MEMORY_MB: the emulated device's memory, in MiB: an
// allocation beyond it fails as on a GPU of that size, so whether a batch
// fits a 16 GB GPU is known without one. Unset or empty: 81920 (80 GiB, an
// H100's). Anything but a whole number from 1 on throws
// std::invalid_argument naming the variable.
std::size_t cuda_emulator_memory_bytes();

}  // namespace rig
