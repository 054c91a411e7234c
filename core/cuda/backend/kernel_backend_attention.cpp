// KernelBackend: attention composed of per-head GEMMs, the masked softmax
// and dropout kernels, with the CPU back end's semantics (the weights before
// dropout are saved as `probs`). cuDNN's fused attention (dnn/) serves the
// 16-bit training path, not this f32 entry point.
#include "cuda/backend/kernel_backend.hpp"

namespace rig::cuda {

namespace {

std::size_t plane_elements(const backend::AttentionShape& s) {
  return static_cast<std::size_t>(s.b * s.h * s.tq * s.tk);
}

MatmulPrecision precision_of(const backend::AttentionShape& s) {
  return s.bf16_products ? MatmulPrecision::bf16 : MatmulPrecision::f32;
}

// Element (b, h) of a [B, H, T, D] operand.
template <class T>
T* head(T* x, const backend::HeadStrides& st, std::int64_t b, std::int64_t h) {
  return x + b * st.batch + h * st.head;
}

}  // namespace

// out = x * keep * keep_scale (dropout of the attention weights, and of
// their gradient); out may be x.
void KernelBackend::attention_weights(const backend::AttentionShape& s, const float* x,
                                      float* out) {
  const auto n = static_cast<std::int64_t>(plane_elements(s));
  DeviceScratch keep = scratch(static_cast<std::size_t>(n) * sizeof(float));
  copy_strided({n}, keep.as<float>(), {1}, DType::f32, s.keep, {1}, DType::u8);
  backend::StridedPlan<3> plan;
  plan.ndim = 1;
  plan.shape[0] = n;
  plan.strides[0][0] = plan.strides[1][0] = plan.strides[2][0] = 1;
  binary(backend::Binary::mul, plan, x, keep.as<float>(), out);
  unary(backend::Unary::mul_scalar, out, out, n, s.keep_scale);
}

void KernelBackend::attention_forward(const backend::AttentionShape& s, const float* q,
                                      const backend::HeadStrides& qs, const float* k,
                                      const backend::HeadStrides& ks, const float* v,
                                      const backend::HeadStrides& vs, float* out,
                                      const backend::HeadStrides& os, float* probs) {
  const std::size_t planes = plane_elements(s);
  if (s.b * s.h * s.tq == 0) return;
  const std::int64_t plane = s.tq * s.tk;
  const MatmulPrecision precision = precision_of(s);
  DeviceScratch scores = scratch(planes * sizeof(float));
  for (std::int64_t b = 0; b < s.b; ++b) {
    for (std::int64_t h = 0; h < s.h; ++h) {
      gemm({s.tq,
            s.tk,
            s.d,
            s.scale,
            {head(q, qs, b, h), qs.time, false},
            {head(k, ks, b, h), ks.time, true},
            0.0F,
            scores.as<float>() + (b * s.h + h) * plane,
            s.tk},
           precision);
    }
  }
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
  for (std::int64_t b = 0; b < s.b; ++b) {
    for (std::int64_t h = 0; h < s.h; ++h) {
      gemm({s.tq,
            s.d,
            s.tk,
            1.0F,
            {weights + (b * s.h + h) * plane, s.tk, false},
            {head(v, vs, b, h), vs.time, false},
            0.0F,
            head(out, os, b, h),
            os.time},
           precision);
    }
  }
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
  const std::int64_t plane = s.tq * s.tk;
  const MatmulPrecision precision = precision_of(s);
  const float* weights = probs;
  DeviceScratch dropped;
  if (s.keep != nullptr) {
    dropped = scratch(planes * sizeof(float));
    attention_weights(s, probs, dropped.as<float>());
    weights = dropped.as<float>();
  }
  DeviceScratch grad = scratch(planes * sizeof(float));  // dWeights, then dScores
  float* g = grad.as<float>();
  for (std::int64_t b = 0; b < s.b; ++b) {
    for (std::int64_t h = 0; h < s.h; ++h) {
      const std::int64_t p = (b * s.h + h) * plane;
      if (dv != nullptr) {  // dV = W^T dO
        gemm({s.tk,
              s.d,
              s.tq,
              1.0F,
              {weights + p, s.tk, true},
              {head(dout, dos, b, h), dos.time, false},
              0.0F,
              head(dv, dvs, b, h),
              dvs.time},
             precision);
      }
      // dW = dO V^T
      gemm({s.tq,
            s.tk,
            s.d,
            1.0F,
            {head(dout, dos, b, h), dos.time, false},
            {head(v, vs, b, h), vs.time, true},
            0.0F,
            g + p,
            s.tk},
           precision);
    }
  }
  if (dq == nullptr && dk == nullptr) return;
  if (s.keep != nullptr) attention_weights(s, g, g);  // through dropout: the same factors
  run(kernels::SoftmaxBackward{probs, g, g, s.b * s.h * s.tq, s.tk, false});
  for (std::int64_t b = 0; b < s.b; ++b) {
    for (std::int64_t h = 0; h < s.h; ++h) {
      const std::int64_t p = (b * s.h + h) * plane;
      if (dq != nullptr) {  // dQ = scale dS K
        gemm({s.tq,
              s.d,
              s.tk,
              s.scale,
              {g + p, s.tk, false},
              {head(k, ks, b, h), ks.time, false},
              0.0F,
              head(dq, dqs, b, h),
              dqs.time},
             precision);
      }
      if (dk != nullptr) {  // dK = scale dS^T Q
        gemm({s.tk,
              s.d,
              s.tq,
              s.scale,
              {g + p, s.tk, true},
              {head(q, qs, b, h), qs.time, false},
              0.0F,
              head(dk, dks, b, h),
              dks.time},
             precision);
      }
    }
  }
}

}  // namespace rig::cuda
