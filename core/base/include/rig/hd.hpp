// RIG_HD marks code compiled for both the host and the GPU: the per-element
// math shared by the CPU and CUDA back ends (rig/math/) and the kernel bodies
// that the SIMT emulator runs on the host (core/cuda/kernels/). Under nvcc it
// is __host__ __device__; for the host compiler it is nothing.
#pragma once

#if defined(__CUDACC__)
#define RIG_HD __host__ __device__
#define RIG_HD_INLINE __host__ __device__ __forceinline__
#else
#define RIG_HD
#define RIG_HD_INLINE inline __attribute__((always_inline))
#endif
