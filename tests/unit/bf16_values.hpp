// Test values for 16-bit ops on the emulated device: random tensors whose
// values are exact in bf16 (so an f32 reference sees what the 16-bit op
// sees), and leaves of a dtype on a device.
#pragma once

#include <cstdint>
#include <random>
#include <vector>

#include "rig/half.hpp"
#include "rig/tensor.hpp"

namespace rig::test {

// Uniform in [lo, hi), each value rounded to bf16 (f32 on the host).
inline Tensor bf16_exact_uniform(const Shape& shape, std::uint32_t seed, float lo = -1.0F,
                                 float hi = 1.0F) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(static_cast<std::size_t>(shape_numel(shape)));
  for (float& x : v) x = bfloat16_bits_to_float(float_to_bfloat16_bits(dist(rng)));
  return Tensor::from_vector(v, shape);
}

// `values` on `device` in `dtype`, requiring its gradient.
inline Tensor leaf(const Tensor& values, DType dtype, Device device) {
  Tensor t = values.to(device).to(dtype);
  t.set_requires_grad(true);
  return t;
}

}  // namespace rig::test
