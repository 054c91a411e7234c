// Cross-entropy of logits [rows, c] against i64 labels with smoothed targets
// (Backend::cross_entropy_*, core/cpu/cross_entropy.cpp, rig/math/cross_entropy.hpp),
// one block per row; no probability matrix is ever materialised:
//   forward: lse = log-sum-exp of the row, loss = smoothed_row_loss(lse,
//     x[label], sum(x) when off != 0, {on, off});
//   backward, in place over the logits allowed (dx may be x): dx_j = (exp(x_j
//     - lse) - off) s, minus (on - off) s at the label, with s = scale *
//     (*scale_factor or 1) * (row_scale[r] or 1).
// A row's threads take its chunks of kPack elements (for_row_chunks), as
// packs where c % kPack == 0 and the operands are aligned, else element by
// element: the same order and bits either way.
// Storage type: `type` (f32, f16 or bf16) is the type of the logits x and
// the gradient dx; loss, lse, row_scale and scale_factor stay f32. The
// pointers keep their float* types, and for f16/bf16 x and dx hold 16-bit
// values (read and written through load_element/store_element). The math is
// f32 throughout; each dx is rounded once, at its store.
#pragma once

#include <cstdint>

#include "cuda/kernels/common.hpp"
#include "cuda/kernels/element_type.hpp"
#include "cuda/kernels/packed.hpp"
#include "rig/math/cross_entropy.hpp"
#include "rig/math/device_math.hpp"
#include "simt/collectives.hpp"

namespace rig::kernels {

struct CrossEntropyForward {
  const float* x = nullptr;              // [rows, c]
  const std::int64_t* labels = nullptr;  // [rows], in [0, c)
  float* loss = nullptr;                 // [rows]
  float* lse = nullptr;                  // [rows]
  std::int64_t rows = 0, c = 0;
  math::SmoothedTargets targets{};      // {on, off}
  ElementType type = ElementType::f32;  // of x

  // The row in packs (packed.hpp) where c and x allow.
  RIG_HD bool packed() const { return c % kPack == 0 && pack_aligned<kPack>(x, type); }

  simt::LaunchShape plan(const simt::DeviceProperties& device) const {
    return plan_row_kernel(device, rows, c, 39);  // ptxas: 39
  }

  template <class Ctx>
  RIG_HD void operator()(Ctx& ctx) const {
    using M = math::DeviceMath;
    const std::int64_t row = block_row(ctx);
    if (row >= rows) return;
    const std::int64_t base = row * c;  // element offset of the row
    const bool pack = packed();
    float m = neg_inf();
    for_row_chunks(ctx, c, [&](std::int64_t q, int valid) {
      const Pack<kPack> v = load_row_chunk(x, type, base, q, valid, pack);
      for (int e = 0; e < kPack; ++e) {
        if (e < valid) m = simt::Max{}(m, v.v[e]);
      }
    });
    m = simt::block_max(ctx, m);
    float es = 0.0F, xs = 0.0F;
    for_row_chunks(ctx, c, [&](std::int64_t q, int valid) {
      const Pack<kPack> v = load_row_chunk(x, type, base, q, valid, pack);
      for (int e = 0; e < kPack; ++e) {
        if (e >= valid) continue;
        es += M::exp(v.v[e] - m);
        xs += v.v[e];
      }
    });
    es = simt::block_sum(ctx, es);
    if (targets.off != 0.0F) xs = simt::block_sum(ctx, xs);  // uniform over the block
    if (ctx.thread_rank() == 0) {
      const float row_lse = m + M::log(es);
      lse[row] = row_lse;
      // A label out of range (the op's check raises it later) reads no memory: NaN.
      const std::int64_t label = labels[row];
      loss[row] = label >= 0 && label < c
                      ? math::smoothed_row_loss(row_lse, load_element(x, type, base + label),
                                                targets.off != 0.0F ? xs : 0.0F, targets)
                      : math::bits_float(0x7FC00000U);
    }
  }
};

struct CrossEntropyBackward {
  const float* x = nullptr;              // [rows, c] logits
  const std::int64_t* labels = nullptr;  // [rows]
  const float* lse = nullptr;            // [rows], from the forward
  const float* row_scale = nullptr;      // [rows] or null (1)
  const float* scale_factor = nullptr;   // one f32 of the device, or null (1)
  float scale = 1.0F;
  float* dx = nullptr;  // [rows, c]; may be x itself (in place)
  std::int64_t rows = 0, c = 0;
  math::SmoothedTargets targets{};
  ElementType type = ElementType::f32;  // of x and dx

  // The row in packs (packed.hpp) where c, x and dx allow.
  RIG_HD bool packed() const {
    return c % kPack == 0 && pack_aligned<kPack>(x, type) && pack_aligned<kPack>(dx, type);
  }

  simt::LaunchShape plan(const simt::DeviceProperties& device) const {
    return plan_row_kernel(device, rows, c, 39);  // ptxas: 39
  }

  template <class Ctx>
  RIG_HD void operator()(Ctx& ctx) const {
    using M = math::DeviceMath;
    const std::int64_t row = block_row(ctx);
    if (row >= rows) return;
    const float factor = scale_factor != nullptr ? *scale_factor : 1.0F;
    const float base = scale * factor;
    const float s = row_scale != nullptr ? base * row_scale[row] : base;
    const float shift = lse[row];
    const std::int64_t label = labels[row];
    const std::int64_t row0 = row * c;  // element offset of the row
    const bool pack = packed();
    // Each element is read and written by one thread only: in place is safe.
    for_row_chunks(ctx, c, [&](std::int64_t q, int valid) {
      const Pack<kPack> v = load_row_chunk(x, type, row0, q, valid, pack);
      Pack<kPack> d;
      for (int e = 0; e < kPack; ++e) {
        const float grad = math::smoothed_grad(M::exp(v.v[e] - shift), targets.off, s);
        d.v[e] = q * kPack + e == label ? grad - math::smoothed_label_correction(targets, s) : grad;
      }
      store_row_chunk(dx, type, row0, q, valid, pack, d);
    });
  }
};

}  // namespace rig::kernels
