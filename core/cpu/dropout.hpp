// CPU dropout: element i of a tensor is kept when the uniform float of
// element i of the Philox stream `key` is >= p (rig/random.hpp), and scaled by
// 1 / (1 - p). The mask is a pure function of (key, i), so the GPU reproduces
// it. The forward pass can also record it as bits (1 bit per element, 1/32 of
// an f32 tensor) for a backward pass that costs a memory pass instead of
// recomputing Philox (measured 0.09 against 0.82 ns per element).
#pragma once

#include <cstdint>

#include "rig/dtype.hpp"
#include "rig/random.hpp"

namespace rig::cpu {

// Words of the bit mask of n elements: bit i % 32 of word i / 32 = element i kept.
inline std::int64_t dropout_mask_words(std::int64_t n) {
  return (n + 31) / 32;
}

// dst = keep(key, p) * src * scale for n elements of one floating dtype
// (f32, f16 or bf16; f16/bf16 computed in f32), contiguous; dst may be src.
// `mask_bits` (dropout_mask_words(n) words) receives the mask, if not null.
void dropout_forward(const RandomKey& key, float p, float scale, DType dtype, const void* src,
                     void* dst, std::int64_t n, std::uint32_t* mask_bits);

// dx = mask * grad * scale with the mask recorded by dropout_forward.
void dropout_backward(const std::uint32_t* mask_bits, float scale, DType dtype, const void* grad,
                      void* dx, std::int64_t n);

// The mask of stream elements [first, first + n) as u8 (1 = kept): it must
// equal uniform_float(random_bits(key, first + i)) >= p.
void dropout_mask(const RandomKey& key, float p, std::uint8_t* mask, std::int64_t n,
                  std::uint64_t first = 0);

}  // namespace rig::cpu
