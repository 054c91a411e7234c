// Selection (Backend::argmax / topk, core/cpu/selection.cpp) over f32, i32,
// i64 and u8 values. Every value maps to an unsigned key ordered like the
// values, with every NaN equal to the others and above +inf and -0 equal
// to +0 (the CPU's comparisons: a > b, or a NaN against a non-NaN). The best
// of (key, index) pairs is the largest key, ties to the lower index: a total
// order, so the block's result is the same for every schedule.
//   Argmax: x [outer, n, inner] -> out [outer, inner] (i64): the first
//     maximum. inner == 1: one block per row, a block-wide (key, index)
//     reduction; inner > 1: one thread per output walking n in order.
//   TopK: x [rows, n] -> values [rows, k] (x's dtype), indices [rows, k]
//     (i64), sorted descending, ties by lower index. One block per row and k
//     rounds of the block-wide argmax, round r taking the best pair after
//     round r - 1's in that order: O(k n / threads) per row, meant for beam
//     search's small k. plan() throws std::invalid_argument for k >
//     kTopKMaxK or k > n (the CPU's k <= 64 insertion path covers the same).
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>

#include "cuda/kernels/common.hpp"
#include "cuda/kernels/copy.hpp"
#include "cuda/kernels/indexing.hpp"
#include "rig/dtype.hpp"
#include "rig/math/bits.hpp"

namespace rig::kernels {

inline constexpr std::int64_t kTopKMaxK = 64;

// The order key of element i (larger value, larger key; NaN largest).
RIG_HD_INLINE std::uint64_t order_key(const void* x, DType type, std::int64_t i) {
  switch (type) {
    case DType::i32:
      return static_cast<std::uint32_t>(static_cast<const std::int32_t*>(x)[i]) ^ 0x80000000U;
    case DType::i64:
      return static_cast<std::uint64_t>(static_cast<const std::int64_t*>(x)[i]) ^
             0x8000000000000000ULL;
    case DType::u8:
      return static_cast<const std::uint8_t*>(x)[i];
    default: {
      const float v = static_cast<const float*>(x)[i];
      if (v != v) return 0xFFFFFFFFULL;
      if (v == 0.0F) return 0x80000000ULL;  // -0 == +0
      const std::uint32_t bits = math::float_bits(v);
      return (bits & 0x80000000U) != 0 ? ~bits : bits | 0x80000000U;
    }
  }
}

// Whether (key, index) comes before (best_key, best_index).
RIG_HD_INLINE bool before(std::uint64_t key, std::int64_t index, std::uint64_t best_key,
                          std::int64_t best_index) {
  return key > best_key || (key == best_key && index < best_index);
}

// No element yet: loses to every real (key, index).
inline constexpr std::int64_t kNoIndex = 0x7FFFFFFFFFFFFFFFLL;

// Every thread of the block gets the block's best (key, index). Every thread
// must call it (two barriers); at most 16 warps.
template <class Ctx>
RIG_HD_INLINE void block_best(Ctx& ctx, std::uint64_t& key, std::int64_t& index) {
  for (unsigned mask = simt::kWarpSize / 2; mask > 0; mask /= 2) {
    const std::uint64_t k = ctx.shfl_xor(key, mask);
    const std::int64_t i = ctx.shfl_xor(index, mask);
    if (before(k, i, key, index)) {
      key = k;
      index = i;
    }
  }
  std::uint64_t* slots = ctx.template reduce_scratch<std::uint64_t>();  // keys, then indices
  constexpr unsigned kHalf = simt::kReduceSlots / 2;
  if (ctx.lane() == 0) {
    slots[ctx.warp()] = key;
    slots[kHalf + ctx.warp()] = static_cast<std::uint64_t>(index);
  }
  ctx.sync();
  const unsigned warps = ctx.block_threads() / simt::kWarpSize;
  key = slots[0];
  index = static_cast<std::int64_t>(slots[kHalf]);
  for (unsigned w = 1; w < warps; ++w) {
    const auto i = static_cast<std::int64_t>(slots[kHalf + w]);
    if (before(slots[w], i, key, index)) {
      key = slots[w];
      index = i;
    }
  }
  ctx.sync();
}

struct Argmax {
  const void* x = nullptr;  // [outer, n, inner]
  DType type = DType::f32;  // f32, i32, i64 or u8
  std::int64_t outer = 0, n = 0, inner = 0;
  std::int64_t* out = nullptr;  // [outer, inner]

  simt::LaunchShape plan(const simt::DeviceProperties& device) const {
    if (inner == 1) return plan_row_kernel(device, outer, n);
    return plan_grid_stride(device, outer * inner);
  }

  template <class Ctx>
  RIG_HD void operator()(Ctx& ctx) const {
    if (inner == 1) {  // uniform over the launch
      const std::int64_t row = block_row(ctx);
      if (row >= outer) return;
      std::uint64_t key = 0;
      std::int64_t index = kNoIndex;
      for (std::int64_t j = ctx.thread_rank(); j < n; j += ctx.block_threads()) {
        const std::uint64_t k = order_key(x, type, row * n + j);
        if (before(k, j, key, index)) {
          key = k;
          index = j;
        }
      }
      block_best(ctx, key, index);
      if (ctx.thread_rank() == 0) out[row] = index == kNoIndex ? 0 : index;
      return;
    }
    const std::int64_t total = outer * inner;
    for (std::int64_t t = global_thread(ctx); t < total; t += grid_threads(ctx)) {
      const std::int64_t o = t / inner, i = t % inner;
      const std::int64_t base = o * n * inner + i;
      std::int64_t best = 0;
      if (n > 0) {
        std::uint64_t best_key = order_key(x, type, base);
        for (std::int64_t j = 1; j < n; ++j) {
          const std::uint64_t k = order_key(x, type, base + j * inner);
          if (k > best_key) {
            best_key = k;
            best = j;
          }
        }
      }
      out[t] = best;
    }
  }
};

struct TopK {
  const void* x = nullptr;  // [rows, n]
  DType type = DType::f32;  // f32, i32, i64 or u8
  std::int64_t rows = 0, n = 0, k = 0;
  void* values = nullptr;           // [rows, k], x's dtype
  std::int64_t* indices = nullptr;  // [rows, k]

  simt::LaunchShape plan(const simt::DeviceProperties& device) const {
    if (k < 0 || k > kTopKMaxK || k > n) {
      throw std::invalid_argument("TopK: k = " + std::to_string(k) +
                                  " of n = " + std::to_string(n) + " (at most " +
                                  std::to_string(kTopKMaxK) + " and n)");
    }
    return plan_row_kernel(device, k == 0 ? 0 : rows, n, 40);  // ptxas: 40
  }

  template <class Ctx>
  RIG_HD void operator()(Ctx& ctx) const {
    const std::int64_t row = block_row(ctx);
    if (row >= rows) return;
    const int bytes = dtype_bytes(type);
    std::uint64_t prev_key = 0;
    std::int64_t prev_index = -1;
    for (std::int64_t r = 0; r < k; ++r) {
      std::uint64_t key = 0;
      std::int64_t index = kNoIndex;
      for (std::int64_t j = ctx.thread_rank(); j < n; j += ctx.block_threads()) {
        const std::uint64_t kj = order_key(x, type, row * n + j);
        // Only pairs after the previous round's in the order.
        if (r > 0 && !before(prev_key, prev_index, kj, j)) continue;
        if (before(kj, j, key, index)) {
          key = kj;
          index = j;
        }
      }
      block_best(ctx, key, index);
      if (ctx.thread_rank() == 0) {
        indices[row * k + r] = index;
        copy_element(values, row * k + r, x, row * n + index, bytes);
      }
      prev_key = key;
      prev_index = index;
    }
  }
};

}  // namespace rig::kernels
