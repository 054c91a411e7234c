// Scalar float math without library calls (std::exp and friends block
// vectorisation): the same algorithms as the SIMD versions in cpu/simd.hpp,
// for scalar code. Each is accurate to a few ulp over the float range and
// keeps the IEEE special cases the ops rely on: exp(-inf) = 0, exp(+inf) =
// inf, NaN in -> NaN out. Note: inside RIG_CPU_KERNEL loops GCC vectorises
// these for AVX-512 only; their compare-and-selects are not if-converted for
// AVX2 under the default -ftrapping-math, so hot loops should use cpu/simd.hpp.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

// Inlined into every kernel clone (so each is compiled for that clone's ISA).
#define RIG_VEC_INLINE inline __attribute__((always_inline))

namespace rig::cpu::vec {

RIG_VEC_INLINE float bits_to_float(std::int32_t bits) {
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

// e^x: x = n ln2 + r with |r| <= ln2 / 2, a degree-6 polynomial for e^r
// (Cephes expf coefficients), 2^n built in the exponent bits.
RIG_VEC_INLINE float exp(float x) {
  constexpr float kLog2e = 1.44269504088896341F;
  constexpr float kLn2Hi = 0.693359375F;
  constexpr float kLn2Lo = -2.12194440e-4F;
  constexpr float kMax = 88.3762626647949F;   // e^kMax is just below FLT_MAX
  constexpr float kMin = -87.3365447505531F;  // e^kMin is about FLT_MIN (normal)
  const float xc = x > kMax ? kMax : (x < kMin ? kMin : x);
  // Round to nearest by the 1.5 * 2^23 trick (|xc * log2e| < 2^22).
  constexpr float kRound = 12582912.0F;
  const float n = (xc * kLog2e + kRound) - kRound;
  float r = xc - n * kLn2Hi;
  r = r - n * kLn2Lo;
  float p = 1.9875691500E-4F;
  p = p * r + 1.3981999507E-3F;
  p = p * r + 8.3334519073E-3F;
  p = p * r + 4.1665795894E-2F;
  p = p * r + 1.6666665459E-1F;
  p = p * r + 5.0000001201E-1F;
  const float er = p * r * r + r + 1.0F;
  const float scale = bits_to_float((static_cast<std::int32_t>(n) + 127) << 23);
  float y = er * scale;
  y = x > kMax ? INFINITY : y;
  y = x < kMin ? 0.0F : y;  // flush the (subnormal) tail to zero
  return x != x ? x : y;
}

// tanh: odd polynomial near 0 (Cephes tanhf), 1 - 2 / (e^{2|x|} + 1) beyond.
RIG_VEC_INLINE float tanh(float x) {
  const float ax = std::fabs(x);
  const float z = x * x;
  float p = -5.70498872745E-3F;
  p = p * z + 2.06390887954E-2F;
  p = p * z - 5.37397155531E-2F;
  p = p * z + 1.33314422036E-1F;
  p = p * z - 3.33332819422E-1F;
  const float small = p * z * x + x;
  const float e = vec::exp(2.0F * ax);
  float big = 1.0F - 2.0F / (e + 1.0F);
  big = std::copysign(big, x);
  return ax < 0.625F ? small : big;
}

// 1 / (1 + e^-x); saturates to 0 and 1 without NaN.
RIG_VEC_INLINE float sigmoid(float x) {
  return 1.0F / (1.0F + vec::exp(-x));
}

// erf: a rational approximation on [-4, 4] (the one XLA and Eigen use for
// float), +-1 beyond.
RIG_VEC_INLINE float erf(float x) {
  const float xc = x > 4.0F ? 4.0F : (x < -4.0F ? -4.0F : x);
  const float x2 = xc * xc;
  float p = -2.72614225801306e-10F;
  p = p * x2 + 2.77068142495902e-08F;
  p = p * x2 - 2.10102402082508e-06F;
  p = p * x2 - 5.69250639462346e-05F;
  p = p * x2 - 7.34990630326855e-04F;
  p = p * x2 - 2.95459980854025e-03F;
  p = p * x2 - 1.60960333262415e-02F;
  p = p * xc;
  float q = -1.45660718464996e-05F;
  q = q * x2 - 2.13374055278905e-04F;
  q = q * x2 - 1.68282697438203e-03F;
  q = q * x2 - 7.37332916720468e-03F;
  q = q * x2 - 1.42647390514189e-02F;
  const float r = p / q;
  return r > 1.0F ? 1.0F : (r < -1.0F ? -1.0F : r);
}

constexpr float kSqrtHalf = 0.70710678118654752F;     // 1 / sqrt(2)
constexpr float kInvSqrt2Pi = 0.39894228040143268F;   // 1 / sqrt(2 pi)
constexpr float kSqrt2OverPi = 0.79788456080286536F;  // sqrt(2 / pi)
constexpr float kGeluTanhCoeff = 0.044715F;

// GELU, erf form: x Phi(x).
RIG_VEC_INLINE float gelu(float x) {
  return 0.5F * x * (1.0F + vec::erf(x * kSqrtHalf));
}
// d/dx x Phi(x) = Phi(x) + x phi(x).
RIG_VEC_INLINE float gelu_grad(float x) {
  const float cdf = 0.5F * (1.0F + vec::erf(x * kSqrtHalf));
  const float pdf = kInvSqrt2Pi * vec::exp(-0.5F * x * x);
  return cdf + x * pdf;
}

// GELU, tanh approximation (torch's approximate='tanh').
RIG_VEC_INLINE float gelu_tanh(float x) {
  const float u = kSqrt2OverPi * (x + kGeluTanhCoeff * x * x * x);
  return 0.5F * x * (1.0F + vec::tanh(u));
}
RIG_VEC_INLINE float gelu_tanh_grad(float x) {
  const float u = kSqrt2OverPi * (x + kGeluTanhCoeff * x * x * x);
  const float t = vec::tanh(u);
  const float du = kSqrt2OverPi * (1.0F + 3.0F * kGeluTanhCoeff * x * x);
  return 0.5F * (1.0F + t) + 0.5F * x * (1.0F - t * t) * du;
}

}  // namespace rig::cpu::vec
