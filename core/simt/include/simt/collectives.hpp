// Warp and block reductions written once over the context's primitives
// (simt/context.hpp), so the SIMT emulator and the GPU combine values in the
// same order and give the same bits. The order: a butterfly within each warp
// (xor 16, 8, 4, 2, 1), then the warps' results in warp order 0, 1, 2, ...
// CUB's block reductions leave their order unspecified, which is why they are
// not used here.
#pragma once

#include "simt/context.hpp"

namespace rig::simt {

struct Sum {
  template <class T>
  RIG_HD_INLINE T operator()(T a, T b) const {
    return a + b;
  }
};

// NaN wins, as in the CPU back end's max reductions.
struct Max {
  template <class T>
  RIG_HD_INLINE T operator()(T a, T b) const {
    if (a != a) return a;
    if (b != b) return b;
    return a < b ? b : a;
  }
};

// Every lane of the warp gets op over the warp's 32 values.
template <class Ctx, class T, class Op>
RIG_HD_INLINE T warp_reduce(Ctx& ctx, T value, Op op) {
  for (unsigned mask = kWarpSize / 2; mask > 0; mask /= 2) {
    value = op(value, ctx.shfl_xor(value, mask));
  }
  return value;
}

// Every thread of the block gets op over the block's values. Every thread
// must call it (it synchronises the block twice).
template <class Ctx, class T, class Op>
RIG_HD_INLINE T block_reduce(Ctx& ctx, T value, Op op) {
  value = warp_reduce(ctx, value, op);
  T* partial = ctx.template reduce_scratch<T>();
  if (ctx.lane() == 0) partial[ctx.warp()] = value;
  ctx.sync();
  const unsigned warps = ctx.block_threads() / kWarpSize;
  T total = partial[0];
  for (unsigned w = 1; w < warps; ++w) total = op(total, partial[w]);
  ctx.sync();  // the scratch may be reused by the next reduction
  return total;
}

template <class Ctx, class T>
RIG_HD_INLINE T warp_sum(Ctx& ctx, T value) {
  return warp_reduce(ctx, value, Sum{});
}
template <class Ctx, class T>
RIG_HD_INLINE T warp_max(Ctx& ctx, T value) {
  return warp_reduce(ctx, value, Max{});
}
template <class Ctx, class T>
RIG_HD_INLINE T block_sum(Ctx& ctx, T value) {
  return block_reduce(ctx, value, Sum{});
}
template <class Ctx, class T>
RIG_HD_INLINE T block_max(Ctx& ctx, T value) {
  return block_reduce(ctx, value, Max{});
}

}  // namespace rig::simt
