// CPU dropout: element i of a tensor is kept when the uniform float of
// element i of the Philox stream `key` is >= p (rig/random.hpp), and scaled by
// 1 / (1 - p). The mask is a pure function of (key, i), so the backward pass
// recomputes it instead of storing it, and the GPU can reproduce it.
#pragma once

#include <cstdint>

#include "rig/random.hpp"
#include "rig/tensor.hpp"

namespace rig::cpu {

// dst = mask(key, p) * src * scale, for src and dst of one floating dtype
// (f32, f16 or bf16; f16/bf16 computed in f32), contiguous, same numel.
void dropout_apply(const RandomKey& key, float p, float scale, const Tensor& src, Tensor& dst);

// The mask of stream elements [first, first + numel) as u8 (1 = kept), for
// tests: it must equal uniform_float(random_bits(key, first + i)) >= p.
void dropout_mask(const RandomKey& key, float p, Tensor& mask, std::uint64_t first = 0);

}  // namespace rig::cpu
