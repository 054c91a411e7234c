// Launch configuration as a pure host function of the device's properties, so
// that the planner is tested on machines without a GPU (with the A100's and
// H100's numbers) and the CUDA back end only fills DeviceProperties from
// cudaGetDeviceProperties.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "simt/launch_shape.hpp"

namespace rig::simt {

// The cudaDeviceProp fields the planner needs (the name of each in a comment).
struct DeviceProperties {
  std::string name;                           // name
  int major = 0, minor = 0;                   // major, minor (compute capability)
  int sm_count = 0;                           // multiProcessorCount
  int max_threads_per_sm = 0;                 // maxThreadsPerMultiProcessor
  int max_threads_per_block = 0;              // maxThreadsPerBlock
  int max_blocks_per_sm = 0;                  // maxBlocksPerMultiProcessor
  int regs_per_sm = 0;                        // regsPerMultiprocessor
  int regs_per_block = 0;                     // regsPerBlock
  std::size_t shared_per_sm = 0;              // sharedMemPerMultiprocessor
  std::size_t shared_per_block_optin = 0;     // sharedMemPerBlockOptin
  std::size_t shared_per_block = 0;           // sharedMemPerBlock (without opting in)
  std::size_t reserved_shared_per_block = 0;  // reservedSharedMemPerBlock (1 KiB on cc >= 8)
  unsigned max_grid_x = 0, max_grid_y = 0, max_grid_z = 0;  // maxGridSize
  int warp_size = 32;                                       // warpSize

  // NVIDIA A100-SXM4-80GB (cc 8.0) and H100-SXM5-80GB (cc 9.0), as
  // cudaGetDeviceProperties reports them (see launch_config.cpp for sources).
  static DeviceProperties a100_sxm();
  static DeviceProperties h100_sxm();
};

// What one block of a kernel uses.
struct KernelResources {
  unsigned block_threads = 0;
  std::size_t shared_bytes = 0;  // static + dynamic shared memory per block
  int registers_per_thread = 32;
};

// How many blocks of the kernel fit on one SM at once: CUDA's occupancy
// calculator (cuda_occupancy.h, cudaOccMaxActiveBlocksPerMultiprocessor with
// the default carveout): the minimum of the limits by warps, by registers
// (allocated per warp in units of 256, warps placed per SM sub-partition, 4
// of them), by shared memory (plus reserved_shared_per_block, in units of 128
// bytes) and max_blocks_per_sm. 0 when a block does not fit at all (more
// threads than max_threads_per_block, more than 255 registers per thread or
// regs_per_block per block, more shared memory than shared_per_block_optin).
int blocks_per_sm(const DeviceProperties& device, const KernelResources& kernel);

// One block per row, for row-wise kernels (softmax, layer norm, cross
// entropy): grid.x = rows while rows <= max_grid_x; above that the rows are
// split over grid.y, grid.x = ceil(rows / grid.y), and the kernel derives its
// row as block_idx().x + block_idx().y * grid_dim().x and returns (the whole
// block) when the row is >= rows. rows == 0 gives grid.x = 0: launch nothing.
// Throws std::invalid_argument, naming the numbers, for negative rows, rows
// that do not fit in max_grid_x * max_grid_y blocks, a block over
// max_threads_per_block, or shared memory over shared_per_block_optin (or a
// block that does not fit on an SM at all).
LaunchShape plan_rows(const DeviceProperties& device, std::int64_t rows,
                      const KernelResources& kernel);

// Grid-stride elementwise kernels over n elements, per_thread elements per
// thread per iteration: grid.x = min(ceil(n / (block_threads * per_thread)),
// blocks_per_sm * sm_count * 4 waves), at least 1; the kernel loops with a
// stride of grid_dim().x * block_threads() * per_thread. n == 0 gives grid.x =
// 0: launch nothing. Throws std::invalid_argument like plan_rows, and for
// negative n or per_thread < 1.
LaunchShape plan_elementwise(const DeviceProperties& device, std::int64_t n,
                             const KernelResources& kernel, int per_thread = 1);

// Waves of plan_elementwise: enough blocks to hide the tail of one wave.
inline constexpr int kElementwiseWaves = 4;

}  // namespace rig::simt
