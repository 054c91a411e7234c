// Exact f16 / bf16 <-> f32 conversions as branch-free inline code, so loops
// over many elements vectorise (f16/bf16 are storage types on the CPU). One
// definition for the host, the CPU kernels and the tensor layer.
// Narrowing rounds to nearest even; NaN stays NaN (quiet); overflow gives inf.
// They rely on IEEE f32 arithmetic without flush-to-zero, which rig never enables.
#pragma once

#include <bit>
#include <cstdint>

namespace rig {

// After Maratyszcza's FP16 library (MIT): the f32 multiplications do the
// rounding, so they are exact and round to nearest even by construction.
[[gnu::always_inline]] inline float half_bits_to_float(std::uint16_t h) {
  const std::uint32_t w = static_cast<std::uint32_t>(h) << 16U;
  const std::uint32_t sign = w & 0x80000000U;
  const std::uint32_t two_w = w + w;
  constexpr std::uint32_t exp_offset = 0xE0U << 23U;
  const float normalized = std::bit_cast<float>((two_w >> 4U) + exp_offset) * 0x1.0p-112F;
  constexpr std::uint32_t magic_mask = 126U << 23U;
  const float denormalized = std::bit_cast<float>((two_w >> 17U) | magic_mask) - 0.5F;
  constexpr std::uint32_t denormalized_cutoff = 1U << 27U;
  const std::uint32_t bits = two_w < denormalized_cutoff
                                 ? std::bit_cast<std::uint32_t>(denormalized)
                                 : std::bit_cast<std::uint32_t>(normalized);
  return std::bit_cast<float>(sign | bits);
}

[[gnu::always_inline]] inline std::uint16_t float_to_half_bits(float f) {
  // Scale so the significand is rounded at half precision, then re-bias.
  const float abs_f = std::bit_cast<float>(std::bit_cast<std::uint32_t>(f) & 0x7FFFFFFFU);
  float base = (abs_f * 0x1.0p+112F) * 0x1.0p-110F;
  const std::uint32_t w = std::bit_cast<std::uint32_t>(f);
  const std::uint32_t shl1_w = w + w;
  const std::uint32_t sign = w & 0x80000000U;
  std::uint32_t bias = shl1_w & 0xFF000000U;
  bias = bias < 0x71000000U ? 0x71000000U : bias;
  base = std::bit_cast<float>((bias >> 1U) + 0x07800000U) + base;
  const std::uint32_t bits = std::bit_cast<std::uint32_t>(base);
  const std::uint32_t exp_bits = (bits >> 13U) & 0x00007C00U;
  const std::uint32_t mantissa_bits = bits & 0x00000FFFU;
  const std::uint32_t nonsign = exp_bits + mantissa_bits;
  return static_cast<std::uint16_t>((sign >> 16U) | (shl1_w > 0xFF000000U ? 0x7E00U : nonsign));
}

[[gnu::always_inline]] inline float bfloat16_bits_to_float(std::uint16_t b) {
  return std::bit_cast<float>(static_cast<std::uint32_t>(b) << 16U);
}

[[gnu::always_inline]] inline std::uint16_t float_to_bfloat16_bits(float f) {
  const std::uint32_t w = std::bit_cast<std::uint32_t>(f);
  const bool nan = (w & 0x7FFFFFFFU) > 0x7F800000U;
  const std::uint32_t rounded = (w + 0x7FFFU + ((w >> 16U) & 1U)) >> 16U;
  return static_cast<std::uint16_t>(nan ? (w >> 16U) | 0x40U : rounded);
}

}  // namespace rig
