// KernelBackend: attention composed of per-head GEMMs and the softmax
// kernels of cuda/kernels/attention_softmax.hpp (mask, causality and the
// weights' dropout folded into the softmax and its backward), with the CPU
// back end's semantics (the weights before dropout are saved as `probs`).
// On f32 operands, and on 16-bit ones as they are (attention_forward_16:
// 16-bit weights and scores' gradient as the products' operands, no f32
// copies). 16-bit q, k, v go to the device's fused attention instead where
// it has one (cuDNN's, runtime/gpu_device.cpp). The per-head products are
// strided batched cuBLASLt products where the heads are equally spaced.
#include <cstddef>
#include <optional>
#include <stdexcept>
#include <utility>
#include <vector>

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

// One strided batch of (batch, head) products: its first product's element
// offsets into A, B and C (from (0, 0)'s), and its count and strides.
struct HeadBatch {
  std::int64_t a = 0, b = 0, c = 0;
  std::int64_t count = 1, stride_a = 0, stride_b = 0, stride_c = 0;
};

// The batches that make every (batch, head) product of C[m, n] (leading
// dimension ldc): one strided batch where each operand's heads are equally
// spaced across batches, else a batch of heads per batch element, or of
// batch elements per head, looping over the shorter axis (a [B, T, H, D]
// tensor's heads do not combine with its batch: B batches of H heads, or H
// of B); one product each where neither axis can be batched.
std::vector<HeadBatch> head_batches(std::int64_t batches, std::int64_t heads, std::int64_t m,
                                    std::int64_t n, std::int64_t ldc, const backend::HeadStrides& a,
                                    const backend::HeadStrides& b, const backend::HeadStrides& c) {
  std::vector<HeadBatch> out;
  const std::int64_t count = batches * heads;
  if (count == 0) return out;
  const auto sa = combined_stride(a, batches, heads), sb = combined_stride(b, batches, heads),
             sc = combined_stride(c, batches, heads);
  if (sa && sb && sc && strided_batches_apart(m, n, ldc, count, *sc)) {
    out.push_back({0, 0, 0, count, *sa, *sb, *sc});
    return out;
  }
  struct Axis {
    std::int64_t size, a, b, c;
  };
  const auto batchable = [&](const Axis& x) {
    return x.size > 1 && x.a >= 0 && x.b >= 0 && x.c >= 0 &&
           strided_batches_apart(m, n, ldc, x.size, x.c);
  };
  Axis inner{heads, a.head, b.head, c.head}, outer{batches, a.batch, b.batch, c.batch};
  if (batchable(outer) && (!batchable(inner) || batches > heads)) std::swap(inner, outer);
  const bool batched = batchable(inner);
  for (std::int64_t o = 0; o < outer.size; ++o) {
    if (batched) {
      out.push_back({o * outer.a, o * outer.b, o * outer.c, inner.size, inner.a, inner.b, inner.c});
      continue;
    }
    for (std::int64_t i = 0; i < inner.size; ++i) {
      out.push_back(
          {o * outer.a + i * inner.a, o * outer.b + i * inner.b, o * outer.c + i * inner.c});
    }
  }
  return out;
}

GemmType gemm_type(DType type) {
  switch (type) {
    case DType::f32:
      return GemmType::f32;
    case DType::f16:
      return GemmType::f16;
    case DType::bf16:
      return GemmType::bf16;
    default:
      throw std::invalid_argument("attention: a product of f32, f16 or bf16 operands only");
  }
}

void require_16bit(DType type, const char* what) {
  if (type != DType::bf16 && type != DType::f16) {
    throw std::invalid_argument(std::string("KernelBackend::") + what +
                                ": q, k, v must be bf16 or f16");
  }
}

const void* at(const void* base, std::int64_t elements, std::size_t element_size) {
  return static_cast<const std::byte*>(base) + elements * static_cast<std::int64_t>(element_size);
}
void* at(void* base, std::int64_t elements, std::size_t element_size) {
  return static_cast<std::byte*>(base) + elements * static_cast<std::int64_t>(element_size);
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
  for (const HeadBatch& hb : head_batches(batches, heads, first.m, first.n, first.ldc, a, b, c)) {
    backend::GemmProduct p = first;
    p.a.data += hb.a;
    p.b.data += hb.b;
    p.c += hb.c;
    gemm_batched(p, hb.count, hb.stride_a, hb.stride_b, hb.stride_c, precision);
  }
}

void KernelBackend::gemm_heads_16(std::int64_t batches, std::int64_t heads,
                                  const HeadProduct16& first, const backend::HeadStrides& a,
                                  const backend::HeadStrides& b, const backend::HeadStrides& c) {
  if (first.m == 0 || first.n == 0) return;
  GemmRequest request;
  request.m = first.m;
  request.n = first.n;
  request.k = first.k;
  request.trans_a = first.trans_a;
  request.trans_b = first.trans_b;
  request.lda =
      usable_ld(first.lda, first.trans_a ? first.k : first.m, first.trans_a ? first.m : first.k);
  request.ldb =
      usable_ld(first.ldb, first.trans_b ? first.n : first.k, first.trans_b ? first.k : first.n);
  request.ldc = first.ldc;
  request.a_type = request.b_type = gemm_type(first.type);
  request.c_type = gemm_type(first.c_type);
  request.alpha = first.alpha;
  const std::size_t operand = dtype_size(first.type), result = dtype_size(first.c_type);
  for (const HeadBatch& hb : head_batches(batches, heads, first.m, first.n, first.ldc, a, b, c)) {
    request.batch_count = hb.count;
    request.stride_a = hb.stride_a;
    request.stride_b = hb.stride_b;
    request.stride_c = hb.stride_c;
    run_request(device(), request, at(first.a, hb.a, operand), at(first.b, hb.b, operand),
                at(first.c, hb.c, result));
  }
}

void KernelBackend::attention_softmax(const backend::AttentionShape& s, const float* scores,
                                      float* probs, void* weights, DType type) {
  kernels::AttentionSoftmaxForward k;
  k.scores = scores;
  k.mask = s.mask;
  k.mask_b = s.mask_strides[0];
  k.mask_h = s.mask_strides[1];
  k.mask_q = s.mask_strides[2];
  k.mask_k = s.mask_strides[3];
  k.causal = s.causal;
  k.keep = s.keep;
  k.keep_scale = s.keep_scale;
  k.probs = probs;
  k.weights = weights;
  k.type = element_type(type, "attention weights");
  k.heads = s.h;
  k.planes = s.b * s.h;
  k.tq = s.tq;
  k.tk = s.tk;
  run(k);
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
  // The weights: the probabilities themselves without dropout (in the
  // caller's buffer, else in scratch), else dropped ones of their own.
  DeviceScratch own_probs, dropped;
  if (probs == nullptr && s.keep == nullptr) {
    own_probs = scratch(planes * sizeof(float));
    probs = own_probs.as<float>();
  }
  const float* weights = probs;
  if (s.keep != nullptr) {
    dropped = scratch(planes * sizeof(float));
    weights = dropped.as<float>();
  }
  attention_softmax(s, scores.as<float>(), probs, s.keep != nullptr ? dropped.as<float>() : nullptr,
                    DType::f32);
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
  const backend::HeadStrides ps = plane_strides(s);
  const bool scores_grad = dq != nullptr || dk != nullptr;
  DeviceScratch grad, dropped;
  if (scores_grad) {  // dW = dO V^T, then dScores in place
    grad = scratch(planes * sizeof(float));
    gemm_heads(s.b, s.h,
               {s.tq,
                s.tk,
                s.d,
                1.0F,
                {dout, dos.time, false},
                {v, vs.time, true},
                0.0F,
                grad.as<float>(),
                s.tk},
               dos, vs, ps, precision);
  }
  // The dropped weights for dV (without dropout: probs as they are).
  const bool weights_of_own = dv != nullptr && s.keep != nullptr;
  if (weights_of_own) dropped = scratch(planes * sizeof(float));
  if (scores_grad || weights_of_own) {
    run(kernels::AttentionSoftmaxBackward{probs, grad.as<float>(), s.keep, s.keep_scale,
                                          scores_grad ? grad.as<void>() : nullptr,
                                          weights_of_own ? dropped.as<void>() : nullptr,
                                          kernels::ElementType::f32, s.b * s.h * s.tq, s.tk});
  }
  const float* g = grad.as<float>();
  if (dv != nullptr) {  // dV = W^T dO
    const float* weights = weights_of_own ? dropped.as<float>() : probs;
    gemm_heads(
        s.b, s.h,
        {s.tk, s.d, s.tq, 1.0F, {weights, s.tk, true}, {dout, dos.time, false}, 0.0F, dv, dvs.time},
        ps, dos, dvs, precision);
  }
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

void KernelBackend::attention_forward_16(const backend::AttentionShape& s, DType type,
                                         const void* q, const backend::HeadStrides& qs,
                                         const void* k, const backend::HeadStrides& ks,
                                         const void* v, const backend::HeadStrides& vs, void* out,
                                         const backend::HeadStrides& os, float* probs) {
  require_16bit(type, "attention_forward_16");
  const std::size_t planes = plane_elements(s);
  if (s.b * s.h * s.tq * s.d == 0) return;
  if (s.tk == 0) {
    throw std::invalid_argument("KernelBackend::attention_forward_16: no keys (tk == 0)");
  }
  const backend::HeadStrides ps = plane_strides(s);
  DeviceScratch scores = scratch(planes * sizeof(float));
  gemm_heads_16(s.b, s.h,
                {s.tq, s.tk, s.d, s.scale, q, qs.time, false, k, ks.time, true, scores.as<void>(),
                 s.tk, type, DType::f32},
                qs, ks, ps);
  DeviceScratch weights = scratch(planes * dtype_size(type));
  attention_softmax(s, scores.as<float>(), probs, weights.as<void>(), type);
  gemm_heads_16(s.b, s.h,
                {s.tq, s.d, s.tk, 1.0F, weights.as<void>(), s.tk, false, v, vs.time, false, out,
                 os.time, type, type},
                ps, vs, os);
}

void KernelBackend::attention_backward_16(
    const backend::AttentionShape& s, DType type, const void* q, const backend::HeadStrides& qs,
    const void* k, const backend::HeadStrides& ks, const void* v, const backend::HeadStrides& vs,
    const float* probs, const void* dout, const backend::HeadStrides& dos, void* dq,
    const backend::HeadStrides& dqs, void* dk, const backend::HeadStrides& dks, void* dv,
    const backend::HeadStrides& dvs) {
  require_16bit(type, "attention_backward_16");
  const std::size_t planes = plane_elements(s);
  if (planes * static_cast<std::size_t>(s.d) == 0) return;
  const bool scores_grad = dq != nullptr || dk != nullptr;
  if (!scores_grad && dv == nullptr) return;
  const backend::HeadStrides ps = plane_strides(s);
  DeviceScratch grad, dscores, weights;
  if (scores_grad) {  // dW = dO V^T in f32
    grad = scratch(planes * sizeof(float));
    dscores = scratch(planes * dtype_size(type));
    gemm_heads_16(s.b, s.h,
                  {s.tq, s.tk, s.d, 1.0F, dout, dos.time, false, v, vs.time, true, grad.as<void>(),
                   s.tk, type, DType::f32},
                  dos, vs, ps);
  }
  if (dv != nullptr) weights = scratch(planes * dtype_size(type));
  run(kernels::AttentionSoftmaxBackward{probs, grad.as<float>(), s.keep, s.keep_scale,
                                        dscores.as<void>(), weights.as<void>(),
                                        element_type(type, "attention"), s.b * s.h * s.tq, s.tk});
  if (dv != nullptr) {  // dV = W^T dO
    gemm_heads_16(s.b, s.h,
                  {s.tk, s.d, s.tq, 1.0F, weights.as<void>(), s.tk, true, dout, dos.time, false, dv,
                   dvs.time, type, type},
                  ps, dos, dvs);
  }
  if (dq != nullptr) {  // dQ = scale dS K
    gemm_heads_16(s.b, s.h,
                  {s.tq, s.d, s.tk, s.scale, dscores.as<void>(), s.tk, false, k, ks.time, false, dq,
                   dqs.time, type, type},
                  ps, ks, dqs);
  }
  if (dk != nullptr) {  // dK = scale dS^T Q
    gemm_heads_16(s.b, s.h,
                  {s.tk, s.d, s.tq, s.scale, dscores.as<void>(), s.tk, true, q, qs.time, false, dk,
                   dks.time, type, type},
                  ps, qs, dks);
  }
}

}  // namespace rig::cuda
