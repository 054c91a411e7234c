// The plan of one cuBLASLt matrix product: rig's row-major request turned into
// exactly what is passed to cublasLtMatmul, in cuBLASLt's own column-major
// terms. Pure host code without CUDA headers: built, and tested against a CPU
// interpreter of cuBLASLt's semantics (lt_interpreter.hpp), everywhere.
//
// rig's product is row-major: C[m, n] = alpha op(A)[m, k] op(B)[k, n] + beta C,
// element (i, j) of op(X) being x[i * ld + j], or x[j * ld + i] when X is
// transposed. A row-major matrix with leading dimension ld is the column-major
// transpose with the same ld, so cuBLASLt computes
//   C^T[n, m] = op(B)^T[n, k] op(A)^T[k, m]
// with cuBLASLt's A = rig's B and cuBLASLt's B = rig's A, the transposes and
// leading dimensions unchanged, and m and n swapped. A per-column vector of
// rig's C (the bias, length n) is per row of cuBLASLt's D.
#pragma once

#include <cstdint>
#include <string>

namespace rig::cuda {

// Storage type of a matrix (A, B, C/D), a bias vector or an aux matrix.
enum class GemmType : std::uint8_t { f32, f16, bf16 };
// Accumulation is always f32; tf32 (CUBLAS_COMPUTE_32F_FAST_TF32) rounds f32
// inputs to TF32 on the tensor cores, only where the request allows it.
enum class GemmCompute : std::uint8_t { f32, tf32 };

std::size_t size_of(GemmType type);
const char* name_of(GemmType type);

// The activation of a forward epilogue, or whose derivative a backward one applies.
enum class GemmActivation : std::uint8_t {
  none,
  relu,
  gelu_erf,   // x Phi(x): rig's default GELU; cuBLASLt cannot compute it
  gelu_tanh,  // 0.5 x (1 + tanh(sqrt(2 / pi) (x + 0.044715 x^3))): cuBLASLt's GELU
};

// What runs after the product, in rig's row-major terms. P = alpha op(A) op(B)
// + beta C is the product; `aux` is an [m, n] row-major matrix with leading
// dimension aux_ld (for relu a bit mask, see below).
enum class EpilogueKind : std::uint8_t {
  // C = act(P + bias[j]): `bias` adds a length-n vector per column j (optional);
  // `aux` saves the pre-activation P + bias for the backward (activation not none).
  forward,
  // The activation's backward: C = P * act'(aux), aux being the forward's saved
  // pre-activation (P is the incoming gradient, e.g. dY W; beta must be 0);
  // `bias` also writes the gradient of the forward's bias, bias_grad[j] =
  // sum_i C[i, j] (length n).
  backward,
  // C = P, and bias_grad[i] = sum_k op(A)[i, k] (length m): the weight-gradient
  // product dW = dY^T X of y = x W^T + b gives db = the row sums of dY^T.
  bias_grad_a,
  // C = P, and bias_grad[j] = sum_k op(B)[k, j] (length n): dW = X^T dY gives db.
  bias_grad_b,
};

// The relu aux is a bit mask, cuBLASLt's format: bit (i * aux_ld + j) of the
// buffer (bit b % 8 of byte b / 8) is set where the pre-activation is > 0;
// aux_ld counts bits and must be a multiple of 128. The GELU aux holds the
// pre-activation in the output's type (C's), aux_ld a multiple of 8 elements.
struct Epilogue {
  EpilogueKind kind = EpilogueKind::forward;
  GemmActivation activation = GemmActivation::none;
  bool bias = false;  // forward: add a bias; backward: also write the bias gradient
  bool aux = false;   // forward: save the pre-activation (relu: the mask); backward: always read
  std::int64_t aux_ld = 0;
};

// One product in rig's row-major terms (see the top of this file), or a
// strided batch of them: product i (0 <= i < batch_count) reads A at
// i * stride_a elements past A's start, B at i * stride_b and writes C at
// i * stride_c (elements of the operand's type). A stride of 0 for A or B is a
// broadcast (the same matrix for every product); C's batches must not overlap.
// Products of a batch take no bias, aux or bias gradient and no erf GELU (see
// plan_gemm); strides are ignored when batch_count is 1.
struct GemmRequest {
  std::int64_t m = 0, n = 0, k = 0;
  bool trans_a = false, trans_b = false;
  std::int64_t lda = 0, ldb = 0, ldc = 0;
  GemmType a_type = GemmType::f32, b_type = GemmType::f32, c_type = GemmType::f32;
  float alpha = 1.0F, beta = 0.0F;  // beta = 1 accumulates into C (a gradient buffer)
  bool allow_tf32 = false;          // f32 inputs may be rounded to TF32 (MatmulPrecision allows it)
  Epilogue epilogue;
  std::int64_t batch_count = 1;  // 0 is an empty batch (nothing is computed)
  std::int64_t stride_a = 0, stride_b = 0, stride_c = 0;
};

// ---- The plan: cuBLASLt's terms -------------------------------------------------

// cuBLASLt's cublasLtEpilogue_t, same names (lower case) and values.
enum class LtEpilogue : std::uint32_t {
  default_ = 1,
  relu = 2,
  relu_aux = 2 | 128,
  bias = 4,
  relu_bias = 2 | 4,
  relu_aux_bias = 2 | 128 | 4,
  drelu = 8 | 128,
  drelu_bgrad = 8 | 128 | 16,
  gelu = 32,
  gelu_aux = 32 | 128,
  gelu_bias = 32 | 4,
  gelu_aux_bias = 32 | 128 | 4,
  dgelu = 64 | 128,
  dgelu_bgrad = 64 | 128 | 16,
  bgrada = 256,
  bgradb = 512,
};
const char* name_of(LtEpilogue epilogue);

// Which of rig's operands a cuBLASLt operand is.
enum class RigOperand : std::uint8_t { a, b };

// What CUBLASLT_MATMUL_DESC_BIAS_POINTER is: nothing, the bias (read), or the
// bias gradient (written, not accumulated: bias_length elements).
enum class BiasRole : std::uint8_t { none, bias, bias_grad };
// What CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER is.
enum class AuxRole : std::uint8_t {
  none,
  write_relu_mask,
  read_relu_mask,
  write_gelu_input,
  read_gelu_input
};

// Work that rig's own kernel does on D after cublasLtMatmul, because cuBLASLt
// cannot (its GELU is the tanh form). In cuBLASLt's column-major terms:
//   gelu_erf_forward:  aux = D if own_writes_aux (aux_ld as in the plan); D = gelu_erf(D)
//   gelu_erf_backward: D = D * gelu_erf'(aux); if own_bias_grad, bias[r] = sum_c D[r, c]
enum class OwnWork : std::uint8_t { none, gelu_erf_forward, gelu_erf_backward };

// One column-major matrix as cublasLtMatrixLayoutCreate takes it, and its
// batch: CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT (int32_t) and
// CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET (int64_t, elements; 0 for A or
// B is the same matrix for every product). A single product has count 1 and
// offset 0, cuBLASLt's defaults, and then sets neither attribute.
struct LtLayout {
  GemmType type = GemmType::f32;
  std::int64_t rows = 0, cols = 0, ld = 0;
  std::int32_t batch_count = 1;
  std::int64_t batch_offset = 0;

  bool batched() const { return batch_count != 1 || batch_offset != 0; }
};

// Exactly what is passed to cublasLtMatmul: D = alpha op(A) op(B) + beta C,
// D[m, n] column-major, then the epilogue (C and D are the same buffer); for
// a batch (d.batch_count != 1), that product once per batch index b on the
// matrices at b * batch_offset of each layout. All four layouts have the same
// batch_count: A's offset is rig's stride_b, B's rig's stride_a (swapped as
// the operands are), C's and D's rig's stride_c.
struct LtPlan {
  RigOperand a_is = RigOperand::b;  // cuBLASLt's A is rig's B ...
  RigOperand b_is = RigOperand::a;  // ... and its B is rig's A
  bool transa = false, transb = false;
  std::int64_t m = 0, n = 0, k = 0;
  LtLayout a, b, c, d;  // stored shapes: a is (transa ? k x m : m x k), b (transb ? n x k : k x n)
  GemmCompute compute = GemmCompute::f32;
  GemmType scale_type = GemmType::f32;  // alpha and beta are f32 (CUDA_R_32F)
  LtEpilogue epilogue = LtEpilogue::default_;
  BiasRole bias_role = BiasRole::none;
  GemmType bias_type = GemmType::f32;  // CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE: D's type
  std::int64_t bias_length = 0;
  AuxRole aux_role = AuxRole::none;
  GemmType aux_type =
      GemmType::f32;        // CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_DATA_TYPE (GELU: D's type)
  std::int64_t aux_ld = 0;  // CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD (relu: bits)
  float alpha = 1.0F, beta = 0.0F;
  // rig's own kernel after the matmul (see OwnWork); the aux and bias pointers
  // then serve it, with the same ld, type and length as above.
  OwnWork own_work = OwnWork::none;
  bool own_writes_aux = false;
  bool own_bias_grad = false;

  bool needs_own_activation() const { return own_work != OwnWork::none; }
  // D's batch count: 1 for a single product, 0 for an empty batch.
  std::int64_t batch_count() const { return d.batch_count; }
  // Bytes of the aux buffer that cuBLASLt or the own kernel reads or writes (0 without one).
  std::int64_t aux_bytes() const;
  // One line naming every field, for messages and cache keys.
  std::string describe() const;
};

// The plan of `request`. Throws std::invalid_argument naming the bad value and
// what was expected: negative sizes, leading dimensions below the minimum,
// aux_ld not a multiple of 128 (relu, in bits) or 8 (GELU) or below n, types
// cuBLASLt does not combine (A and B must match; C is theirs or f32), an
// epilogue the kind does not allow (backward without an activation or with
// beta != 0, bias gradients with alpha != 1); for a batch: a negative count or
// stride, a count above INT32_MAX (cuBLASLt's int32_t), a C stride that makes
// the batches of C overlap, and any bias, aux, bias gradient or erf GELU with
// batch_count != 1 (rig carries no per-batch bias or aux strides, and its own
// erf GELU kernel runs on one matrix).
LtPlan plan_gemm(const GemmRequest& request);

// Whether `count` row-major [rows, cols] matrices with leading dimension ld,
// `stride` elements apart, share no element, as plan_gemm requires of C: each
// starts after the previous one's last element, or all of them sit side by
// side within each row's ld. True with no two non-empty matrices.
bool strided_batches_apart(std::int64_t rows, std::int64_t cols, std::int64_t ld,
                           std::int64_t count, std::int64_t stride);

}  // namespace rig::cuda
