// Exact f16 / bf16 <-> f32 conversions as branch-free inline code, so loops
// over many elements vectorise (f16/bf16 are storage types on the CPU). One
// definition for the host, the CPU kernels, the tensor layer and the GPU.
// Narrowing rounds to nearest even; NaN stays NaN (quiet); overflow gives inf.
// They rely on IEEE f32 arithmetic without flush-to-zero, which rig never enables.
#pragma once

#include <cstdint>

#include "rig/hd.hpp"
#include "rig/math/bits.hpp"

namespace rig {

// After Maratyszcza's FP16 library (MIT): the f32 multiplications do the
// rounding, so they are exact and round to nearest even by construction.
RIG_HD_INLINE float half_bits_to_float(std::uint16_t h) {
  const std::uint32_t w = static_cast<std::uint32_t>(h) << 16U;
  const std::uint32_t sign = w & 0x80000000U;
  const std::uint32_t two_w = w + w;
  constexpr std::uint32_t exp_offset = 0xE0U << 23U;
  const float normalized = math::bits_float((two_w >> 4U) + exp_offset) * 0x1.0p-112F;
  constexpr std::uint32_t magic_mask = 126U << 23U;
  const float denormalized = math::bits_float((two_w >> 17U) | magic_mask) - 0.5F;
  constexpr std::uint32_t denormalized_cutoff = 1U << 27U;
  const std::uint32_t bits =
      two_w < denormalized_cutoff ? math::float_bits(denormalized) : math::float_bits(normalized);
  return math::bits_float(sign | bits);
}

RIG_HD_INLINE std::uint16_t float_to_half_bits(float f) {
  // Scale so the significand is rounded at half precision, then re-bias.
  const float abs_f = math::bits_float(math::float_bits(f) & 0x7FFFFFFFU);
  float base = (abs_f * 0x1.0p+112F) * 0x1.0p-110F;
  const std::uint32_t w = math::float_bits(f);
  const std::uint32_t shl1_w = w + w;
  const std::uint32_t sign = w & 0x80000000U;
  std::uint32_t bias = shl1_w & 0xFF000000U;
  bias = bias < 0x71000000U ? 0x71000000U : bias;
  base = math::bits_float((bias >> 1U) + 0x07800000U) + base;
  const std::uint32_t bits = math::float_bits(base);
  const std::uint32_t exp_bits = (bits >> 13U) & 0x00007C00U;
  const std::uint32_t mantissa_bits = bits & 0x00000FFFU;
  const std::uint32_t nonsign = exp_bits + mantissa_bits;
  return static_cast<std::uint16_t>((sign >> 16U) | (shl1_w > 0xFF000000U ? 0x7E00U : nonsign));
}

RIG_HD_INLINE float bfloat16_bits_to_float(std::uint16_t b) {
  return math::bits_float(static_cast<std::uint32_t>(b) << 16U);
}

RIG_HD_INLINE std::uint16_t float_to_bfloat16_bits(float f) {
  const std::uint32_t w = math::float_bits(f);
  const bool nan = (w & 0x7FFFFFFFU) > 0x7F800000U;
  const std::uint32_t rounded = (w + 0x7FFFU + ((w >> 16U) & 1U)) >> 16U;
  return static_cast<std::uint16_t>(nan ? (w >> 16U) | 0x40U : rounded);
}

}  // namespace rig
