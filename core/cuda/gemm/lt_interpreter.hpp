// A small CPU interpreter of cublasLtMatmul's documented semantics, in
// cuBLASLt's own column-major terms: the reference that tests plan_gemm
// (tests/gemm_plan) and librig_cuda's cuBLASLt calls (tests/gpu). It reads
// only the LtPlan, never rig's row-major request, so a wrong plan gives a
// wrong answer. Pure host code.
//
// Semantics (cuBLAS's cublasLtMatmul and cublasLtEpilogue_t documentation):
//   X[r, c] of a stored matrix is data[r + c * ld];
//   op(A)[i, l] = transa ? A[l, i] : A[i, l], op(B)[l, j] = transb ? B[j, l] : B[l, j];
//   x = alpha sum_l op(A)[i, l] op(B)[l, j] + beta C[i, j]   (the sum
//       accumulated in double and rounded to f32, compute type 32F's
//       accumulator; alpha, beta C and what follows in f32; C is not read
//       when beta == 0; TF32 rounding is not modelled)
//   BIAS*: x += bias[i] (bias per row of D, length m);
//   RELU*: x = max(x, 0); *_AUX sets bit (i + j * aux_ld) of the aux mask
//       (bit b % 8 of byte b / 8) to x > 0 before the ReLU, and clears it otherwise;
//   GELU*: x = 0.5 x (1 + tanh(sqrt(2 / pi) (x + 0.044715 x^3))) (the tanh
//       form); *_AUX stores the input x at aux[i + j * aux_ld] in aux_type;
//   DRELU*: x *= the aux mask bit; DGELU*: x *= GELU_tanh'(aux[i + j * aux_ld]);
//   *_BGRAD: bias[i] = sum_j x (after the derivative);
//   BGRADA: bias[i] = sum_l op(A)[i, l]; BGRADB: bias[j] = sum_l op(B)[l, j];
//   D[i, j] = x rounded (nearest even) to D's type.
// Bits of the relu mask for rows m..aux_ld-1 are left as they were.
// A strided batch (CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT != 1, the same count on
// every layout) is that product for b = 0 .. count - 1 on the matrices at
// b * CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET elements of each layout
// (offset 0: the same matrix for every b); a count of 1 reads no offset. A
// batch takes no bias, aux or own work here: their batch strides
// (CUBLASLT_MATMUL_DESC_BIAS_BATCH_STRIDE, ..._EPILOGUE_AUX_BATCH_STRIDE) are
// never planned.
#pragma once

#include "cuda/gemm/gemm_plan.hpp"

namespace rig::cuda {

// Buffers of cublasLtMatmul's operands, in the plan's types and layouts. `c`
// may equal `d`. `bias` is read (BIAS*) or written (*BGRAD*); `aux` read or
// written as the plan's aux_role says. Unused pointers may be null.
void interpret_lt_matmul(const LtPlan& plan, const void* a, const void* b, const void* c, void* d,
                         void* bias, void* aux);

// What rig's own kernel must do after the matmul (plan.own_work, see
// gemm_plan.hpp), on D as cuBLASLt left it: the reference of that kernel.
void interpret_own_work(const LtPlan& plan, void* d, void* bias, void* aux);

// The GELU forms and their derivatives, in double.
double gelu_tanh(double x);
double gelu_tanh_grad(double x);
double gelu_erf(double x);
double gelu_erf_grad(double x);

// Reads / writes element `index` of a buffer of `type` (writes round to nearest
// even, through f32 for f16 and bf16).
double load_element(GemmType type, const void* data, std::int64_t index);
void store_element(GemmType type, void* data, std::int64_t index, double value);

}  // namespace rig::cuda
