// The argument types of the backend's kernels: shapes and options as plain
// structs, every data pointer in the device's address space (what a tensor of
// that device holds). Nothing here reads memory; the ops fill these in.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>

#include "rig/dtype.hpp"
#include "rig/op_types.hpp"
#include "rig/shape.hpp"

namespace rig::backend {

// ---- Elementwise ---------------------------------------------------------------

enum class Unary : std::uint8_t {
  neg,
  exp,
  log,
  sqrt,
  rsqrt,
  relu,
  gelu,       // erf form
  gelu_tanh,  // tanh approximation
  tanh,
  sigmoid,
  add_scalar,  // x + scalar
  mul_scalar,  // x * scalar
  pow_scalar,  // x ^ scalar
};
Unary unary_of(Activation activation);

enum class Binary : std::uint8_t { add, sub, mul, div };

// u8 results: a == b, a < b, or a != scalar (compared in double, so 0.5
// against an integer tensor is never rounded).
enum class Compare : std::uint8_t { equal, less, not_equal_scalar };

// One operand of select: element 0 and strides (in elements) over the output
// shape; stride 0 on broadcast axes (a scalar has all strides 0).
struct SelectOperand {
  const void* data;
  Strides strides;
};

// A scale per row of a [rows, row_length] tensor (a [..., 1] tensor of its
// dtype broadcast over the last axis), applied to the tensor's element i
// as rows[i / row_length]; data null: none.
struct RowScale {
  const void* data = nullptr;
  std::int64_t row_length = 1;
};

// ---- Data movement -----------------------------------------------------------

// One piece of a row-blocked copy: `bytes` bytes at `src` + r * `bytes`
// go to dst + r * dst_row_bytes + `dst_offset` for every row r.
struct RowPiece {
  const std::byte* src;
  std::int64_t bytes;
  std::int64_t dst_offset;
};

// A contiguous operand of any dtype: element 0, its dtype and shape.
struct ConstBuffer {
  const void* data = nullptr;
  DType dtype = DType::f32;
  Shape shape;
};
struct MutBuffer {
  void* data = nullptr;
  DType dtype = DType::f32;
  Shape shape;
};

// ---- Matrix products -------------------------------------------------------------

// One operand: element (i, j) of op(X) is data[i * ld + j], or data[j * ld + i]
// when `trans`. At bf16 precision `bf16` may give the same matrix already
// rounded (Backend::round_bf16), so that products sharing it round it once;
// `data` may then be null.
// Where Backend::f16_products(), `f16` may instead give the matrix as f16
// values (a 16-bit model's own, exact: any precision), packed densely as
// `bf16` is; both operands of a product then come so, and it accumulates
// them in f32 on the f16 tensor cores.
struct GemmOperand {
  const float* data = nullptr;
  std::int64_t ld = 0;
  bool trans = false;
  const std::uint16_t* bf16 = nullptr;
  const std::uint16_t* f16 = nullptr;
};

// One product C[m, n] = alpha op(A)[m, k] op(B)[k, n] + beta C, C row-major
// with leading dimension ldc. k == 0 gives beta C (zeros when beta == 0).
struct GemmProduct {
  std::int64_t m = 0, n = 0, k = 0;
  float alpha = 1.0F;
  GemmOperand a, b;
  float beta = 0.0F;
  float* c = nullptr;
  std::int64_t ldc = 0;
  // Where set (and Backend::gemm_writes_bf16()), C is written here rounded
  // to bf16 instead of to c (beta must be 0): a 16-bit layer's output with
  // no f32 copy. Single products at bf16 precision only.
  std::uint16_t* c_bf16 = nullptr;
  // Likewise C written in f16 (beta 0), for a product of f16 operands.
  std::uint16_t* c_f16 = nullptr;
  // Where set (and Backend::gemm_adds_bias(bias)), C = P + bias[j] for a bias of
  // length n in C's type (f32 with c, bf16 with c_bf16, f16 with c_f16), then
  // relu where `relu` (also without a bias), computed in f32 and stored once:
  // the product's epilogue. Single products with beta 0 and k > 0.
  const void* bias = nullptr;
  bool relu = false;
  // Where set (Backend::gemm_relu_masks(C's type)), relu's backward in the epilogue:
  // C = P where bit (i * relu_mask_ld + j) of relu_mask is set (bit b % 8 of
  // byte b / 8, Backend::relu_mask's layout; relu_mask_ld a multiple of 128),
  // else 0. A 16-bit C (c_bf16 or c_f16), beta 0 and k > 0.
  const std::uint8_t* relu_mask = nullptr;
  std::int64_t relu_mask_ld = 0;
  // Where set (gemm_relu_masks(C's type)), bias_grad[i] = sum_l op(A)[i, l]
  // (length m, written in C's type): the bias gradient of y = x W^T + b
  // beside its weight gradient dW = dz^T x. A 16-bit C, alpha 1 and k > 0.
  void* bias_grad = nullptr;
};

// A strided matrix operand of a batched product: [..., r, c] with any strides;
// op(X) is its last two axes, transposed when `transpose`.
struct MatrixOperand {
  const float* data = nullptr;
  Shape shape;
  Strides strides;
  bool transpose = false;
};

// ---- Normalisation, convolution, pooling, attention ------------------------------

// Which gradients a normalisation's backward adds into what their buffers
// already hold (in f32, rounded once to the buffer's type) instead of
// overwriting it: those autograd offers (autograd::accumulation_target).
struct NormGradAccumulation {
  bool dx = false, dgamma = false, dbeta = false;
};
// The same for a convolution's data and filter gradients.
struct ConvGradAccumulation {
  bool dx = false, dw = false;
};

struct BatchNormShape {
  std::int64_t n = 0, c = 0, inner = 1;  // contiguous f32 viewed as [n, c, inner]
};

// The per-channel numbers of one batch-norm forward pass, for c channels:
// training: mean and var are the batch's (in), running_mean / running_var
// (may be null) move by momentum toward mean and var * unbias; eval: mean is
// written from running_mean, the variance read from running_var. Then
// invstd = 1 / sqrt(var + eps), scale = gamma invstd (gamma null: 1) and
// shift = beta - mean scale (beta null: 0).
struct BatchNormPrepare {
  std::int64_t c = 0;
  bool training = true;
  float momentum = 0.1F, eps = 1e-5F, unbias = 1.0F;
  float* mean = nullptr;
  const float* var = nullptr;  // training only
  float* running_mean = nullptr;
  float* running_var = nullptr;
  // [c] of param_type each, or null: f32, or f16 / bf16 where
  // reads_16bit_storage() (a 16-bit model's parameters, read as they are).
  const void* gamma = nullptr;
  const void* beta = nullptr;
  DType param_type = DType::f32;
  float* invstd = nullptr;
  float* scale = nullptr;
  float* shift = nullptr;
};

// Where a relu followed a batch norm, how its fused backward
// (batch_norm_backward_relu) finds where dy passes: from the relu's output y
// (y > 0), or, where y is null, from the mask bits batch_norm_apply_add_relu
// stored (y > 0 too), or, where both are null, recomputed from x with the
// forward's scale and shift (batch_norm_prepare's): the batch norm's output
// as stored > 0, the same test on the same value, without reading y.
struct BatchNormReluMask {
  const void* y = nullptr;       // x's shape and type, or null
  const float* scale = nullptr;  // [c] each, where y and bits are null
  const float* shift = nullptr;
  const std::uint8_t* bits = nullptr;  // bit e % 8 of byte e / 8: element e's
};

struct Conv2dShape {
  std::int64_t n = 0, c_in = 0, h = 0, w = 0;          // x [n, c_in, h, w]
  std::int64_t c_out = 0, kernel_h = 0, kernel_w = 0;  // weight [c_out, c_in / groups, kh, kw]
  std::int64_t out_h = 0, out_w = 0;                   // y [n, c_out, out_h, out_w]
  std::int64_t stride_h = 1, stride_w = 1, pad_h = 0, pad_w = 0, dilation_h = 1, dilation_w = 1;
  std::int64_t groups = 1;
  bool bias = false;
  // A GPU may round the f32 operands to TF32 (tensor cores) when true: set
  // at bf16 matmul precision, where 16-bit activations and weights arrive
  // as bf16 values that TF32 holds exactly. The CPU computes in f32 either way.
  bool allow_tf32 = false;
  // Channels last (NHWC, TensorFlow's data_format channels_last): x is
  // [n, h, w, c_in], weight [c_out, kh, kw, c_in / groups] and y
  // [n, out_h, out_w, c_out], each contiguous; the layout of cuDNN's 16-bit
  // tensor-core kernels, which transpose NCHW operands on the way in and out.
  bool channels_last = false;

  std::int64_t x_elements() const { return n * c_in * h * w; }
  std::int64_t w_elements() const { return c_out * (c_in / groups) * kernel_h * kernel_w; }
  std::int64_t y_elements() const { return n * c_out * out_h * out_w; }
};

struct Pool2dShape {
  std::int64_t planes = 0;  // N * C
  std::int64_t h = 0, w = 0, out_h = 0, out_w = 0;
  std::int64_t kernel_h = 1, kernel_w = 1, stride_h = 1, stride_w = 1, pad_h = 0, pad_w = 0;
  // Channels last: x is [planes / channels, h, w, channels] and y
  // [planes / channels, out_h, out_w, channels] (NHWC); max pooling's index
  // is still the offset in the plane (row * w + col).
  bool channels_last = false;
  std::int64_t channels = 1;  // C, read when channels_last
};

// Element strides of a [B, H, T, D] operand whose last axis is contiguous.
struct HeadStrides {
  std::int64_t batch = 0, head = 0, time = 0;
};

struct AttentionShape {
  std::int64_t b = 0, h = 0, tq = 0, tk = 0, d = 0;
  float scale = 1.0F;
  bool causal = false;  // query i sees keys j <= i + (tk - tq)
  // Keep-mask (1 = may attend), u8 with strides over [B, H, Tq, Tk] (0 on
  // broadcast axes); null for none.
  const std::uint8_t* mask = nullptr;
  std::array<std::int64_t, 4> mask_strides{};
  // Dropout on the weights: keep [B, H, Tq, Tk] contiguous (1 = kept) and
  // the factor for kept weights; null for no dropout.
  const std::uint8_t* keep = nullptr;
  float keep_scale = 1.0F;
  // Round the operands of every per-head product (q k^T, weights v and the
  // backward's four) to bfloat16 and accumulate in f32, as the GEMMs do at
  // MatmulPrecision::bf16; softmax, dropout and the outputs stay f32.
  bool bf16_products = false;
};

// Fused ("flash") attention on 16-bit q, k, v (Backend::fused_attention_*):
// the forward keeps each row's softmax statistics instead of the [B, H, Tq,
// Tk] weights and the backward recomputes them, so nothing of that size is
// written. q, k, v, out and the gradients are f16 or bf16 [B, H, T, D]
// views with any HeadStrides (last axis contiguous); the softmax and the
// products accumulate in f32. Key padding comes as lengths (keys j <
// key_lengths[b] are seen), not as a mask. Dropout draws from the device's
// own generator seeded by `dropout_seed`: other bits than the CPU's stream,
// the same bits in the forward and the backward of one call's seed.
struct FusedAttention {
  std::int64_t b = 0, h = 0, tq = 0, tk = 0, d = 0;
  DType type = DType::bf16;  // of q, k, v, out, dout, dq, dk, dv
  float scale = 1.0F;
  bool causal = false;                        // query i sees keys j <= i + (tk - tq)
  const std::int32_t* key_lengths = nullptr;  // i32 [B] of the device; null: every key
  float dropout_p = 0.0F;
  std::uint64_t dropout_seed = 0;
  const void* q = nullptr;
  HeadStrides qs;
  const void* k = nullptr;
  HeadStrides ks;
  const void* v = nullptr;
  HeadStrides vs;
  void* out = nullptr;  // written by the forward, read by the backward
  HeadStrides os;
  // f32 [B, H, Tq] (max + log of the sum of exponentials per row), written
  // by a forward whose backward will run (null: inference), read by it.
  float* stats = nullptr;
  // Backward: dout strided as out, dq / dk / dv as q / k / v, all three written.
  const void* dout = nullptr;
  void* dq = nullptr;
  void* dk = nullptr;
  void* dv = nullptr;
};

}  // namespace rig::backend
