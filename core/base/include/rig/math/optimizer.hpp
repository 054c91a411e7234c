// The element updates of rig's optimizers (rig/op_types.hpp states their
// formulas), written once for every back end: Adam / AdamW / AMSGrad over a
// math policy M (M::sqrt correctly rounded, M::max) and number type F (a float,
// or a CPU SIMD vector), SGD and NovoGrad over floats. The CPU back end and
// the CUDA kernels call these, so their updates agree bit for bit where the
// GPU code is compiled without contracting multiply-adds (-fmad=false).
#pragma once

#include "rig/hd.hpp"
#include "rig/op_types.hpp"

namespace rig::math {

// Updates p, m, v (and *vmax for AMSGrad, when not null) for gradient g.
template <class M, class F>
RIG_HD_INLINE void adam_step(F& p, F g, F& m, F& v, F* vmax, const AdamUpdate& a) {
  p = p * a.shrink;
  const F gd = g + p * a.coupled_decay;
  m = m * a.beta1 + gd * (1.0F - a.beta1);
  v = v * a.beta2 + gd * gd * (1.0F - a.beta2);
  F d = v;
  if (vmax != nullptr) {
    d = M::max(*vmax, v);
    *vmax = d;
  }
  p = p - a.step_size * m / (M::sqrt(d) * a.inv_bc2_sqrt + a.epsilon);
}

// buffer null: no momentum.
RIG_HD_INLINE void sgd_step(float& p, float grad, float* buffer, const SgdUpdate& a) {
  if (buffer == nullptr) {
    p -= a.learning_rate * (grad + a.weight_decay * p);
    return;
  }
  const float g = grad + a.weight_decay * p;
  *buffer = a.first ? g : a.momentum * *buffer + g;
  p -= a.learning_rate * (a.nesterov ? g + a.momentum * *buffer : *buffer);
}

// NovoGrad's per-parameter second moment from the slice's sum of squared
// gradients (summed in f64 by the caller).
RIG_HD_INLINE float novograd_ema(float ema, double sum_squares, const NovogradUpdate& a) {
  const auto g2 = static_cast<float>(sum_squares);
  return ema == 0.0F ? g2 : ema * a.beta2 + g2 * a.c2;
}

// The two factors of a slice's element update: m = b1 m + (g_factor g + p_factor p).
struct NovogradFactors {
  float g_factor, p_factor;
};
template <class M>
RIG_HD_INLINE NovogradFactors novograd_factors(float ema, const NovogradUpdate& a) {
  return NovogradFactors{a.avg / M::sqrt(ema + a.epsilon), a.avg * a.weight_decay};
}

RIG_HD_INLINE void novograd_step(float& p, float g, float& m, NovogradFactors f,
                                 const NovogradUpdate& a) {
  const float mi = a.beta1 * m + (f.g_factor * g + f.p_factor * p);
  m = mi;
  p -= a.learning_rate * mi;
}

}  // namespace rig::math
