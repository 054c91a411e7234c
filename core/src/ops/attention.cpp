// scaled_dot_product_attention: checks, dropout mask, autograd, dispatch
// (cpu/attention.hpp).
//
// Layouts: q, k and v may be strided views (MultiHeadAttention passes
// [B, T, H, D] projections viewed as [B, H, T, D]); the kernels read them in
// place. The output and the gradients are laid out like the operand they
// belong with, so merging heads afterwards is a free view, not a copy.
#include <cmath>
#include <optional>
#include <stdexcept>
#include <string>

#include <fmt/format.h>

#include "ops/op_util.hpp"
#include "rig/autograd.hpp"
#include "rig/ops.hpp"
#include "rig/random.hpp"

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

// A new [B, H, T, D] tensor of like's dtype laid out like `like`: [B, T, H, D] memory viewed
// as [B, H, T, D] when `like` is such a split-heads view, else contiguous.
Tensor empty_like_heads(const Tensor& like, const Shape& shape) {
  if (like.size(1) > 1 && like.size(2) > 1 && like.strides()[1] < like.strides()[2]) {
    return detail::empty_on(like, {shape[0], shape[2], shape[1], shape[3]}, like.dtype())
        .transpose(1, 2);
  }
  return detail::empty_on(like, shape, like.dtype());
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

// t itself when it is laid out as empty_like_heads lays out its gradient
// (the split-heads view or contiguous), else a contiguous copy: the fused
// backward writes each gradient with its operand's strides.
Tensor heads_layout(const Tensor& t) {
  const Shape& s = t.shape();
  const bool split = s[1] > 1 && s[2] > 1 && t.strides()[1] < t.strides()[2];
  const Strides want =
      split ? Strides{s[2] * s[1] * s[3], s[3], s[1] * s[3], 1} : contiguous_strides(s);
  return t.strides() == want ? t : t.contiguous();
}

// A 64-bit seed for the device's own dropout generator from the op's key.
std::uint64_t dropout_seed(const RandomKey& key) {
  return static_cast<std::uint64_t>(random_bits(key, 0)) |
         (static_cast<std::uint64_t>(random_bits(key, 1)) << 32);
}

// Part `part` of `parts` of packed [B, T, parts H D] as [B, H, T, D] (a view
// without history).
Tensor head_part(const Tensor& packed, std::int64_t parts, std::int64_t part, std::int64_t heads) {
  const std::int64_t width = packed.size(2) / parts;
  return packed.detach()
      .view({packed.size(0), packed.size(1), parts, heads, width / heads})
      .slice(2, part, part + 1)
      .squeeze(2)
      .transpose(1, 2);
}

// Where the operands come from, and so where their gradients go: q, k and v
// of their own (parts 0), or the parts of one packed projection (3: q, k, v;
// 2: k, v, with q of its own).
struct Packing {
  Tensor packed;
  std::int64_t parts = 0;
  std::int64_t heads = 0;

  // What a backward function keeps: the packed tensor without its history.
  Packing kept() const { return {packed.defined() ? packed.detach() : Tensor(), parts, heads}; }
};

// The inputs autograd records for the operands.
autograd::TensorList recorded_inputs(const Tensor& q, const Tensor& k, const Tensor& v,
                                     const Packing& packing) {
  if (packing.parts == 3) return {packing.packed};
  if (packing.parts == 2) return {q, packing.packed};
  return {q, k, v};
}

// Whether the backward has a gradient to make for q, for k and for v.
struct Needed {
  bool q = false, k = false, v = false;
};
Needed needed(const Tensor& q, const Tensor& k, const Tensor& v, const Packing& packing) {
  const bool packed = packing.parts > 0 && packing.packed.requires_grad();
  return {packing.parts == 3 ? packed : q.requires_grad(),
          packing.parts > 0 ? packed : k.requires_grad(),
          packing.parts > 0 ? packed : v.requires_grad()};
}

// The backward's gradient buffers: dq, dk and dv laid out like the operands
// they belong with (undefined where not needed), and what the node returns.
struct Gradients {
  Tensor dq, dk, dv;
  autograd::TensorList returned;
};
Gradients gradient_buffers(const Tensor& qd, const Tensor& kd, const Tensor& vd,
                           const Packing& packing, const Needed& need) {
  Gradients g;
  Tensor dpacked;
  if (packing.parts > 0 && (need.k || need.v)) {
    dpacked = detail::empty_on(packing.packed, packing.packed.shape(), packing.packed.dtype());
    g.dk = head_part(dpacked, packing.parts, packing.parts - 2, packing.heads);
    g.dv = head_part(dpacked, packing.parts, packing.parts - 1, packing.heads);
  }
  if (packing.parts == 3) {
    if (dpacked.defined()) g.dq = head_part(dpacked, 3, 0, packing.heads);
    g.returned = {dpacked};
    return g;
  }
  if (need.q) g.dq = empty_like_heads(qd, qd.shape());
  if (packing.parts == 2) {
    g.returned = {g.dq, dpacked};
    return g;
  }
  if (need.k) g.dk = empty_like_heads(kd, kd.shape());
  if (need.v) g.dv = empty_like_heads(vd, vd.shape());
  g.returned = {g.dq, g.dk, g.dv};
  return g;
}

// The layout the kernels read an operand in: a packed part as it is (its
// gradient is laid out alike), else as heads_layout / rows_contiguous give it.
Tensor as_read(const Tensor& t, bool packed_part, bool fused) {
  if (packed_part) return t;
  return fused ? heads_layout(t.detach()) : rows_contiguous(t.detach());
}

// Attention on 16-bit q, k, v as one fused forward and backward where the
// back end has them for this call (masks only as key lengths); nullopt
// otherwise. Keeps out and the rows' softmax statistics for the backward,
// not the [B, H, Tq, Tk] weights.
std::optional<Tensor> fused_attention(const Tensor& q, const Tensor& k, const Tensor& v,
                                      const AttentionOptions& options, const Packing& packing) {
  if (options.mask.defined() && !options.key_lengths.defined()) return std::nullopt;
  backend::Backend& be = detail::backend_of(q);
  backend::FusedAttention a;
  a.b = q.size(0);
  a.h = q.size(1);
  a.tq = q.size(2);
  a.tk = k.size(2);
  a.d = q.size(3);
  a.type = q.dtype();
  if (a.b * a.h * a.tq * a.tk * a.d == 0) return std::nullopt;
  a.scale =
      options.scale.value_or(1.0F / std::sqrt(static_cast<float>(std::max<std::int64_t>(1, a.d))));
  a.causal = options.causal;
  Tensor lengths;
  if (options.key_lengths.defined()) {
    const Tensor& kl = options.key_lengths;
    detail::require_same_device(kOp, {&q, &kl});
    if (kl.dim() != 1 || kl.size(0) != a.b ||
        (kl.dtype() != DType::i32 && kl.dtype() != DType::i64)) {
      throw std::invalid_argument(fmt::format("{}: key_lengths {} {}: expected i32 or i64 [{}]",
                                              kOp, dtype_name(kl.dtype()), to_string(kl.shape()),
                                              a.b));
    }
    lengths = kl.detach().to(DType::i32).contiguous();
    a.key_lengths = lengths.data<std::int32_t>();
  }
  a.dropout_p = options.dropout_p;
  a.dropout_seed = dropout_seed(options.key);
  const Tensor qd = as_read(q, packing.parts == 3, true);
  const Tensor kd = as_read(k, packing.parts > 0, true);
  const Tensor vd = as_read(v, packing.parts > 0, true);
  a.qs = head_strides(qd);
  a.ks = head_strides(kd);
  a.vs = head_strides(vd);
  Tensor out_heads = empty_like_heads(qd, qd.shape());
  a.os = head_strides(out_heads);
  const Needed need = needed(q, k, v, packing);
  const bool need_grad = grad_mode_enabled() && (need.q || need.k || need.v);
  Tensor stats = need_grad ? detail::empty_on(q, {a.b, a.h, a.tq}) : Tensor();
  a.stats = need_grad ? stats.data<float>() : nullptr;
  if (!be.fused_attention_supported(a)) return std::nullopt;
  a.q = qd.raw_data();
  a.k = kd.raw_data();
  a.v = vd.raw_data();
  a.out = out_heads.raw_data();
  be.fused_attention_forward(a);
  if (!need_grad) return out_heads;
  return autograd::record(
      out_heads, kOp, recorded_inputs(q, k, v, packing),
      [a, qd, kd, vd, lengths, stats, saved_out = out_heads.detach(),
       packing = packing.kept()](const Tensor& g) {
        backend::FusedAttention b = a;
        // dOut strided as out.
        Tensor gd = g.dtype() == b.type ? g : g.to(b.type);
        if (gd.strides() != saved_out.strides()) {
          Tensor laid = empty_like_heads(saved_out, saved_out.shape());
          laid.copy_from(gd);
          gd = laid;
        }
        // cuDNN writes all three (each with its operand's strides).
        Gradients grads = gradient_buffers(qd, kd, vd, packing, {true, true, true});
        b.dout = gd.raw_data();
        b.dq = grads.dq.raw_data();
        b.dk = grads.dk.raw_data();
        b.dv = grads.dv.raw_data();
        detail::backend_of(gd).fused_attention_backward(b);
        return grads.returned;
      });
}

// Whether the back end composes attention on q, k, v of this 16-bit type as
// they are (Backend::composes_attention_16): its products round the weights
// and the scores' gradient to the type, which at bf16 is what matmul
// precision bfloat16 asks of the f32 path, and at f16 what f16 products
// (ops::linear's too) always do.
bool composes_16bit(const Tensor& q, const Tensor& k, const Tensor& v) {
  const DType type = q.dtype();
  if (type == DType::f32 || k.dtype() != type || v.dtype() != type) return false;
  if (type == DType::bf16 && matmul_precision() != MatmulPrecision::bf16) return false;
  if (q.numel() == 0 || k.numel() == 0) return false;
  return detail::backend_of(q).composes_attention_16(type);
}

// The attention composed of the back end's kernels, on f32 q, k, v or on
// 16-bit ones as they are (composes_16bit), reading them as `packing` says.
Tensor composed_attention(const Tensor& q, const Tensor& k, const Tensor& v,
                          const AttentionOptions& options, const Packing& packing) {
  const float p = options.dropout_p;
  const DType type = q.dtype();
  const bool sixteen = type != DType::f32;
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

  const Tensor qd = as_read(q, packing.parts == 3, false);
  const Tensor kd = as_read(k, packing.parts > 0, false);
  const Tensor vd = as_read(v, packing.parts > 0, false);
  const Needed need = needed(q, k, v, packing);
  const bool need_grad = grad_mode_enabled() && (need.q || need.k || need.v);
  Tensor probs = need_grad ? detail::empty_on(q, scores, DType::f32) : Tensor();
  float* probs_data = need_grad ? probs.data<float>() : nullptr;
  Tensor out = empty_like_heads(q, q.shape());
  backend::Backend& be = detail::backend_of(q);
  if (sixteen) {
    be.attention_forward_16(s, type, qd.raw_data(), head_strides(qd), kd.raw_data(),
                            head_strides(kd), vd.raw_data(), head_strides(vd), out.raw_data(),
                            head_strides(out), probs_data);
  } else {
    be.attention_forward(s, qd.data<float>(), head_strides(qd), kd.data<float>(), head_strides(kd),
                         vd.data<float>(), head_strides(vd), out.data<float>(), head_strides(out),
                         probs_data);
  }
  if (!need_grad) return out;
  return autograd::record(
      std::move(out), kOp, recorded_inputs(q, k, v, packing),
      [s, type, qd, kd, vd, probs, mask, keep, need, packing = packing.kept()](const Tensor& g) {
        const Tensor gd = rows_contiguous(g.dtype() == type ? g : g.to(type));
        Gradients grads = gradient_buffers(qd, kd, vd, packing, need);
        const auto strides = [](const Tensor& t) {
          return t.defined() ? head_strides(t) : backend::HeadStrides{};
        };
        backend::Backend& be = detail::backend_of(gd);
        if (type != DType::f32) {
          const auto data = [](Tensor& t) { return t.defined() ? t.raw_data() : nullptr; };
          be.attention_backward_16(s, type, qd.raw_data(), head_strides(qd), kd.raw_data(),
                                   head_strides(kd), vd.raw_data(), head_strides(vd),
                                   probs.data<float>(), gd.raw_data(), head_strides(gd),
                                   data(grads.dq), strides(grads.dq), data(grads.dk),
                                   strides(grads.dk), data(grads.dv), strides(grads.dv));
          return grads.returned;
        }
        const auto data = [](Tensor& t) { return t.defined() ? t.data<float>() : nullptr; };
        be.attention_backward(s, qd.data<float>(), head_strides(qd), kd.data<float>(),
                              head_strides(kd), vd.data<float>(), head_strides(vd),
                              probs.data<float>(), gd.data<float>(), head_strides(gd),
                              data(grads.dq), strides(grads.dq), data(grads.dk), strides(grads.dk),
                              data(grads.dv), strides(grads.dv));
        return grads.returned;
      });
}

// The fused attention where the back end has it for this call, else the
// composed one (on 16-bit operands where the back end composes them);
// `f32_copies` computes the other 16-bit operands through f32 copies (and
// rounds the result back).
template <class F32Copies>
Tensor attention(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionOptions& options,
                 const Packing& packing, F32Copies&& f32_copies) {
  const float p = options.dropout_p;
  if (!(p >= 0.0F && p <= 1.0F)) {
    throw std::invalid_argument(
        fmt::format("{}: {}: dropout_p {} is not in [0, 1]", kOp, operands(q, k, v), p));
  }
  if (q.dtype() != DType::f32 && q.dtype() == k.dtype() && q.dtype() == v.dtype()) {
    if (std::optional<Tensor> out = fused_attention(q, k, v, options, packing)) {
      return *std::move(out);
    }
  }
  if (q.dtype() != DType::f32 || k.dtype() != DType::f32 || v.dtype() != DType::f32) {
    if (composes_16bit(q, k, v)) return composed_attention(q, k, v, options, packing);
    return f32_copies().to(q.dtype());
  }
  return composed_attention(q, k, v, options, packing);
}

}  // namespace

Tensor scaled_dot_product_attention(const Tensor& q, const Tensor& k, const Tensor& v,
                                    const AttentionOptions& options) {
  detail::require_floating(kOp, q, "q");
  detail::require_floating(kOp, k, "k");
  detail::require_floating(kOp, v, "v");
  detail::require_same_device(kOp, {&q, &k, &v, &options.mask});
  check_shapes(q, k, v);
  return attention(q, k, v, options, {}, [&] {
    return scaled_dot_product_attention(detail::as_f32(q), detail::as_f32(k), detail::as_f32(v),
                                        options);
  });
}

Tensor scaled_dot_product_attention_packed(const Tensor& q, const Tensor& packed,
                                           std::int64_t heads, const AttentionOptions& options) {
  constexpr const char* kPackedOp = "scaled_dot_product_attention_packed";
  detail::require_floating(kPackedOp, packed, "packed");
  if (q.defined()) detail::require_floating(kPackedOp, q, "q");
  detail::require_same_device(kPackedOp, {&q, &packed, &options.mask});
  const std::int64_t parts = q.defined() ? 2 : 3;
  if (packed.dim() != 3 || heads < 1 || packed.size(2) % (parts * heads) != 0 ||
      (q.defined() && (q.dim() != 4 || q.size(0) != packed.size(0) || q.size(1) != heads ||
                       q.size(3) * heads * parts != packed.size(2)))) {
    throw std::invalid_argument(fmt::format(
        "{}: packed {}{} with {} heads: expected packed [B, T, {} H D]{}", kPackedOp,
        to_string(packed.shape()), q.defined() ? ", q " + to_string(q.shape()) : std::string(),
        heads, parts, q.defined() ? " and q [B, H, Tq, D]" : ""));
  }
  const Packing packing{packed, parts, heads};
  const Tensor qh = q.defined() ? q : head_part(packed, 3, 0, heads);
  const Tensor kh = head_part(packed, parts, parts - 2, heads);
  const Tensor vh = head_part(packed, parts, parts - 1, heads);
  check_shapes(qh, kh, vh);
  return attention(qh, kh, vh, options, packing, [&] {
    return scaled_dot_product_attention_packed(q.defined() ? detail::as_f32(q) : q,
                                               detail::as_f32(packed), heads, options);
  });
}

}  // namespace rig::ops
