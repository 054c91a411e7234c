// Row-major single-precision GEMM on oneDNN (large panels, gemm_dnnl.hpp) or
// OpenBLAS (small products), threaded by rig's own pool.
// OpenBLAS is put in single-thread mode on first use: its busy-waiting
// workers would otherwise compete with rig's pool for the same cores. Large
// products are split into row (or column) panels across the pool; batches of
// small products run one product per task.
#pragma once

#include <cstdint>

#include "backend/kernel_args.hpp"
#include "rig/op_types.hpp"

namespace rig::cpu {

// How gemm, gemm_pair and gemm_batched compute (the ops pass the precision
// of the op, MatmulPrecision). f32: as given. bf16: both operands are rounded
// to bfloat16 (nearest even) and the products accumulated in f32 into the f32
// C, as PyTorch's CPU autocast computes a linear layer, and on CPUs with
// bfloat16 dot products (AVX512_BF16, AMX) at about twice the f32 speed
// (2-core Zen 4, oneDNN 2.6, the Transformer's shapes: 405-447 GFLOP/s
// against 191-219). Elsewhere the rounded operands go through the f32 GEMM:
// the same numbers, no faster.
using GemmPrecision = MatmulPrecision;
using backend::GemmOperand;
using backend::GemmProduct;

// C[m, n] = alpha op(A)[m, k] op(B)[k, n] + beta C, C row-major with leading
// dimension ldc. k == 0 gives beta C (zeros when beta == 0).
void gemm(std::int64_t m, std::int64_t n, std::int64_t k, float alpha, const GemmOperand& a,
          const GemmOperand& b, float beta, float* c, std::int64_t ldc, GemmPrecision precision);

// The stored matrix of operand x (op(x) is [rows, cols]) rounded to bfloat16
// and densely packed into dst ([stored rows, stored cols]): GemmOperand::bf16
// for the products that share x (a layer's forward and backward).
void round_bf16(const GemmOperand& x, std::int64_t rows, std::int64_t cols, std::uint16_t* dst);

inline void gemm(const GemmProduct& p, GemmPrecision precision) {
  gemm(p.m, p.n, p.k, p.alpha, p.a, p.b, p.beta, p.c, p.ldc, precision);
}

// Two independent products at once, such as a layer's dX and dW: with two
// threads each runs whole on its own thread, with more each gets half the
// pool. Measured in the Transformer's training step with calls alternating
// between this and two split products: the feed-forward inner layer's pair
// (1024 x 256 x 1024 twice) 7 % faster, the 256-wide projections 2 % slower,
// about 1.3 ms a step gained. Small or tall-transposed products run one
// after the other.
void gemm_pair(const GemmProduct& first, const GemmProduct& second, GemmPrecision precision);

// Element offsets of each product's A and B in a batch with (broadcast)
// batch axes: batch index -> offset, row-major over `shape`, at most 8 axes
// (stride 0 where an operand broadcasts).
struct GemmBatchOffsets {
  static constexpr int kMaxDims = 8;
  int ndim = 0;
  std::int64_t shape[kMaxDims] = {};
  std::int64_t a_strides[kMaxDims] = {};
  std::int64_t b_strides[kMaxDims] = {};
  std::int64_t offset_a(std::int64_t index) const;
  std::int64_t offset_b(std::int64_t index) const;
};
// `batch` products: product i reads a.data + offsets.offset_a(i) and
// b.data + offsets.offset_b(i), and writes c + i * c_stride.
void gemm_batched(std::int64_t batch, std::int64_t m, std::int64_t n, std::int64_t k, float alpha,
                  const GemmOperand& a, const GemmOperand& b, const GemmBatchOffsets& offsets,
                  float beta, float* c, std::int64_t ldc, std::int64_t c_stride,
                  GemmPrecision precision);

}  // namespace rig::cpu
