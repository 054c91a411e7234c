// simt::CudaContext: the execution context of simt/context.hpp on a real GPU,
// and rig::cuda::launch, which runs a kernel struct written over that
// contract. The SIMT emulator (simt/emulator.hpp) implements the same members
// on the host; kernel bodies never see which one they run on.
#pragma once

#include <cstddef>

#include <cuda_runtime_api.h>

#include "cuda/runtime/cuda_error.hpp"
#include "simt/context.hpp"

namespace rig::simt {

class CudaContext {
 public:
  __device__ explicit CudaContext(std::size_t shared_bytes) : shared_bytes_(shared_bytes) {}

  __device__ Dim3 thread_idx() const { return {threadIdx.x, threadIdx.y, threadIdx.z}; }
  __device__ Dim3 block_idx() const { return {blockIdx.x, blockIdx.y, blockIdx.z}; }
  __device__ Dim3 block_dim() const { return {blockDim.x, blockDim.y, blockDim.z}; }
  __device__ Dim3 grid_dim() const { return {gridDim.x, gridDim.y, gridDim.z}; }
  __device__ unsigned thread_rank() const {
    return threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
  }
  __device__ unsigned block_threads() const { return blockDim.x * blockDim.y * blockDim.z; }
  __device__ unsigned lane() const { return thread_rank() % kWarpSize; }
  __device__ unsigned warp() const { return thread_rank() / kWarpSize; }

  __device__ void sync() const { __syncthreads(); }

  template <class T>
  __device__ T shfl(T value, unsigned src_lane) const {
    return __shfl_sync(kFullMask, value, static_cast<int>(src_lane));
  }
  template <class T>
  __device__ T shfl_xor(T value, unsigned lane_mask) const {
    return __shfl_xor_sync(kFullMask, value, static_cast<int>(lane_mask));
  }
  template <class T>
  __device__ T shfl_down(T value, unsigned delta) const {
    return __shfl_down_sync(kFullMask, value, delta);
  }

  template <class T>
  __device__ T* shared() const {
    extern __shared__ float4 rig_dynamic_shared[];  // float4: 16-byte aligned
    return reinterpret_cast<T*>(rig_dynamic_shared);
  }
  __device__ std::size_t shared_bytes() const { return shared_bytes_; }

  template <class T>
  __device__ T* reduce_scratch() const {
    static_assert(sizeof(T) <= 8, "reduce_scratch holds values of at most 8 bytes");
    __shared__ alignas(16) unsigned long long scratch[kReduceSlots];
    return reinterpret_cast<T*>(scratch);
  }

 private:
  static constexpr unsigned kFullMask = 0xFFFFFFFFU;
  std::size_t shared_bytes_;
};

}  // namespace rig::simt

namespace rig::cuda {

template <class Kernel>
__global__ void run_kernel(Kernel kernel, std::size_t shared_bytes) {
  simt::CudaContext ctx(shared_bytes);
  kernel(ctx);
}

// Launches `kernel` with `shape` on `stream`; a grid with no blocks launches
// nothing. Throws CudaError for a launch the device refuses.
template <class Kernel>
void launch(const simt::LaunchShape& shape, cudaStream_t stream, const Kernel& kernel) {
  if (shape.grid.count() == 0) return;
  constexpr std::size_t kDefaultSharedLimit = 48 * 1024;
  if (shape.shared_bytes > kDefaultSharedLimit) {
    RIG_CUDA_CHECK(cudaFuncSetAttribute(run_kernel<Kernel>,
                                        cudaFuncAttributeMaxDynamicSharedMemorySize,
                                        static_cast<int>(shape.shared_bytes)));
  }
  const dim3 grid(shape.grid.x, shape.grid.y, shape.grid.z);
  const dim3 block(shape.block.x, shape.block.y, shape.block.z);
  run_kernel<Kernel><<<grid, block, shape.shared_bytes, stream>>>(kernel, shape.shared_bytes);
  RIG_CUDA_CHECK(cudaGetLastError());
}

}  // namespace rig::cuda
