#include "cuda/runtime/device_properties.cuh"

#include <map>
#include <mutex>

#include <cuda_runtime_api.h>

#include "cuda/runtime/cuda_error.hpp"

namespace rig::cuda {

namespace {

simt::DeviceProperties read_properties(int device) {
  cudaDeviceProp p{};
  RIG_CUDA_CHECK(cudaGetDeviceProperties(&p, device));
  simt::DeviceProperties d;
  d.name = p.name;
  d.major = p.major;
  d.minor = p.minor;
  d.sm_count = p.multiProcessorCount;
  d.max_threads_per_sm = p.maxThreadsPerMultiProcessor;
  d.max_threads_per_block = p.maxThreadsPerBlock;
  d.max_blocks_per_sm = p.maxBlocksPerMultiProcessor;
  d.regs_per_sm = p.regsPerMultiprocessor;
  d.regs_per_block = p.regsPerBlock;
  d.shared_per_sm = p.sharedMemPerMultiprocessor;
  d.shared_per_block_optin = p.sharedMemPerBlockOptin;
  d.shared_per_block = p.sharedMemPerBlock;
  d.reserved_shared_per_block = p.reservedSharedMemPerBlock;
  d.max_grid_x = static_cast<unsigned>(p.maxGridSize[0]);
  d.max_grid_y = static_cast<unsigned>(p.maxGridSize[1]);
  d.max_grid_z = static_cast<unsigned>(p.maxGridSize[2]);
  d.warp_size = p.warpSize;
  return d;
}

}  // namespace

const simt::DeviceProperties& device_properties(int device) {
  static std::mutex mutex;
  static std::map<int, simt::DeviceProperties> cache;  // node-based: references stay valid
  const std::lock_guard lock(mutex);
  auto it = cache.find(device);
  if (it == cache.end()) it = cache.emplace(device, read_properties(device)).first;
  return it->second;
}

const simt::DeviceProperties& current_device_properties() {
  int device = 0;
  RIG_CUDA_CHECK(cudaGetDevice(&device));
  return device_properties(device);
}

}  // namespace rig::cuda
