// The activations and their derivatives, written once over a math policy M
// that supplies exp and tanh for its number type M::F (a float, or a vector
// of floats on the CPU): the CPU back end instantiates them with its SIMD
// vectors (cpu/simd.hpp), the CUDA kernels with math::DeviceMath
// (rig/math/device_math.hpp). erf is the rational approximation XLA and Eigen
// use for float, built from arithmetic and selects only, so it is the same
// function on every back end. GELU is the erf form unless named gelu_tanh.
#pragma once

#include "rig/hd.hpp"

namespace rig::math {

inline constexpr float kSqrtHalf = 0.70710678118654752F;
inline constexpr float kInvSqrt2Pi = 0.39894228040143268F;
inline constexpr float kSqrt2OverPi = 0.79788456080286536F;
inline constexpr float kGeluTanhCubic = 0.044715F;

// erf on [-4, 4] (saturated beyond), for F = float or a GCC float vector.
template <class F>
RIG_HD_INLINE F erf_rational(F x) {
  const F four = F{} + 4.0F;
  F xc = x > four ? four : x;
  xc = xc < -four ? -four : xc;
  const F x2 = xc * xc;
  F p = F{} + -2.72614225801306e-10F;
  p = p * x2 + 2.77068142495902e-08F;
  p = p * x2 - 2.10102402082508e-06F;
  p = p * x2 - 5.69250639462346e-05F;
  p = p * x2 - 7.34990630326855e-04F;
  p = p * x2 - 2.95459980854025e-03F;
  p = p * x2 - 1.60960333262415e-02F;
  p = p * xc;
  F q = F{} + -1.45660718464996e-05F;
  q = q * x2 - 2.13374055278905e-04F;
  q = q * x2 - 1.68282697438203e-03F;
  q = q * x2 - 7.37332916720468e-03F;
  q = q * x2 - 1.42647390514189e-02F;
  F r = p / q;
  const F one = F{} + 1.0F;
  r = r > one ? one : r;
  return r < -one ? -one : r;
}

template <class M, class F>
RIG_HD_INLINE F gelu(F x) {
  return 0.5F * x * (1.0F + erf_rational(x * kSqrtHalf));
}
template <class M, class F>
RIG_HD_INLINE F gelu_grad(F x) {
  const F cdf = 0.5F * (1.0F + erf_rational(x * kSqrtHalf));
  return cdf + x * (kInvSqrt2Pi * M::exp(-0.5F * x * x));
}
template <class M, class F>
RIG_HD_INLINE F gelu_tanh(F x) {
  return 0.5F * x * (1.0F + M::tanh(kSqrt2OverPi * (x + kGeluTanhCubic * x * x * x)));
}
template <class M, class F>
RIG_HD_INLINE F gelu_tanh_grad(F x) {
  const F t = M::tanh(kSqrt2OverPi * (x + kGeluTanhCubic * x * x * x));
  const F du = kSqrt2OverPi * (1.0F + 3.0F * kGeluTanhCubic * x * x);
  return 0.5F * (1.0F + t) + 0.5F * x * (1.0F - t * t) * du;
}
template <class M, class F>
RIG_HD_INLINE F sigmoid(F x) {
  return 1.0F / (1.0F + M::exp(-x));
}
// Backward from the forward's output y (tanh, sigmoid), as the ops save it.
template <class F>
RIG_HD_INLINE F tanh_backward(F g, F y) {
  return g * (1.0F - y * y);
}
template <class F>
RIG_HD_INLINE F sigmoid_backward(F g, F y) {
  return g * y * (1.0F - y);
}

}  // namespace rig::math
