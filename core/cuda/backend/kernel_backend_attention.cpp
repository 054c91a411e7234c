// KernelBackend: attention composed of per-head GEMMs, the masked softmax
// and dropout kernels, with the CPU back end's semantics (the weights before
// dropout are saved as `probs`). 16-bit q, k, v go to the device's fused
// attention instead where it has one (cuDNN's, runtime/gpu_device.cpp). The
// per-head products are strided batched cuBLASLt products where the heads
// are equally spaced (gemm_heads).
#include <optional>
#include <stdexcept>
#include <utility>

#include "cuda/backend/kernel_backend.hpp"
#include "cuda/gemm/gemm_plan.hpp"

namespace rig::cuda {

namespace {

std::size_t plane_elements(const backend::AttentionShape& s) {
  return static_cast<std::size_t>(s.b * s.h * s.tq * s.tk);
}

MatmulPrecision precision_of(const backend::AttentionShape& s) {
  return s.bf16_products ? MatmulPrecision::bf16 : MatmulPrecision::f32;
}

// The strides of a contiguous [B, H, Tq, Tk] plane buffer (scores, weights).
backend::HeadStrides plane_strides(const backend::AttentionShape& s) {
  return {s.h * s.tq * s.tk, s.tq * s.tk, s.tk};
}

// The one stride between consecutive (batch, head) matrices in batch-major
// order, where there is one (and it is not negative).
std::optional<std::int64_t> combined_stride(const backend::HeadStrides& st, std::int64_t batches,
                                            std::int64_t heads) {
  std::optional<std::int64_t> stride;
  if (heads == 1) {
    stride = st.batch;
  } else if (batches == 1 || st.batch == heads * st.head) {
    stride = st.head;
  }
  if (stride && *stride < 0) stride.reset();
  return stride;
}

}  // namespace

void KernelDevice::fused_attention_forward(const backend::FusedAttention&) {
  throw std::logic_error("fused attention asked of a cuda device without it (the emulator)");
}

void KernelDevice::fused_attention_backward(const backend::FusedAttention&) {
  throw std::logic_error("fused attention asked of a cuda device without it (the emulator)");
}

void KernelBackend::gemm_heads(std::int64_t batches, std::int64_t heads,
                               const backend::GemmProduct& first, const backend::HeadStrides& a,
                               const backend::HeadStrides& b, const backend::HeadStrides& c,
                               MatmulPrecision precision) {
  const std::int64_t count = batches * heads;
  if (count == 0) return;
  const auto sa = combined_stride(a, batches, heads), sb = combined_stride(b, batches, heads),
             sc = combined_stride(c, batches, heads);
  if (sa && sb && sc && strided_batches_apart(first.m, first.n, first.ldc, count, *sc)) {
    gemm_batched(first, count, *sa, *sb, *sc, precision);
    return;
  }
  // One batched product per batch element (over its heads) or per head
  // (over the batch elements), where the strides allow it: the loop over
  // the shorter axis (a [B, T, H, D] tensor's heads do not combine with its
  // batch: B products of H heads, or H of B); one product each where
  // neither axis can be batched.
  struct Axis {
    std::int64_t size, a, b, c;
  };
  const auto batchable = [&](const Axis& x) {
    return x.size > 1 && x.a >= 0 && x.b >= 0 && x.c >= 0 &&
           strided_batches_apart(first.m, first.n, first.ldc, x.size, x.c);
  };
  Axis inner{heads, a.head, b.head, c.head}, outer{batches, a.batch, b.batch, c.batch};
  if (batchable(outer) && (!batchable(inner) || batches > heads)) std::swap(inner, outer);
  const bool batched = batchable(inner);
  const auto at = [](backend::GemmProduct p, const Axis& x, std::int64_t i) {
    p.a.data += i * x.a;
    p.b.data += i * x.b;
    p.c += i * x.c;
    return p;
  };
  for (std::int64_t o = 0; o < outer.size; ++o) {
    const backend::GemmProduct p = at(first, outer, o);
    if (batched) {
      gemm_batched(p, inner.size, inner.a, inner.b, inner.c, precision);
      continue;
    }
    for (std::int64_t i = 0; i < inner.size; ++i) gemm(at(p, inner, i), precision);
  }
}

// out = x * keep * keep_scale (dropout of the attention weights, and of
// their gradient); out may be x.
void KernelBackend::attention_weights(const backend::AttentionShape& s, const float* x,
                                      float* out) {
  const auto n = static_cast<std::int64_t>(plane_elements(s));
  if (n == 0) return;
  run(kernels::AttentionKeep{x, s.keep, s.keep_scale, out, n});
}

void KernelBackend::attention_forward(const backend::AttentionShape& s, const float* q,
                                      const backend::HeadStrides& qs, const float* k,
                                      const backend::HeadStrides& ks, const float* v,
                                      const backend::HeadStrides& vs, float* out,
                                      const backend::HeadStrides& os, float* probs) {
  const std::size_t planes = plane_elements(s);
  if (s.b * s.h * s.tq == 0) return;
  const MatmulPrecision precision = precision_of(s);
  const backend::HeadStrides ps = plane_strides(s);
  DeviceScratch scores = scratch(planes * sizeof(float));
  gemm_heads(s.b, s.h,
             {s.tq,
              s.tk,
              s.d,
              s.scale,
              {q, qs.time, false},
              {k, ks.time, true},
              0.0F,
              scores.as<float>(),
              s.tk},
             qs, ks, ps, precision);
  // The keep-mask, contiguous: the caller's (broadcast) mask, then causality.
  DeviceScratch mask;
  if (s.mask != nullptr || s.causal) {
    mask = scratch(planes);
    const Shape shape{s.b, s.h, s.tq, s.tk};
    if (s.mask != nullptr) {
      copy_strided(shape, mask.as<std::uint8_t>(), contiguous_strides(shape), DType::u8, s.mask,
                   Strides(s.mask_strides.begin(), s.mask_strides.end()), DType::u8);
    } else {
      fill_strided(shape, mask.as<std::uint8_t>(), contiguous_strides(shape), DType::u8, 1.0F);
    }
    if (s.causal) run(kernels::CausalMask{mask.as<std::uint8_t>(), s.b * s.h, s.tq, s.tk});
  }
  DeviceScratch own_probs;
  if (probs == nullptr) {
    own_probs = scratch(planes * sizeof(float));
    probs = own_probs.as<float>();
  }
  run(kernels::SoftmaxForward{scores.as<float>(), mask.as<std::uint8_t>(), probs, s.b * s.h * s.tq,
                              s.tk, false});
  const float* weights = probs;
  DeviceScratch dropped;
  if (s.keep != nullptr) {
    dropped = scratch(planes * sizeof(float));
    attention_weights(s, probs, dropped.as<float>());
    weights = dropped.as<float>();
  }
  gemm_heads(
      s.b, s.h,
      {s.tq, s.d, s.tk, 1.0F, {weights, s.tk, false}, {v, vs.time, false}, 0.0F, out, os.time}, ps,
      vs, os, precision);
}

void KernelBackend::attention_backward(const backend::AttentionShape& s, const float* q,
                                       const backend::HeadStrides& qs, const float* k,
                                       const backend::HeadStrides& ks, const float* v,
                                       const backend::HeadStrides& vs, const float* probs,
                                       const float* dout, const backend::HeadStrides& dos,
                                       float* dq, const backend::HeadStrides& dqs, float* dk,
                                       const backend::HeadStrides& dks, float* dv,
                                       const backend::HeadStrides& dvs) {
  const std::size_t planes = plane_elements(s);
  if (planes == 0) return;
  const MatmulPrecision precision = precision_of(s);
  const float* weights = probs;
  DeviceScratch dropped;
  if (s.keep != nullptr) {
    dropped = scratch(planes * sizeof(float));
    attention_weights(s, probs, dropped.as<float>());
    weights = dropped.as<float>();
  }
  const backend::HeadStrides ps = plane_strides(s);
  DeviceScratch grad = scratch(planes * sizeof(float));  // dWeights, then dScores
  float* g = grad.as<float>();
  if (dv != nullptr) {  // dV = W^T dO
    gemm_heads(
        s.b, s.h,
        {s.tk, s.d, s.tq, 1.0F, {weights, s.tk, true}, {dout, dos.time, false}, 0.0F, dv, dvs.time},
        ps, dos, dvs, precision);
  }
  // dW = dO V^T
  gemm_heads(s.b, s.h,
             {s.tq, s.tk, s.d, 1.0F, {dout, dos.time, false}, {v, vs.time, true}, 0.0F, g, s.tk},
             dos, vs, ps, precision);
  if (dq == nullptr && dk == nullptr) return;
  if (s.keep != nullptr) attention_weights(s, g, g);  // through dropout: the same factors
  run(kernels::SoftmaxBackward{probs, g, g, s.b * s.h * s.tq, s.tk, false});
  if (dq != nullptr) {  // dQ = scale dS K
    gemm_heads(
        s.b, s.h,
        {s.tq, s.d, s.tk, s.scale, {g, s.tk, false}, {k, ks.time, false}, 0.0F, dq, dqs.time}, ps,
        ks, dqs, precision);
  }
  if (dk != nullptr) {  // dK = scale dS^T Q
    gemm_heads(s.b, s.h,
               {s.tk, s.d, s.tq, s.scale, {g, s.tk, true}, {q, qs.time, false}, 0.0F, dk, dks.time},
               ps, qs, dks, precision);
  }
}

}  // namespace rig::cuda
