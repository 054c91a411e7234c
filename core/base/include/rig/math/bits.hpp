// Bit casts between float and its 32-bit pattern that compile for the host
// and the GPU (std::bit_cast is not a device function).
#pragma once

#include <cstdint>

#include "rig/hd.hpp"

namespace rig::math {

RIG_HD_INLINE std::uint32_t float_bits(float f) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(f);
#else
  return __builtin_bit_cast(std::uint32_t, f);
#endif
}

RIG_HD_INLINE float bits_float(std::uint32_t bits) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(bits);
#else
  return __builtin_bit_cast(float, bits);
#endif
}

// Whether f is neither inf nor NaN: the overflow check of loss scaling and the
// loss check of every step, on every back end.
RIG_HD_INLINE bool is_finite(float f) {
  return (float_bits(f) & 0x7F800000U) != 0x7F800000U;
}

// |f|'s bit pattern: ordered like |f| for finite values, and >= 0x7F800000
// exactly for inf and NaN, so a maximum over it is an integer reduction that
// also detects overflow (the unscale kernels of every back end).
RIG_HD_INLINE std::uint32_t abs_bits(float f) {
  return float_bits(f) & 0x7FFFFFFFU;
}
// The largest |value| from the maximum of abs_bits: +inf when any was inf or NaN.
RIG_HD_INLINE float amax_of_abs_bits(std::uint32_t bits) {
  return bits >= 0x7F800000U ? bits_float(0x7F800000U) : bits_float(bits);
}

}  // namespace rig::math
