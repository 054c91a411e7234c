// The floating storage types the mixed-precision kernels read and write, with
// their exact conversions to and from f32 (rig/half.hpp).
#pragma once

#include <cstdint>

#include "rig/half.hpp"
#include "rig/hd.hpp"

namespace rig::kernels {

enum class ElementType : std::uint8_t { f32, f16, bf16 };

RIG_HD_INLINE float load_element(const void* data, ElementType type, std::int64_t i) {
  switch (type) {
    case ElementType::f16:
      return half_bits_to_float(static_cast<const std::uint16_t*>(data)[i]);
    case ElementType::bf16:
      return bfloat16_bits_to_float(static_cast<const std::uint16_t*>(data)[i]);
    default:
      return static_cast<const float*>(data)[i];
  }
}

RIG_HD_INLINE void store_element(void* data, ElementType type, std::int64_t i, float v) {
  switch (type) {
    case ElementType::f16:
      static_cast<std::uint16_t*>(data)[i] = float_to_half_bits(v);
      break;
    case ElementType::bf16:
      static_cast<std::uint16_t*>(data)[i] = float_to_bfloat16_bits(v);
      break;
    default:
      static_cast<float*>(data)[i] = v;
      break;
  }
}

// v as `type` stores it: rounded to nearest even for f16 / bf16.
RIG_HD_INLINE float rounded_to(ElementType type, float v) {
  switch (type) {
    case ElementType::f16:
      return half_bits_to_float(float_to_half_bits(v));
    case ElementType::bf16:
      return bfloat16_bits_to_float(float_to_bfloat16_bits(v));
    default:
      return v;
  }
}

// relu of v as `type` stores it, with relu's rule (x < 0 ? 0 : x: -0 and NaN
// kept): the bits of storing v and then running relu on the stored value, for
// kernels that fuse a relu.
RIG_HD_INLINE float relu_of_stored(ElementType type, float v) {
  v = rounded_to(type, v);
  return v < 0.0F ? 0.0F : v;
}

}  // namespace rig::kernels
