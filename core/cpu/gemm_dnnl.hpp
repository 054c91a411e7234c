// Single-threaded f32 and bf16 GEMMs on oneDNN's matmul (brgemm kernels), for the
// panels that cpu::gemm hands each pool thread.
//
// Why: measured on the 2-core AVX-512 dev machine (AMD EPYC, Zen 4; one
// thread, GFLOP/s, the per-thread panels of the Transformer benchmark's
// products): OpenBLAS 0.3.21 sgemm 90-102, oneDNN 2.6 matmul 97-114 on the
// same panels (the core's FMA peak is ~115). oneDNN JIT-compiles a kernel per
// shape (~0.4 ms), so primitives are cached by shape and small products stay
// on OpenBLAS. RIG_CPU_GEMM=openblas in the environment turns this path off.
#pragma once

#include <cstdint>

namespace rig::cpu {

// Below this many multiply-adds a oneDNN call's fixed cost (argument setup,
// the cache lookup) is a visible share of the product.
inline constexpr std::int64_t kGemmDnnlMinWork = std::int64_t{1} << 16;

// C[m, n] = alpha op(A) op(B) + beta C with the operands laid out as in
// cpu::blas (row-major, `ta` / `tb` transpose). Returns false (and does
// nothing) when the product is too small to be worth a oneDNN call; the
// caller then uses OpenBLAS. Throws std::runtime_error if oneDNN fails.
bool gemm_dnnl(std::int64_t m, std::int64_t n, std::int64_t k, float alpha, const float* a,
               std::int64_t lda, bool ta, const float* b, std::int64_t ldb, bool tb, float beta,
               float* c, std::int64_t ldc);

// Whether this CPU has native bfloat16 dot products (AVX512_BF16 or AMX) for
// oneDNN to use; false also under RIG_CPU_GEMM=openblas. Without them
// oneDNN's bf16 matmul is no faster than f32.
bool gemm_dnnl_bf16_available();

// As gemm_dnnl with A and B in bfloat16 (raw bits), products accumulated in
// f32 into the f32 C, at any size. Only when gemm_dnnl_bf16_available().
void gemm_dnnl_bf16(std::int64_t m, std::int64_t n, std::int64_t k, float alpha,
                    const std::uint16_t* a, std::int64_t lda, bool ta, const std::uint16_t* b,
                    std::int64_t ldb, bool tb, float beta, float* c, std::int64_t ldc);

}  // namespace rig::cpu
