// The softmax of attention's scores and its backward, with the keep-mask,
// causality and the weights' dropout folded in (Backend::attention_forward/
// backward and their 16-bit forms, composed of GEMMs and these kernels by
// the CUDA back end). Scores, probabilities and their gradients are f32
// [planes = B H, tq, tk], contiguous; a row is one query of one (batch, head).
//   AttentionSoftmaxForward: key j of query i is kept where the caller's
//     mask (u8 over [B, H, Tq, Tk] with any strides, 0 on broadcast axes;
//     null for none) allows it and, when causal, j <= i + (tk - tq); probs
//     = the softmax over the kept keys (a row with none kept: zeros), as
//     SoftmaxForward computes it with that mask; weights = (probs * keep) *
//     keep_scale (the dropout's keep-mask, u8 [planes, tq, tk]; null: probs
//     as they are), stored in `type`: f32, or rounded once to the 16-bit
//     operand of the next product. Either output may be null.
//   AttentionSoftmaxBackward: from probs and g (the gradient of the weights,
//     f32): g' = (g * keep) * keep_scale (g without a keep-mask), then
//     dscores = probs (g' - sum(g' probs)), as SoftmaxBackward, stored in
//     `type` (dscores may be g itself when f32); and, where `weights` is
//     set, the forward's weights again, (probs * keep) * keep_scale in
//     `type`, for the values' gradient: recomputed instead of kept.
// A warp per row up to kSoftmaxWarpCols keys, a block per row beyond
// (softmax.hpp's RowThreads); the same expressions as SoftmaxForward /
// SoftmaxBackward and the dropout's product, so the same bits.
#pragma once

#include <cstdint>

#include "cuda/kernels/common.hpp"
#include "cuda/kernels/element_type.hpp"
#include "cuda/kernels/softmax.hpp"
#include "rig/math/device_math.hpp"

namespace rig::kernels {

struct AttentionSoftmaxForward {
  const float* scores = nullptr;       // [planes, tq, tk]
  const std::uint8_t* mask = nullptr;  // over [B, H, Tq, Tk] with mask_strides; null: all kept
  std::int64_t mask_b = 0, mask_h = 0, mask_q = 0, mask_k = 0;  // mask_strides
  bool causal = false;
  const std::uint8_t* keep = nullptr;  // [planes, tq, tk] or null (no dropout)
  float keep_scale = 1.0F;
  float* probs = nullptr;   // [planes, tq, tk] f32, or null
  void* weights = nullptr;  // [planes, tq, tk] of `type`, or null
  ElementType type = ElementType::f32;
  std::int64_t heads = 1, planes = 0, tq = 0, tk = 0;

  simt::LaunchShape plan(const simt::DeviceProperties& device) const {
    return softmax_detail::plan(device, planes * tq, tk, 48);  // ptxas: at most 48 (sm_80)
  }

  template <class Ctx>
  RIG_HD void operator()(Ctx& ctx) const {
    if (tk <= kSoftmaxWarpCols) {  // uniform over the launch
      rows_by<true>(ctx);
    } else {
      rows_by<false>(ctx);
    }
  }

  // Whether key j of the row whose mask starts at mask_row is kept.
  RIG_HD_INLINE bool kept(const std::uint8_t* mask_row, std::int64_t last_key,
                          std::int64_t j) const {
    return (mask_row == nullptr || mask_row[j * mask_k] != 0) && (!causal || j <= last_key);
  }

  template <bool Warp, class Ctx>
  RIG_HD void rows_by(Ctx& ctx) const {
    using M = math::DeviceMath;
    using T = softmax_detail::RowThreads<Warp>;
    const std::int64_t cols = tk;
    softmax_detail::Span r;
    if (!T::span(ctx, planes * tq, cols, r)) return;  // the whole warp or block
    const std::int64_t first = r.first, step = r.step, base = r.base;
    const std::int64_t row = base / cols, plane = row / tq, query = row % tq;
    const std::uint8_t* mr = mask != nullptr ? mask + (plane / heads) * mask_b +
                                                   (plane % heads) * mask_h + query * mask_q
                                             : nullptr;
    const std::int64_t last_key = query + (tk - tq);
    const float ninf = neg_inf();
    const auto score = [&](std::int64_t j) {
      return kept(mr, last_key, j) ? scores[base + j] : ninf;
    };
    const auto store = [&](std::int64_t j, float p) {
      if (probs != nullptr) probs[base + j] = p;
      if (weights != nullptr) {
        const float w = keep != nullptr ? p * static_cast<float>(keep[base + j]) * keep_scale : p;
        store_element(weights, type, base + j, w);
      }
    };

    float m = ninf;
    for (std::int64_t j = first; j < cols; j += step) m = simt::Max{}(m, score(j));
    m = T::max(ctx, m);
    if (m == ninf) {  // nothing kept: the row's threads all leave here
      for (std::int64_t j = first; j < cols; j += step) store(j, 0.0F);
      return;
    }
    float s = 0.0F;
    for (std::int64_t j = first; j < cols; j += step) s += M::exp(score(j) - m);
    s = T::sum(ctx, s);
    // e^(x - m) again (the same bits as in the sum), scaled once.
    const float inv = 1.0F / s;
    for (std::int64_t j = first; j < cols; j += step) store(j, M::exp(score(j) - m) * inv);
  }
};

struct AttentionSoftmaxBackward {
  const float* probs = nullptr;        // the forward's, [rows, cols] f32
  const float* g = nullptr;            // gradient of the weights, f32
  const std::uint8_t* keep = nullptr;  // or null (no dropout)
  float keep_scale = 1.0F;
  void* dscores = nullptr;  // of `type`; may be g when f32; null: weights only (g unread)
  void* weights = nullptr;  // of `type`, or null
  ElementType type = ElementType::f32;
  std::int64_t rows = 0, cols = 0;

  simt::LaunchShape plan(const simt::DeviceProperties& device) const {
    return softmax_detail::plan(device, rows, cols, 64);  // ptxas: at most 64 (sm_75)
  }

  template <class Ctx>
  RIG_HD void operator()(Ctx& ctx) const {
    softmax_detail::by_row_length(*this, ctx);
  }

  template <bool Warp, class Ctx>
  RIG_HD void rows_by(Ctx& ctx) const {
    using T = softmax_detail::RowThreads<Warp>;
    softmax_detail::Span r;
    if (!T::span(ctx, rows, cols, r)) return;  // the whole warp or block
    const std::int64_t first = r.first, step = r.step, base = r.base;
    const auto kept_g = [&](std::int64_t j) {
      return keep != nullptr ? g[base + j] * static_cast<float>(keep[base + j]) * keep_scale
                             : g[base + j];
    };
    float acc = 0.0F;
    if (dscores != nullptr) {  // uniform over the launch
      for (std::int64_t j = first; j < cols; j += step) acc += kept_g(j) * probs[base + j];
      acc = T::sum(ctx, acc);
    }
    for (std::int64_t j = first; j < cols; j += step) {
      const float p = probs[base + j];
      if (weights != nullptr) {
        const float w = keep != nullptr ? p * static_cast<float>(keep[base + j]) * keep_scale : p;
        store_element(weights, type, base + j, w);
      }
      // g read before dscores may overwrite it.
      if (dscores != nullptr) store_element(dscores, type, base + j, p * (kept_g(j) - acc));
    }
  }
};

}  // namespace rig::kernels
