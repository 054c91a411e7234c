// Branch-free float math that GCC vectorises inside RIG_CPU_KERNEL loops
// (std::exp and friends are library calls that block vectorisation). Each
// function is accurate to a few ulp over the float range and keeps the IEEE
// special cases the ops rely on: exp(-inf) = 0, exp(+inf) = inf, NaN in -> NaN
// out.
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

// Horizontal sum / max of 16 partial lanes as a tree (4 dependent steps,
// which GCC turns into vector shuffles) rather than a 16-step serial chain:
// that chain dominates the cost of short rows.
RIG_VEC_INLINE float tree_sum16(float (&l)[16]) {
  for (int w = 8; w >= 1; w /= 2) {
    for (int i = 0; i < w; ++i) l[i] += l[i + w];
  }
  return l[0];
}
RIG_VEC_INLINE float tree_max16(float (&l)[16]) {
  for (int w = 8; w >= 1; w /= 2) {
    for (int i = 0; i < w; ++i) l[i] = l[i + w] > l[i] ? l[i + w] : l[i];
  }
  return l[0];
}

// ---- 16-float vectors ------------------------------------------------------------
// GCC vector extensions: one zmm register in the AVX-512 clone of a kernel,
// two ymm (AVX2) or four xmm (baseline) elsewhere. Used where auto-
// vectorisation falls short: reductions (which it keeps in memory) and exp
// inside them. Only inlined into kernels, never passed across a library
// boundary, so the ABI note -Wpsabi gives for 64-byte vectors does not apply.
#pragma GCC diagnostic ignored "-Wpsabi"
using f32x16 = float __attribute__((vector_size(64)));
using i32x16 = std::int32_t __attribute__((vector_size(64)));

RIG_VEC_INLINE f32x16 splat16(float v) { return f32x16{} + v; }
RIG_VEC_INLINE f32x16 load16(const float* p) {
  f32x16 v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
RIG_VEC_INLINE void store16(float* p, f32x16 v) { std::memcpy(p, &v, sizeof v); }
RIG_VEC_INLINE f32x16 max16(f32x16 a, f32x16 b) { return a > b ? a : b; }

RIG_VEC_INLINE float hsum16(f32x16 v) {
  using f32x8 = float __attribute__((vector_size(32)));
  using f32x4 = float __attribute__((vector_size(16)));
  const f32x8 a = __builtin_shufflevector(v, v, 0, 1, 2, 3, 4, 5, 6, 7) +
                  __builtin_shufflevector(v, v, 8, 9, 10, 11, 12, 13, 14, 15);
  const f32x4 b = __builtin_shufflevector(a, a, 0, 1, 2, 3) + __builtin_shufflevector(a, a, 4, 5, 6, 7);
  return (b[0] + b[2]) + (b[1] + b[3]);
}
RIG_VEC_INLINE float hmax16(f32x16 v) {
  using f32x8 = float __attribute__((vector_size(32)));
  using f32x4 = float __attribute__((vector_size(16)));
  const f32x8 lo = __builtin_shufflevector(v, v, 0, 1, 2, 3, 4, 5, 6, 7);
  const f32x8 hi = __builtin_shufflevector(v, v, 8, 9, 10, 11, 12, 13, 14, 15);
  const f32x8 a = lo > hi ? lo : hi;
  const f32x4 l4 = __builtin_shufflevector(a, a, 0, 1, 2, 3);
  const f32x4 h4 = __builtin_shufflevector(a, a, 4, 5, 6, 7);
  const f32x4 b = l4 > h4 ? l4 : h4;
  const float c = b[0] > b[2] ? b[0] : b[2];
  const float d = b[1] > b[3] ? b[1] : b[3];
  return c > d ? c : d;
}

// vec::exp on 16 lanes (same algorithm and special cases).
RIG_VEC_INLINE f32x16 exp16(f32x16 x) {
  constexpr float kLog2e = 1.44269504088896341F;
  constexpr float kLn2Hi = 0.693359375F;
  constexpr float kLn2Lo = -2.12194440e-4F;
  constexpr float kMax = 88.3762626647949F;
  constexpr float kMin = -87.3365447505531F;
  constexpr float kRound = 12582912.0F;
  const f32x16 hi = splat16(kMax);
  const f32x16 lo = splat16(kMin);
  f32x16 xc = x > hi ? hi : x;
  xc = xc < lo ? lo : xc;
  const f32x16 n = (xc * kLog2e + kRound) - kRound;
  f32x16 r = xc - n * kLn2Hi;
  r = r - n * kLn2Lo;
  f32x16 p = splat16(1.9875691500E-4F);
  p = p * r + 1.3981999507E-3F;
  p = p * r + 8.3334519073E-3F;
  p = p * r + 4.1665795894E-2F;
  p = p * r + 1.6666665459E-1F;
  p = p * r + 5.0000001201E-1F;
  const f32x16 er = p * r * r + r + 1.0F;
  const i32x16 bits = (__builtin_convertvector(n, i32x16) + 127) << 23;
  f32x16 y = er * (f32x16)bits;  // a vector cast reinterprets the bits
  y = x > hi ? splat16(INFINITY) : y;
  y = x < lo ? splat16(0.0F) : y;
  return x != x ? x : y;
}

}  // namespace rig::cpu::vec
