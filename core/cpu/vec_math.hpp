// Scalar e^x without a library call (std::exp blocks vectorisation): the
// same algorithm as the SIMD version in cpu/simd.hpp, for scalar code,
// accurate to a few ulp over the float range. It keeps the IEEE special cases the ops rely on:
// exp(-inf) = 0, exp(+inf) = inf, NaN in -> NaN out. Note: inside RIG_CPU_KERNEL loops GCC
// vectorises these for AVX-512 only; their compare-and-selects are not if-converted for AVX2 under
// the default -ftrapping-math, so hot loops should use cpu/simd.hpp.
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

}  // namespace rig::cpu::vec
