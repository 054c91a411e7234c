// Reading a GradientSource (rig/op_types.hpp) and writing PublishedValues on
// the CPU: the optimizer updates and the gradient statistics fold mixed
// precision's unscale and publish into their own pass over the flat buffers.
#pragma once

#include <cstdint>

#include "rig/half.hpp"
#include "rig/op_types.hpp"

namespace rig::cpu {

// Whether the source is the f32 buffer as it is (nothing to widen or scale).
inline bool plain_f32(const GradientSource& g) {
  return g.type == DType::f32 && g.scale == 1.0F;
}

// Gradients [first, first + count) as f32: the buffer itself where it is
// plain f32, else widened and multiplied by the scale into `scratch` (count
// floats), as unscale() writes them. One loop per type, so that each
// vectorises.
inline const float* gradients_at(const GradientSource& g, std::int64_t first, std::int64_t count,
                                 float* scratch) {
  if (plain_f32(g)) return static_cast<const float*>(g.data) + first;
  const float s = g.scale;
  if (g.type == DType::f32) {
    const float* src = static_cast<const float*>(g.data) + first;
    for (std::int64_t i = 0; i < count; ++i) scratch[i] = src[i] * s;
    return scratch;
  }
  const std::uint16_t* src = static_cast<const std::uint16_t*>(g.data) + first;
  if (g.type == DType::f16) {
    for (std::int64_t i = 0; i < count; ++i) scratch[i] = half_bits_to_float(src[i]) * s;
  } else {
    for (std::int64_t i = 0; i < count; ++i) scratch[i] = bfloat16_bits_to_float(src[i]) * s;
  }
  return scratch;
}

// out's elements [first, first + count) = values rounded to out's type (f16
// or bf16, as ops checks), as a tensor's cast rounds them (nearest even).
// Nothing where out has no data.
inline void publish(const PublishedValues& out, std::int64_t first, std::int64_t count,
                    const float* values) {
  if (out.data == nullptr) return;
  auto* bits = static_cast<std::uint16_t*>(out.data) + first;
  if (out.type == DType::f16) {
    for (std::int64_t i = 0; i < count; ++i) bits[i] = float_to_half_bits(values[i]);
  } else {
    for (std::int64_t i = 0; i < count; ++i) bits[i] = float_to_bfloat16_bits(values[i]);
  }
}

}  // namespace rig::cpu
