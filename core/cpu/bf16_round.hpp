// Rounding f32 matrices to bfloat16 (nearest even, as oneDNN and PyTorch
// round), for GEMMs run at bfloat16 precision (cpu/gemm.hpp).
#pragma once

#include <cstdint>

namespace rig::cpu {

// dst[i * cols + j] = bf16(src[i * ld + j]) for a [rows, cols] matrix: the
// bits, densely packed. Splits large matrices over the pool.
void pack_bf16(std::int64_t rows, std::int64_t cols, const float* src, std::int64_t ld,
               std::uint16_t* dst);

// The same rounding kept in f32 (each value exactly representable in bf16),
// densely packed: for products computed by an f32 GEMM on CPUs without
// bfloat16 dot products, with the same operands as the bf16 kernels see.
void round_bf16(std::int64_t rows, std::int64_t cols, const float* src, std::int64_t ld,
                float* dst);

// dst[i] = the f32 value of bf16 bits src[i] (exact).
void widen_bf16(std::int64_t n, const std::uint16_t* src, float* dst);

}  // namespace rig::cpu
