// Helpers shared by the kernel bodies of core/cuda/kernels/: written once over
// the execution context (simt/context.hpp), compiled by the host compiler for
// the SIMT emulator and by nvcc for the GPU. No CUDA headers, no intrinsics,
// no __shared__: everything comes from the context and rig/math.
#pragma once

#include <cstdint>

#include "rig/hd.hpp"
#include "rig/math/bits.hpp"
#include "simt/context.hpp"
#include "simt/launch_config.hpp"

// Before a loop with a fixed trip count whose arrays must stay in
// registers: nvcc leaves a long body rolled, and then indexes its arrays in
// local memory. The host compiler decides for itself.
#if defined(__CUDA_ARCH__)
#define RIG_UNROLL _Pragma("unroll")
#else
#define RIG_UNROLL
#endif

namespace rig::kernels {

// Block threads of the kernels: a multiple of the warp size.
inline constexpr unsigned kBlockThreads = 256;

RIG_HD_INLINE float neg_inf() {
  return math::bits_float(0xFF800000U);
}
RIG_HD_INLINE float pos_inf() {
  return math::bits_float(0x7F800000U);
}

// The row of a row-wise launch (simt::plan_rows): rows beyond the grid's x
// extent continue over grid.y. The whole block returns when it is >= rows.
template <class Ctx>
RIG_HD_INLINE std::int64_t block_row(const Ctx& ctx) {
  return static_cast<std::int64_t>(ctx.block_idx().x) +
         static_cast<std::int64_t>(ctx.block_idx().y) * ctx.grid_dim().x;
}

// Global index of the thread and stride of a grid-stride loop over a 1-D grid.
template <class Ctx>
RIG_HD_INLINE std::int64_t global_thread(const Ctx& ctx) {
  return static_cast<std::int64_t>(ctx.block_idx().x) * ctx.block_threads() + ctx.thread_rank();
}
template <class Ctx>
RIG_HD_INLINE std::int64_t grid_threads(const Ctx& ctx) {
  return static_cast<std::int64_t>(ctx.grid_dim().x) * ctx.block_threads();
}

// Threads of a row-wise kernel's block for rows of `cols` elements: enough
// warps to cover the row, at most kBlockThreads.
inline unsigned row_block_threads(std::int64_t cols) {
  const std::int64_t warps = (cols + simt::kWarpSize - 1) / simt::kWarpSize;
  const std::int64_t threads = (warps < 1 ? 1 : warps) * simt::kWarpSize;
  return threads > kBlockThreads ? kBlockThreads : static_cast<unsigned>(threads);
}

// One block per row, no dynamic shared memory.
inline simt::LaunchShape plan_row_kernel(const simt::DeviceProperties& device, std::int64_t rows,
                                         std::int64_t cols, int registers = 32) {
  return simt::plan_rows(device, rows,
                         simt::KernelResources{row_block_threads(cols), 0, registers});
}

// A warp per row, kBlockThreads / 32 rows a block (row kernels whose rows
// are short enough for one warp: no block-wide synchronisation).
inline simt::LaunchShape plan_warp_rows(const simt::DeviceProperties& device, std::int64_t rows,
                                        int registers) {
  constexpr std::int64_t per_block = kBlockThreads / simt::kWarpSize;
  return simt::plan_rows(device, (rows + per_block - 1) / per_block,
                         simt::KernelResources{kBlockThreads, 0, registers});
}

// The warp's row under plan_warp_rows (the block's warps take consecutive
// rows), or -1 past the last: the whole warp.
template <class Ctx>
RIG_HD_INLINE std::int64_t warp_row(const Ctx& ctx, std::int64_t rows) {
  const std::int64_t per_block = ctx.block_threads() / simt::kWarpSize;
  const std::int64_t row = block_row(ctx) * per_block + ctx.warp();
  return row < rows ? row : -1;
}

// Grid-stride over n items with kBlockThreads threads per block.
inline simt::LaunchShape plan_grid_stride(const simt::DeviceProperties& device, std::int64_t n,
                                          int per_thread = 1, int registers = 32) {
  return simt::plan_elementwise(device, n, simt::KernelResources{kBlockThreads, 0, registers},
                                per_thread);
}

// Elements a thread of an unrolled grid-stride loop takes per step. A
// bandwidth-bound kernel needs many bytes in flight per SM to come near the
// memory's bandwidth; one 2-byte load per thread leaves most of it idle, so
// these loops issue kUnroll loads before their first store.
inline constexpr int kUnroll = 4;

// A grid-stride loop over [0, n) with kUnroll elements per thread and step,
// a block's width apart (each load instruction stays coalesced): load(i)
// returns what element i needs, all of a step's loads run before its
// stores, then store(i, loaded) finishes each. Plan it with
// plan_grid_stride(device, n, kUnroll, registers). Elements must be
// independent (in place is fine: each element is read and written by one
// thread).
template <class Ctx, class Load, class Store>
RIG_HD_INLINE void unrolled_grid_stride(Ctx& ctx, std::int64_t n, Load&& load, Store&& store) {
  const std::int64_t block = ctx.block_threads();
  const std::int64_t step = grid_threads(ctx) * kUnroll;
  for (std::int64_t base =
           static_cast<std::int64_t>(ctx.block_idx().x) * block * kUnroll + ctx.thread_rank();
       base < n; base += step) {
    decltype(load(base)) loaded[kUnroll]{};  // {}: GCC cannot tell the two ifs agree
    for (int u = 0; u < kUnroll; ++u) {
      if (base + u * block < n) loaded[u] = load(base + u * block);
    }
    for (int u = 0; u < kUnroll; ++u) {
      if (base + u * block < n) store(base + u * block, loaded[u]);
    }
  }
}

// The most axes of the kernels' n-d iterations (backend::kMaxStridedDims,
// the rank of a StridedPlan): shapes and strides travel in the kernel
// structs as plain arrays of this size.
inline constexpr int kMaxDims = 16;

// Element offsets of N operands at element `linear` of a row-major
// iteration over shape[0, ndim) (the last axis fastest), operand k stepping
// strides[k][d] along axis d.
// A GPU has no integer divider: a 64-bit division is a long emulated
// sequence, and it dominated the copies and conversions of a training step.
// So one axis (the merged, contiguous case) divides nothing, and positions
// below 2^32 divide in 32 bits.
template <int N, int D>
RIG_HD_INLINE void strided_offsets(std::int64_t linear, int ndim, const std::int64_t (&shape)[D],
                                   const std::int64_t (&strides)[N][D], std::int64_t (&off)[N]) {
  if (ndim == 1) {
    for (int k = 0; k < N; ++k) off[k] = linear * strides[k][0];
    return;
  }
  for (int k = 0; k < N; ++k) off[k] = 0;
  if (static_cast<std::uint64_t>(linear) <= 0xFFFFFFFFULL) {
    auto rest = static_cast<std::uint32_t>(linear);
    for (int d = ndim - 1; d >= 0 && rest != 0; --d) {
      const std::int64_t size = shape[d];
      std::uint32_t c = rest;
      if (static_cast<std::uint64_t>(size) <= 0xFFFFFFFFULL) {
        const auto size32 = static_cast<std::uint32_t>(size);
        c = rest % size32;
        rest /= size32;
      } else {
        rest = 0;  // the position lies within this axis
      }
      for (int k = 0; k < N; ++k) off[k] += std::int64_t{c} * strides[k][d];
    }
    return;
  }
  for (int d = ndim - 1; d >= 0; --d) {
    const std::int64_t size = shape[d];
    const std::int64_t c = linear % size;
    linear /= size;
    for (int k = 0; k < N; ++k) off[k] += c * strides[k][d];
  }
}

// a / b and a % b (a >= 0, b > 0), in 32 bits where both fit (see
// strided_offsets: a 64-bit division is slow on a GPU).
struct QuotientRemainder {
  std::int64_t quotient = 0, remainder = 0;
};
RIG_HD_INLINE QuotientRemainder div_mod(std::int64_t a, std::int64_t b) {
  if (static_cast<std::uint64_t>(a) <= 0xFFFFFFFFULL &&
      static_cast<std::uint64_t>(b) <= 0xFFFFFFFFULL) {
    const auto a32 = static_cast<std::uint32_t>(a), b32 = static_cast<std::uint32_t>(b);
    return {std::int64_t{a32 / b32}, std::int64_t{a32 % b32}};
  }
  return {a / b, a % b};
}

// The number of elements of shape[0, ndim).
template <int D>
RIG_HD_INLINE std::int64_t shape_elements(int ndim, const std::int64_t (&shape)[D]) {
  std::int64_t n = 1;
  for (int d = 0; d < ndim; ++d) n *= shape[d];
  return n;
}

}  // namespace rig::kernels
