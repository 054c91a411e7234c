// scaled_dot_product_attention: checks, dropout mask, autograd, dispatch
// (cpu/attention.hpp).
//
// Layouts: q, k and v may be strided views (MultiHeadAttention passes
// [B, T, H, D] projections viewed as [B, H, T, D]); the kernels read them in
// place. The output and the gradients are laid out like the operand they
// belong with, so merging heads afterwards is a free view, not a copy.
#include <cmath>
#include <stdexcept>
#include <string>

#include <fmt/format.h>

#include "ops/op_util.hpp"
#include "rig/autograd.hpp"
#include "rig/ops.hpp"

namespace rig::ops {

namespace {

constexpr const char* kOp = "scaled_dot_product_attention";

std::string operands(const Tensor& q, const Tensor& k, const Tensor& v) {
  return fmt::format("q {}, k {}, v {}", to_string(q.shape()), to_string(k.shape()),
                     to_string(v.shape()));
}

void check_shapes(const Tensor& q, const Tensor& k, const Tensor& v) {
  if (q.dim() != 4 || k.dim() != 4 || v.dim() != 4) {
    throw std::invalid_argument(fmt::format(
        "{}: {}: q must be [B, H, Tq, D], k and v [B, H, Tk, D]", kOp, operands(q, k, v)));
  }
  const bool same_bh = q.size(0) == k.size(0) && q.size(0) == v.size(0) && q.size(1) == k.size(1) &&
                       q.size(1) == v.size(1);
  if (!same_bh || k.size(2) != v.size(2) || q.size(3) != k.size(3) || k.size(3) != v.size(3)) {
    throw std::invalid_argument(
        fmt::format("{}: {}: batch, heads and D must agree, and k and v need the same Tk", kOp,
                    operands(q, k, v)));
  }
}

// The operand with a contiguous last axis (a view of itself when it already has one).
Tensor rows_contiguous(const Tensor& t) {
  return t.size(3) <= 1 || t.strides()[3] == 1 ? t : t.contiguous();
}

backend::HeadStrides head_strides(const Tensor& t) {
  return {t.strides()[0], t.strides()[1], t.strides()[2]};
}

// A new [B, H, T, D] tensor laid out like `like`: [B, T, H, D] memory viewed
// as [B, H, T, D] when `like` is such a split-heads view, else contiguous.
Tensor empty_like_heads(const Tensor& like, const Shape& shape) {
  if (like.size(1) > 1 && like.size(2) > 1 && like.strides()[1] < like.strides()[2]) {
    return detail::empty_on(like, {shape[0], shape[2], shape[1], shape[3]}).transpose(1, 2);
  }
  return detail::empty_on(like, shape);
}

// The mask broadcast to [B, H, Tq, Tk] (a stride-0 view where it repeats).
Tensor broadcast_mask(const Tensor& mask, const Shape& scores, const Tensor& q, const Tensor& k,
                      const Tensor& v) {
  detail::require_dtype(kOp, mask, "mask", {DType::u8});
  bool fits = mask.dim() <= 4;
  for (std::int64_t i = 1; fits && i <= mask.dim(); ++i) {
    const std::int64_t m = mask.size(-i);
    fits = m == 1 || m == scores[static_cast<std::size_t>(4 - i)];
  }
  if (!fits) {
    throw std::invalid_argument(fmt::format("{}: {}: mask {} does not broadcast to scores {}", kOp,
                                            operands(q, k, v), to_string(mask.shape()),
                                            to_string(scores)));
  }
  Shape padded(static_cast<std::size_t>(4 - mask.dim()), 1);
  padded.insert(padded.end(), mask.shape().begin(), mask.shape().end());
  return mask.detach().reshape(padded).expand(scores);
}

// The dropout keep-mask of the weights: element i of the [B, H, Tq, Tk]
// weights is kept as element i of ops::dropout's stream for `key`.
Tensor keep_mask(const Tensor& like, const Shape& scores, float p, const RandomKey& key) {
  Tensor keep = detail::empty_on(like, scores, DType::u8);
  detail::backend_of(like).dropout_mask(key, p, keep.data<std::uint8_t>(), keep.numel(), 0);
  return keep;
}

}  // namespace

Tensor scaled_dot_product_attention(const Tensor& q, const Tensor& k, const Tensor& v,
                                    const AttentionOptions& options) {
  detail::require_floating(kOp, q, "q");
  detail::require_floating(kOp, k, "k");
  detail::require_floating(kOp, v, "v");
  detail::require_same_device(kOp, {&q, &k, &v, &options.mask});
  check_shapes(q, k, v);
  const float p = options.dropout_p;
  if (!(p >= 0.0F && p <= 1.0F)) {
    throw std::invalid_argument(
        fmt::format("{}: {}: dropout_p {} is not in [0, 1]", kOp, operands(q, k, v), p));
  }
  if (q.dtype() != DType::f32 || k.dtype() != DType::f32 || v.dtype() != DType::f32) {
    // f16 / bf16 storage: compute in f32, round the result to q's dtype.
    return scaled_dot_product_attention(detail::as_f32(q), detail::as_f32(k), detail::as_f32(v),
                                        options)
        .to(q.dtype());
  }

  backend::AttentionShape s;
  s.b = q.size(0);
  s.h = q.size(1);
  s.tq = q.size(2);
  s.tk = k.size(2);
  s.d = q.size(3);
  s.scale =
      options.scale.value_or(1.0F / std::sqrt(static_cast<float>(std::max<std::int64_t>(1, s.d))));
  s.causal = options.causal;
  // matmul_precision: bfloat16 covers the per-head products too.
  s.bf16_products = matmul_precision() == MatmulPrecision::bf16;
  const Shape scores{s.b, s.h, s.tq, s.tk};
  Tensor mask;
  if (options.mask.defined()) {
    mask = broadcast_mask(options.mask, scores, q, k, v);
    s.mask = mask.data<std::uint8_t>();
    for (std::size_t i = 0; i < 4; ++i) s.mask_strides[i] = mask.strides()[i];
  }
  Tensor keep;
  if (p > 0.0F) {
    keep = keep_mask(q, scores, p, options.key);
    s.keep = keep.data<std::uint8_t>();
    s.keep_scale = p < 1.0F ? 1.0F / (1.0F - p) : 0.0F;
  }

  const Tensor qd = rows_contiguous(q.detach());
  const Tensor kd = rows_contiguous(k.detach());
  const Tensor vd = rows_contiguous(v.detach());
  const bool need_grad =
      grad_mode_enabled() && (q.requires_grad() || k.requires_grad() || v.requires_grad());
  Tensor probs = need_grad ? detail::empty_on(q, scores) : Tensor();
  Tensor out = empty_like_heads(q, q.shape());
  detail::backend_of(q).attention_forward(s, qd.data<float>(), head_strides(qd), kd.data<float>(),
                                          head_strides(kd), vd.data<float>(), head_strides(vd),
                                          out.data<float>(), head_strides(out),
                                          need_grad ? probs.data<float>() : nullptr);
  if (!need_grad) return out;
  return autograd::record(
      std::move(out), kOp, {q, k, v},
      [s, qd, kd, vd, probs, mask, keep, need_q = q.requires_grad(), need_k = k.requires_grad(),
       need_v = v.requires_grad()](const Tensor& g) {
        const Tensor gd = rows_contiguous(g);
        Tensor dq = need_q ? empty_like_heads(qd, qd.shape()) : Tensor();
        Tensor dk = need_k ? empty_like_heads(kd, kd.shape()) : Tensor();
        Tensor dv = need_v ? empty_like_heads(vd, vd.shape()) : Tensor();
        const backend::HeadStrides none{};
        detail::backend_of(gd).attention_backward(
            s, qd.data<float>(), head_strides(qd), kd.data<float>(), head_strides(kd),
            vd.data<float>(), head_strides(vd), probs.data<float>(), gd.data<float>(),
            head_strides(gd), need_q ? dq.data<float>() : nullptr, need_q ? head_strides(dq) : none,
            need_k ? dk.data<float>() : nullptr, need_k ? head_strides(dk) : none,
            need_v ? dv.data<float>() : nullptr, need_v ? head_strides(dv) : none);
        return autograd::TensorList{dq, dk, dv};
      });
}

}  // namespace rig::ops
