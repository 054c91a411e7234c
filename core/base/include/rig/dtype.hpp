// Element types of tensors, and the exact f16 / bf16 conversions.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

#include "rig/half.hpp"

namespace rig {

enum class DType : std::uint8_t { f32, f16, bf16, i32, i64, u8 };
std::size_t dtype_size(DType dtype);
std::string_view dtype_name(DType dtype);
bool is_floating(DType dtype);  // f32, f16, bf16
template <class T>
constexpr DType dtype_of();
template <>
constexpr DType dtype_of<float>() {
  return DType::f32;
}
template <>
constexpr DType dtype_of<std::int32_t>() {
  return DType::i32;
}
template <>
constexpr DType dtype_of<std::int64_t>() {
  return DType::i64;
}
template <>
constexpr DType dtype_of<std::uint8_t>() {
  return DType::u8;
}

// f16 and bf16 are storage types on the CPU: exact widening, and narrowing
// rounded to nearest even (NaN stays NaN, overflow goes to infinity).
inline std::uint16_t float_to_half(float value) {
  return float_to_half_bits(value);
}
inline float half_to_float(std::uint16_t bits) {
  return half_bits_to_float(bits);
}
inline std::uint16_t float_to_bfloat16(float value) {
  return float_to_bfloat16_bits(value);
}
inline float bfloat16_to_float(std::uint16_t bits) {
  return bfloat16_bits_to_float(bits);
}

}  // namespace rig
