// Small in-cache matrix products at bfloat16 precision, for the fused
// attention's per-head products (32 x 32 x 64 in the benchmark Transformer):
// both operands are rounded to bfloat16 (nearest even) while being packed
// into pairs along k, and the products are accumulated in f32, as cpu::gemm
// does at GemmPrecision::bf16. On CPUs with AVX512_BF16 the packed pairs feed
// vdpbf16ps; elsewhere a portable kernel computes the same sums in the same
// order (odd element of each pair first), so both give the same bits for
// normal numbers (the instruction flushes subnormals to zero).
#pragma once

#include <cstdint>

namespace rig::cpu {

// Element (i, j) of op(X) is data[i * ld + j], or data[j * ld + i] when `trans`.
struct SmallOperand {
  const float* data = nullptr;
  std::int64_t ld = 0;
  bool trans = false;
};

enum class SmallGemmKernel { best, native, portable };

// Whether this CPU has the bf16 dot-product instruction (AVX512_BF16).
bool small_gemm_bf16_native_available();

// u32 words of scratch small_gemm_bf16 needs for these sizes.
std::int64_t small_gemm_bf16_scratch(std::int64_t m, std::int64_t n, std::int64_t k);

// C[m, n] (rows ldc apart) = alpha op(A)[m, k] op(B)[k, n], A and B rounded to
// bf16, f32 accumulation. `scratch` holds small_gemm_bf16_scratch(m, n, k)
// words. `native` on a CPU without AVX512_BF16 throws std::logic_error.
void small_gemm_bf16(std::int64_t m, std::int64_t n, std::int64_t k, float alpha,
                     const SmallOperand& a, const SmallOperand& b, float* c, std::int64_t ldc,
                     std::uint32_t* scratch, SmallGemmKernel kernel = SmallGemmKernel::best);

}  // namespace rig::cpu
