#include "simt/launch_config.hpp"

// GCC 12 reports a false -Wrestrict in std::string's operator+ at -O3 (GCC bug
// 105329); the messages below are built with it.
#if defined(__GNUC__) && !defined(__clang__) && __GNUC__ == 12
#pragma GCC diagnostic ignored "-Wrestrict"
#endif

#include <algorithm>
#include <limits>
#include <stdexcept>
#include <string>

namespace rig::simt {
namespace {

constexpr int kRegisterAllocationUnit = 256;  // registers, per warp
constexpr int kMaxRegistersPerThread = 255;
constexpr int kSubPartitions = 4;  // per SM, each with a quarter of the registers

std::int64_t ceil_div(std::int64_t a, std::int64_t b) {
  return (a + b - 1) / b;
}
std::int64_t round_up(std::int64_t a, std::int64_t b) {
  return ceil_div(a, b) * b;
}

// Shared memory is allocated in units of 128 bytes from cc 8.0 on, 256 before.
std::size_t shared_unit(const DeviceProperties& d) {
  return d.major >= 8 ? 128 : 256;
}

std::string describe(const DeviceProperties& d, const KernelResources& k) {
  return "a block of " + std::to_string(k.block_threads) + " threads with " +
         std::to_string(k.shared_bytes) + " bytes of shared memory and " +
         std::to_string(k.registers_per_thread) + " registers per thread on " + d.name;
}

// Throws std::invalid_argument when a block of the kernel cannot run on d.
void check_block(const DeviceProperties& d, const KernelResources& k) {
  if (k.block_threads == 0 || k.block_threads > static_cast<unsigned>(d.max_threads_per_block)) {
    throw std::invalid_argument("launch planning: " + describe(d, k) + ": a block must have 1 to " +
                                std::to_string(d.max_threads_per_block) + " threads");
  }
  if (k.shared_bytes > d.shared_per_block_optin) {
    throw std::invalid_argument("launch planning: " + describe(d, k) + ": " +
                                std::to_string(k.shared_bytes) +
                                " bytes of shared memory exceed the device's " +
                                std::to_string(d.shared_per_block_optin) + " per block (opt-in)");
  }
  if (blocks_per_sm(d, k) == 0) {
    throw std::invalid_argument("launch planning: " + describe(d, k) +
                                ": the block does not fit on a multiprocessor (registers: " +
                                std::to_string(d.regs_per_block) + " per block, " +
                                std::to_string(kMaxRegistersPerThread) + " per thread)");
  }
}

}  // namespace

// Sources: the CUDA C++ Programming Guide, "Technical Specifications per
// Compute Capability" (cc 8.0 and 9.0: 2048 threads, 32 blocks and 64 K 32-bit
// registers per SM, 64 K registers and 1024 threads per block, 255 registers
// per thread, shared memory per SM 164 KB (8.0) and 228 KB (9.0), per block
// 163 KB and 227 KB opted in, 48 KB without; grids of (2^31-1, 65535, 65535)),
// and the "NVIDIA A100 Tensor Core GPU Architecture" and "NVIDIA H100 Tensor
// Core GPU Architecture" whitepapers (108 SMs on the A100, 132 on the H100
// SXM5). The byte counts and reservedSharedMemPerBlock (1 KiB) are those
// cudaGetDeviceProperties reports on these parts. Checked on a device: an H200
// (cc 9.0, the H100's SM: 132 SMs, 233472/232448/49152 bytes of shared memory,
// 1024 reserved) reported exactly h100_sxm()'s numbers, and blocks_per_sm
// agreed with cudaOccupancyMaxActiveBlocksPerMultiprocessor on all 720
// combinations tried (12 block sizes x 12 shared-memory sizes x kernels of 10,
// 32, 55, 108 and 167 registers).
DeviceProperties DeviceProperties::a100_sxm() {
  DeviceProperties d;
  d.name = "NVIDIA A100-SXM4-80GB";
  d.major = 8;
  d.minor = 0;
  d.sm_count = 108;
  d.max_threads_per_sm = 2048;
  d.max_threads_per_block = 1024;
  d.max_blocks_per_sm = 32;
  d.regs_per_sm = 65536;
  d.regs_per_block = 65536;
  d.shared_per_sm = 164 * 1024;           // 167936
  d.shared_per_block_optin = 163 * 1024;  // 166912
  d.shared_per_block = 48 * 1024;
  d.reserved_shared_per_block = 1024;
  d.max_grid_x = 2147483647u;
  d.max_grid_y = 65535;
  d.max_grid_z = 65535;
  d.warp_size = 32;
  return d;
}

DeviceProperties DeviceProperties::h100_sxm() {
  DeviceProperties d = a100_sxm();
  d.name = "NVIDIA H100 80GB HBM3";
  d.major = 9;
  d.minor = 0;
  d.sm_count = 132;
  d.shared_per_sm = 228 * 1024;           // 233472
  d.shared_per_block_optin = 227 * 1024;  // 232448
  return d;
}

int blocks_per_sm(const DeviceProperties& d, const KernelResources& k) {
  if (k.block_threads == 0 || k.block_threads > static_cast<unsigned>(d.max_threads_per_block) ||
      d.warp_size <= 0) {
    return 0;
  }
  const std::int64_t warps = ceil_div(k.block_threads, d.warp_size);

  // Warps (threads) and blocks per SM.
  std::int64_t limit = (d.max_threads_per_sm / d.warp_size) / warps;
  limit = std::min<std::int64_t>(limit, d.max_blocks_per_sm);

  // Registers: allocated per warp in units of 256, warps placed in the SM's
  // sub-partitions, each with a quarter of the register file. The hardware's
  // per-block check rounds the block's warps up to the sub-partitions.
  if (k.registers_per_thread > kMaxRegistersPerThread) return 0;
  if (k.registers_per_thread > 0) {
    const std::int64_t per_warp =
        round_up(std::int64_t{k.registers_per_thread} * d.warp_size, kRegisterAllocationUnit);
    if (per_warp * warps > d.regs_per_block ||
        per_warp * round_up(warps, kSubPartitions) > d.regs_per_block) {
      return 0;
    }
    const std::int64_t warps_per_sub = (d.regs_per_sm / kSubPartitions) / per_warp;
    limit = std::min(limit, warps_per_sub * kSubPartitions / warps);
  }

  // Shared memory, with the driver's reserve per block (cc >= 8), in units of
  // 128 bytes, against the SM's (default carveout: all of it).
  if (k.shared_bytes > d.shared_per_block_optin) return 0;
  const auto unit = static_cast<std::int64_t>(shared_unit(d));
  const std::int64_t per_block = round_up(
      static_cast<std::int64_t>(k.shared_bytes + (d.major >= 8 ? d.reserved_shared_per_block : 0)),
      unit);
  if (per_block > 0) {
    limit = std::min(limit, static_cast<std::int64_t>(d.shared_per_sm) / per_block);
  }
  return static_cast<int>(std::max<std::int64_t>(limit, 0));
}

LaunchShape plan_rows(const DeviceProperties& d, std::int64_t rows, const KernelResources& k) {
  if (rows < 0) {
    throw std::invalid_argument("plan_rows: " + std::to_string(rows) + " rows");
  }
  check_block(d, k);
  LaunchShape shape;
  shape.block = Dim3{k.block_threads, 1, 1};
  shape.shared_bytes = k.shared_bytes;
  if (rows == 0) {
    shape.grid = Dim3{0, 1, 1};  // launch nothing
    return shape;
  }
  const std::int64_t max_x = d.max_grid_x;
  const std::int64_t y = ceil_div(rows, max_x);
  if (y > static_cast<std::int64_t>(d.max_grid_y)) {
    throw std::invalid_argument("plan_rows: " + std::to_string(rows) + " rows need more than " +
                                std::to_string(max_x) + " x " + std::to_string(d.max_grid_y) +
                                " blocks, the largest grid of " + d.name);
  }
  shape.grid = Dim3{static_cast<unsigned>(ceil_div(rows, y)), static_cast<unsigned>(y), 1};
  return shape;
}

LaunchShape plan_elementwise(const DeviceProperties& d, std::int64_t n, const KernelResources& k,
                             int per_thread) {
  if (n < 0 || per_thread < 1) {
    throw std::invalid_argument("plan_elementwise: " + std::to_string(n) + " elements, " +
                                std::to_string(per_thread) + " per thread");
  }
  check_block(d, k);
  LaunchShape shape;
  shape.block = Dim3{k.block_threads, 1, 1};
  shape.shared_bytes = k.shared_bytes;
  if (n == 0) {
    shape.grid = Dim3{0, 1, 1};  // launch nothing
    return shape;
  }
  const std::int64_t needed = ceil_div(n, std::int64_t{k.block_threads} * per_thread);
  const std::int64_t resident = std::int64_t{blocks_per_sm(d, k)} * d.sm_count * kElementwiseWaves;
  const std::int64_t blocks =
      std::clamp<std::int64_t>(std::min(needed, resident), 1, std::int64_t{d.max_grid_x});
  shape.grid = Dim3{static_cast<unsigned>(blocks), 1, 1};
  return shape;
}

}  // namespace rig::simt
