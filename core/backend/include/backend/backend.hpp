// The compute backend seam. The ops (core/src/ops) check shapes, dtypes and
// devices and record autograd; every kernel they run, in backward closures
// too, is an entry point of the Backend of the tensors' device, reached
// through backend_for(device). A backend implements this interface and
// nothing above it changes: core/cpu (OpenBLAS, oneDNN, own SIMD kernels),
// core/sim (the CPU kernels on memory the host cannot touch) and core/cuda
// (cuda/backend/kernel_backend.hpp, on the GPU or in the SIMT emulator).
//
// Conventions of every entry point:
// - Pointers are in the backend's device address space (what the tensors of
//   that device hold); host values travel as arguments. Element strides, not
//   bytes, unless a name says bytes.
// - Kernels run in order on the calling thread's stream of the device; the
//   CPU and sim backends run them before returning. Only to_host() and
//   synchronize() wait for the device (and a PendingRead, for its copy).
// - f32 compute unless a dtype is given; f16/bf16 tensors are converted by
//   the ops (copy_strided) before and after.
// - Outputs are written whole unless the entry point says "accumulates".
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <utility>

#include "backend/kernel_args.hpp"
#include "backend/memory.hpp"
#include "backend/pending_read.hpp"
#include "backend/strided_plan.hpp"
#include "rig/device.hpp"
#include "rig/dtype.hpp"
#include "rig/op_types.hpp"
#include "rig/random.hpp"
#include "rig/shape.hpp"

namespace rig::backend {

class Backend {
 public:
  virtual ~Backend() = default;
  virtual Device::Type type() const = 0;

  // ---- Memory and transfers ------------------------------------------------------
  virtual MemoryPool& memory(Device device) = 0;
  // The percentage of recent time the device ran kernels (a GPU: NVML's
  // utilisation over its last sample period), where the back end can tell.
  virtual std::optional<double> device_utilisation(Device) { return std::nullopt; }
  // Whether DEVICE times candidate convolution engines on each shape's first
  // call and keeps the fastest (cuDNN on a GPU; PyTorch's cudnn.benchmark).
  // Returns whether the device has engines to choose between: nothing to
  // tune on the CPU, sim or the emulator.
  virtual bool set_convolution_autotuning(Device, bool /*on*/) { return false; }
  // Whether DEVICE's float32 matrix products (at MatmulPrecision::f32) and
  // float32 convolutions may run on TF32 tensor cores from now on (operands
  // rounded to TF32's 10 mantissa bits, float32 accumulation: PyTorch's
  // allow_tf32). Returns whether that changes what the device computes: only
  // a GPU of compute capability 8.0 or later has TF32.
  virtual bool set_tf32(Device, bool /*on*/) { return false; }
  // Synchronous copies between this device's memory and host memory.
  virtual void to_host(void* host, const void* src, std::size_t bytes) = 0;
  virtual void from_host(void* dst, const void* host, std::size_t bytes) = 0;
  virtual void synchronize() = 0;
  // Copies from the host that overlap the kernels: from_host calls between
  // begin_uploads() and end_uploads() may run on a copy stream, after the
  // work queued before begin_uploads() and alongside the work queued after
  // it (their destinations must be allocated inside the scope).
  // use_uploads(ticket) makes the work queued after it wait for them: call it
  // before anything reads or frees those destinations. Where the device has
  // one queue (the CPU, the sim device, the emulator) they are plain copies.
  virtual void begin_uploads() {}
  virtual std::uint64_t end_uploads() { return 0; }
  virtual void use_uploads(std::uint64_t /*ticket*/) {}
  // A copy to the host queued behind the work so far, collected later
  // (backend/pending_read.hpp); where the device computes at once, a to_host.
  virtual std::unique_ptr<PendingRead> to_host_later(const void* src, std::size_t bytes) {
    return read_at_once(bytes, [&](void* host, std::size_t n) { to_host(host, src, n); });
  }

  // ---- Strided copy, cast, fill, accumulate over n-d operands --------------------
  // dst = src converted to dst's dtype (floats to integers: truncated toward
  // zero, saturated, NaN -> 0; integers to integers: wrapped; narrowing to
  // f16/bf16 rounds to nearest even). The operands must not overlap.
  virtual void copy_strided(const Shape& shape, void* dst, const Strides& dst_strides,
                            DType dst_dtype, const void* src, const Strides& src_strides,
                            DType src_dtype) = 0;
  // dst = value converted to dst's dtype as above.
  virtual void fill_strided(const Shape& shape, void* dst, const Strides& dst_strides,
                            DType dst_dtype, float value) = 0;
  // dst += src for floating dtypes (summed in f32). dst may repeat elements
  // (stride 0 on a broadcast axis): then it sums everything that maps there.
  virtual void add_strided(const Shape& shape, void* dst, const Strides& dst_strides,
                           DType dst_dtype, const void* src, const Strides& src_strides,
                           DType src_dtype) = 0;
  // Zeroes `bytes` bytes.
  virtual void zero_bytes(void* dst, std::int64_t bytes) = 0;

  // ---- Elementwise (f32) ---------------------------------------------------------
  virtual void unary(Unary op, const float* x, float* y, std::int64_t n, float scalar) = 0;
  // dx = g * op'(x); x or y (the forward's input or output) may be null when op' does not read it.
  virtual void unary_backward(Unary op, const float* g, const float* x, const float* y, float* dx,
                              std::int64_t n, float scalar) = 0;
  // out = a op b over a plan with operands 0: out, 1: a, 2: b.
  virtual void binary(Binary op, const StridedPlan<3>& plan, const float* a, const float* b,
                      float* out) = 0;
  // 16-bit storage read and written as it is, where reads_16bit_storage():
  // binary ops with a, b and out all f16 or all bf16, and layer norm (below)
  // with x, y, g and dx of one 16-bit dtype. The math is f32 and each output
  // is rounded once at its store, so the results are those of the f32 path
  // rounded to the dtype, bit for bit, without the f32 copies the ops make
  // for other back ends (the defaults throw).
  virtual bool reads_16bit_storage() const { return false; }
  virtual void binary_16(Binary op, const StridedPlan<3>& plan, DType type, const void* a,
                         const void* b, void* out);
  // unary / unary_backward with x, y, g and dx of the 16-bit `type`.
  virtual void unary_16(Unary op, DType type, const void* x, void* y, std::int64_t n, float scalar);
  virtual void unary_backward_16(Unary op, DType type, const void* g, const void* x, const void* y,
                                 void* dx, std::int64_t n, float scalar);
  // out = x over a plan with operands 0: out, 1: x (a broadcasting copy).
  virtual void broadcast_copy(const StridedPlan<2>& plan, const float* x, float* out) = 0;
  // u8 out over a plan with operands 0: out, 1: a, 2: b (b unused for not_equal_scalar).
  // a and b have `dtype` (f32, i32, i64 or u8).
  virtual void compare(Compare op, const StridedPlan<3>& plan, DType dtype, const void* a,
                       const void* b, double scalar, std::uint8_t* out) = 0;
  // out (contiguous, `shape`) = cond != 0 ? a : b. cond is u8; a, b and out
  // share one dtype of `element_bytes` bytes (the values are copied, not converted).
  virtual void select(const Shape& shape, std::size_t element_bytes, const SelectOperand& cond,
                      const SelectOperand& a, const SelectOperand& b, void* out) = 0;
  // In place on y [rows, cols]: y = activation(y + bias); pre (may be null)
  // receives y + bias before the activation (gelu's backward reads it).
  virtual void bias_activation(float* y, float* pre, const float* bias, std::int64_t rows,
                               std::int64_t cols, Activation activation) = 0;
  // dz = g * activation'(saved) (times relu_scale for relu), db = column sums
  // of dz; dz or db may be null (not wanted). saved is the output (relu, tanh,
  // sigmoid) or the pre-activation (gelu).
  virtual void activation_backward(Activation activation, const float* g, const float* saved,
                                   float* dz, float* db, std::int64_t rows, std::int64_t cols,
                                   float relu_scale) = 0;
  // The same with dz written only rounded to bf16.
  virtual void activation_backward_bf16(Activation activation, const float* g, const float* saved,
                                        std::uint16_t* dz_bf16, float* db, std::int64_t rows,
                                        std::int64_t cols, float relu_scale) = 0;
  // The same with dz written rounded to dz_type (bf16 or f16), g and saved
  // each f32 or dz_type (g_type, saved_type), and db f32 or rounded to
  // dz_type once summed (db_type: a 16-bit bias's gradient needs no cast
  // after), where reads_16bit_storage(); with accumulate_db, db is added to
  // what it holds (in f32, rounded once). dz may be null (activation none
  // with g already of dz_type: g is dz, only db is wanted).
  virtual void activation_backward_16(Activation activation, DType g_type, const void* g,
                                      DType saved_type, const void* saved, DType dz_type, void* dz,
                                      DType db_type, void* db, std::int64_t rows, std::int64_t cols,
                                      float relu_scale, bool accumulate_db);
  // y (f32 [rows, cols], a product) -> out (`type`, f16 or bf16) = relu (or
  // nothing: activation none) of y + bias (may be null; f32 or `type`:
  // bias_type), then, where dropout_key is set, dropout_forward's keep rule
  // for p with `scale`, rounded once: the bits of bias_activation on the
  // bias's f32 values, dropout_forward on f32 and a cast, in one pass
  // (reads_16bit_storage()).
  virtual void bias_activation_16(DType type, const float* y, DType bias_type, const void* bias,
                                  std::int64_t rows, std::int64_t cols, Activation activation,
                                  const RandomKey* dropout_key, float p, float scale, void* out);

  // ---- Reductions (f32) --------------------------------------------------------------
  // out[0] = sum(x[0, n)) / divisor, summed and divided in f64 (the result
  // does not depend on the number of threads); sum_squares: of x[i]^2.
  virtual void sum_all(const float* x, std::int64_t n, double divisor, float* out) = 0;
  virtual void sum_squares(const float* x, std::int64_t n, double divisor, float* out) = 0;
  // x [outer, r, inner] -> y [outer, inner]: scale * sum over r / max over r
  // (index: i64 position of the first maximum; NaN counts as largest).
  virtual void sum_axis(const float* x, float* y, std::int64_t outer, std::int64_t r,
                        std::int64_t inner, float scale) = 0;
  virtual void max_axis(const float* x, float* y, std::int64_t* index, std::int64_t outer,
                        std::int64_t r, std::int64_t inner) = 0;
  // dx [outer, r, inner] = g [outer, inner] at index, zero elsewhere.
  virtual void max_axis_backward(const float* g, const std::int64_t* index, float* dx,
                                 std::int64_t outer, std::int64_t r, std::int64_t inner) = 0;

  // ---- Softmax and normalisation (f32) ----------------------------------------------
  // Row-wise (log-)softmax over a row plan of x (operand 0) and a u8 mask
  // (operand 1, may be null: 1 keeps); y contiguous.
  virtual void softmax_forward(const StridedPlan<2>& plan, const float* x, const std::uint8_t* mask,
                               float* y, bool log) = 0;
  virtual void softmax_backward(const float* y, const float* g, float* dx, std::int64_t rows,
                                std::int64_t n, bool log) = 0;
  virtual void layer_norm_forward(const float* x, const float* gamma, const float* beta, float* y,
                                  float* mean, float* rstd, std::int64_t rows, std::int64_t d,
                                  float eps) = 0;
  // scratch: layer_norm_scratch_size(rows, d) floats of this device.
  virtual std::int64_t layer_norm_scratch_size(std::int64_t rows, std::int64_t d) = 0;
  virtual void layer_norm_backward(const float* x, const float* gamma, const float* mean,
                                   const float* rstd, const float* g, float* dx, float* dgamma,
                                   float* dbeta, std::int64_t rows, std::int64_t d,
                                   float* scratch) = 0;
  // The same with x, y, g and dx of the 16-bit `type` (reads_16bit_storage());
  // gamma, beta, dgamma and dbeta f32 or `type` (param_type: a 16-bit model's
  // own parameters, read as they are, their gradients rounded once); mean and
  // rstd f32. Backward adds into dx, dgamma and dbeta where `accumulate` says
  // (the ops send f32 backward passes here too on such a back end, for that).
  virtual void layer_norm_forward_16(DType type, const void* x, DType param_type, const void* gamma,
                                     const void* beta, void* y, float* mean, float* rstd,
                                     std::int64_t rows, std::int64_t d, float eps);
  virtual void layer_norm_backward_16(DType type, const void* x, DType param_type,
                                      const void* gamma, const float* mean, const float* rstd,
                                      const void* g, void* dx, void* dgamma, void* dbeta,
                                      std::int64_t rows, std::int64_t d, float* scratch,
                                      const NormGradAccumulation& accumulate);
  // Per-channel mean and biased variance.
  virtual void batch_norm_stats(const BatchNormShape& s, const float* x, float* mean,
                                float* var) = 0;
  virtual void batch_norm_prepare(const BatchNormPrepare& args) = 0;
  // A training step's statistics of x (of `type`: f32, or 16-bit where
  // reads_16bit_storage()) into args.mean and var, then batch_norm_prepare
  // with them (args.training; args.var is var): the two calls' bits. The
  // default makes the two calls; the CUDA back end prepares in the kernel
  // that finishes the statistics (a launch fewer per batch norm).
  virtual void batch_norm_stats_prepare(const BatchNormShape& s, DType type, const void* x,
                                        float* var, const BatchNormPrepare& args);
  // y = x * scale[c] + shift[c].
  virtual void batch_norm_apply(const BatchNormShape& s, const float* x, const float* scale,
                                const float* shift, float* y) = 0;
  virtual void batch_norm_backward(const BatchNormShape& s, const float* x, const float* dy,
                                   const float* mean, const float* invstd, const float* gamma,
                                   bool batch_stats, float* dx, float* dgamma, float* dbeta) = 0;
  // stats, apply and backward with x, y, dy and dx of the 16-bit `type`
  // (reads_16bit_storage()); the statistics f32; gamma, dgamma and dbeta of
  // param_type (f32, or a 16-bit model's own parameters and gradients);
  // dgamma and dbeta added to what they hold where `accumulate` says (in
  // f32, rounded once; accumulate.dx is not offered: must be false). A back
  // end that reads 16-bit storage takes f32 `type` too (the f32 entry
  // points' bits; the ops call it for f32 there, to add dgamma and dbeta).
  virtual void batch_norm_stats_16(const BatchNormShape& s, DType type, const void* x, float* mean,
                                   float* var);
  virtual void batch_norm_apply_16(const BatchNormShape& s, DType type, const void* x,
                                   const float* scale, const float* shift, void* y);
  virtual void batch_norm_backward_16(const BatchNormShape& s, DType type, const void* x,
                                      const void* dy, const float* mean, const float* invstd,
                                      DType param_type, const void* gamma, bool batch_stats,
                                      void* dx, void* dgamma, void* dbeta,
                                      const NormGradAccumulation& accumulate);
  // A relu fused into the op before it, where fuses_relu(), on f32 or (where
  // reads_16bit_storage()) 16-bit storage, with the bits of the two ops; the
  // ops compose them elsewhere. Batch norm: apply writes relu(y) with the
  // bits of batch_norm_apply(_16) then relu; backward takes that output, or
  // the forward's scale and shift to find the relu's mask from x
  // (BatchNormReluMask), and gives the bits of relu's backward then
  // batch_norm_backward(_16): two passes over the activation fewer each way.
  // add_relu: out = relu(a + b) as binary(_16) add then relu, one pass.
  virtual bool fuses_relu() const { return false; }
  virtual void add_relu(const StridedPlan<3>& plan, DType type, const void* a, const void* b,
                        void* out);
  virtual void batch_norm_apply_relu(const BatchNormShape& s, DType type, const void* x,
                                     const float* scale, const float* shift, void* y);
  // relu(apply(x) + residual) (residual of `type`, x's shape): the bits of
  // batch_norm_apply(_16) then add_relu with residual, in one pass (a ResNet
  // block's last batch norm and its shortcut; ops::batch_norm_add_relu). Its
  // backward is batch_norm_backward_relu with masked_dy: the residual's
  // gradient, relu's backward of dy, written in the pass that reads dy.
  // relu_bits (or null): where the back end can, it also stores the relu's
  // mask there, y > 0 as a bit per element (bit e % 8 of byte e / 8; (x's
  // elements + 7) / 8 bytes), and returns true; the backward can then read
  // the mask (BatchNormReluMask::bits) instead of y. residual_scale and
  // residual_shift ([c] each, or null): the residual is another batch
  // norm's input, normalised here as batch_norm_apply(_16) would store it
  // (a projection shortcut's batch norm, never written; its backward is
  // batch_norm_backward_relu with the same mask).
  virtual bool batch_norm_apply_add_relu(const BatchNormShape& s, DType type, const void* x,
                                         const float* scale, const float* shift,
                                         const void* residual, const float* residual_scale,
                                         const float* residual_shift, void* y,
                                         std::uint8_t* relu_bits);
  // relu: the mask (BatchNormReluMask: the relu's output or its bits, or x
  // with the forward's scale and shift); masked_dy (of `type`, x's shape;
  // may be null, needs relu.y or relu.bits): relu's backward of dy written
  // there too, its bits.
  virtual void batch_norm_backward_relu(const BatchNormShape& s, DType type, const void* x,
                                        const BatchNormReluMask& relu, const void* dy,
                                        const float* mean, const float* invstd, DType param_type,
                                        const void* gamma, bool batch_stats, void* dx, void* dgamma,
                                        void* dbeta, void* masked_dy,
                                        const NormGradAccumulation& accumulate);

  // ---- Convolution and pooling (NCHW f32, contiguous) --------------------------------
  virtual void conv2d_forward(const Conv2dShape& s, const float* x, const float* w, const float* b,
                              float* y) = 0;
  virtual void conv2d_backward(const Conv2dShape& s, const float* x, const float* w,
                               const float* dy, float* dx, float* dw, float* db) = 0;
  // Convolutions without bias on x, w, y, dy, dx and dw of the 16-bit `type`
  // (reads_16bit_storage()), accumulated in f32; dx, dw may be null; those
  // `accumulate` names are added to what they hold (in f32, rounded once
  // where the device can). The ops send f32 convolutions without bias here
  // too on a back end that reads 16-bit storage, so that their gradients
  // are added in place as well.
  virtual void conv2d_forward_16(const Conv2dShape& s, DType type, const void* x, const void* w,
                                 void* y);
  // Whether the two above take x and w of `type` on a back end that does not
  // otherwise read 16-bit storage (the CPU's bf16 convolutions, where it has
  // AVX512-BF16): the ops then send it such convolutions without bias.
  virtual bool convolves_16bit(DType /*type*/) const { return false; }
  virtual void conv2d_backward_16(const Conv2dShape& s, DType type, const void* x, const void* w,
                                  const void* dy, void* dx, void* dw,
                                  const ConvGradAccumulation& accumulate);
  // Pooling on NCHW planes, or NHWC where s.channels_last (kernel_args.hpp);
  // both give the same bits per plane. Max pooling's index (as y) holds each
  // maximum's offset in its plane (row * w + col).
  virtual void max_pool2d_forward(const Pool2dShape& s, const float* x, float* y,
                                  std::int32_t* index) = 0;
  virtual void max_pool2d_backward(const Pool2dShape& s, const std::int32_t* index, const float* dy,
                                   float* dx) = 0;
  // Max pooling on f16 / bf16 x and y (backward: dy and dx) as they are, where
  // reads_16bit_storage(): the f32 path's bits (the maximum is one of its
  // inputs; dx summed in f32 in the same order and rounded once).
  virtual void max_pool2d_forward_16(const Pool2dShape& s, DType type, const void* x, void* y,
                                     std::int32_t* index);
  virtual void max_pool2d_backward_16(const Pool2dShape& s, DType type, const std::int32_t* index,
                                      const void* dy, void* dx);
  virtual void avg_pool2d_forward(const Pool2dShape& s, const float* x, float* y) = 0;
  virtual void avg_pool2d_backward(const Pool2dShape& s, const float* dy, float* dx) = 0;
  // y[p] = the mean of plane p's `size` elements of x; dx = dy[p] / size over
  // plane p. x and dx are [planes / channels, size, channels] with plane
  // p = n * channels + c: channels = 1 for planes one after another ([planes,
  // size]: NCHW), C for channels last ([N, size, C]: NHWC). y and dy are
  // [planes] either way. Each plane is summed in the same order in both.
  virtual void global_avg_pool_forward(std::int64_t planes, std::int64_t size,
                                       std::int64_t channels, const float* x, float* y) = 0;
  virtual void global_avg_pool_backward(std::int64_t planes, std::int64_t size,
                                        std::int64_t channels, const float* dy, float* dx) = 0;
  // The same on x, y, dy and dx of the 16-bit `type` (reads_16bit_storage()),
  // summed in f32, each result rounded once.
  virtual void global_avg_pool_forward_16(std::int64_t planes, std::int64_t size,
                                          std::int64_t channels, DType type, const void* x,
                                          void* y);
  virtual void global_avg_pool_backward_16(std::int64_t planes, std::int64_t size,
                                           std::int64_t channels, DType type, const void* dy,
                                           void* dx);

  // ---- Attention (f32) ---------------------------------------------------------------
  // out = dropout(softmax(q k^T * scale, masked)) v; `probs` ([B, H, Tq, Tk],
  // before dropout) is written when not null: backward needs it.
  virtual void attention_forward(const AttentionShape& s, const float* q, const HeadStrides& qs,
                                 const float* k, const HeadStrides& ks, const float* v,
                                 const HeadStrides& vs, float* out, const HeadStrides& os,
                                 float* probs) = 0;
  // dq, dk, dv (each may be null) from the upstream gradient dout.
  virtual void attention_backward(const AttentionShape& s, const float* q, const HeadStrides& qs,
                                  const float* k, const HeadStrides& ks, const float* v,
                                  const HeadStrides& vs, const float* probs, const float* dout,
                                  const HeadStrides& dos, float* dq, const HeadStrides& dqs,
                                  float* dk, const HeadStrides& dks, float* dv,
                                  const HeadStrides& dvs) = 0;
  // ---- Attention on 16-bit q, k, v, composed ----------------------------------------
  // attention_forward / attention_backward on q, k, v, out, dout, dq, dk and
  // dv of the 16-bit `type`, where composes_attention_16(type): each product
  // reads its 16-bit operands as they are and accumulates in f32; the
  // weights and the scores' gradient, the products' other operands, are
  // rounded to `type` (for bf16 the f32 path's bf16_products on the same
  // values; for f16 autocast's f16 products); the softmax and `probs` stay
  // f32, and each result is rounded once. The ops use them for 16-bit
  // operands the fused attention does not take, instead of f32 copies. The
  // defaults: none (composes_attention_16 is false, the calls throw).
  virtual bool composes_attention_16(DType type) const;
  virtual void attention_forward_16(const AttentionShape& s, DType type, const void* q,
                                    const HeadStrides& qs, const void* k, const HeadStrides& ks,
                                    const void* v, const HeadStrides& vs, void* out,
                                    const HeadStrides& os, float* probs);
  virtual void attention_backward_16(const AttentionShape& s, DType type, const void* q,
                                     const HeadStrides& qs, const void* k, const HeadStrides& ks,
                                     const void* v, const HeadStrides& vs, const float* probs,
                                     const void* dout, const HeadStrides& dos, void* dq,
                                     const HeadStrides& dqs, void* dk, const HeadStrides& dks,
                                     void* dv, const HeadStrides& dvs);
  // Fused attention (FusedAttention), where the back end has it for `a`'s
  // shape, type, mask and dropout (its pointers may be unset when asked);
  // the ops use it for 16-bit q, k, v and fall back to attention_forward /
  // attention_backward on f32 copies otherwise. The defaults: none (they throw).
  virtual bool fused_attention_supported(const FusedAttention& a);
  virtual void fused_attention_forward(const FusedAttention& a);
  virtual void fused_attention_backward(const FusedAttention& a);

  // ---- Losses (f32 logits [rows, c], i64 labels) ----------------------------------------
  // Per row: loss = -sum_j q_j log softmax(x)_j with q = `on` at the label and
  // `off` elsewhere; lse = log-sum-exp of the row.
  virtual void cross_entropy_forward(const float* x, const std::int64_t* labels, std::int64_t rows,
                                     std::int64_t c, float on, float off, float* loss,
                                     float* lse) = 0;
  // dx = (softmax(x) - q) * scale * (*scale_factor) * row_scale[r]; row_scale
  // may be null (1); scale_factor (one f32 of the device) may be null (1).
  virtual void cross_entropy_backward(const float* x, const std::int64_t* labels, const float* lse,
                                      const float* row_scale, float scale,
                                      const float* scale_factor, std::int64_t rows, std::int64_t c,
                                      float on, float off, float* dx) = 0;
  // The same over 16-bit logits (f16 or bf16) read as they are, dx written in
  // their dtype (dx may be x: in place), where cross_entropy_reads_16bit():
  // a language model's logits are its largest tensor, and f32 copies of
  // them and their gradient cost more than the loss. Other back ends get f32
  // copies from the ops (the defaults throw).
  virtual bool cross_entropy_reads_16bit() const { return false; }
  virtual void cross_entropy_forward_16(DType type, const void* x, const std::int64_t* labels,
                                        std::int64_t rows, std::int64_t c, float on, float off,
                                        float* loss, float* lse);
  virtual void cross_entropy_backward_16(DType type, const void* x, const std::int64_t* labels,
                                         const float* lse, const float* row_scale, float scale,
                                         const float* scale_factor, std::int64_t rows,
                                         std::int64_t c, float on, float off, void* dx);
  // OpenSeq2Seq's padded loss from the rows' cross-entropies xent and weights
  // w: loss[0] = sum_r (xent_r - constant) w_r^2 / sum_r w_r (0 when the
  // weights sum to 0), summed in f64.
  virtual void padded_loss(const float* xent, const float* w, std::int64_t rows, double constant,
                           float* loss) = 0;
  // Its gradient pieces for the upstream gradient (one f32): row_scale[r] =
  // w_r^2, *x_scale = upstream / sum(w) (the factor of the logits' gradient;
  // 0 when the weights sum to 0), and dw (may be null) = dloss/dw.
  virtual void padded_loss_backward(const float* xent, const float* w, std::int64_t rows,
                                    double constant, const float* upstream, float* row_scale,
                                    float* x_scale, float* dw) = 0;
  // Index of the first value outside [0, limit) of `index` (i32 or i64), or -1.
  // Reads the device: the one entry point besides to_host that returns data.
  virtual std::int64_t first_out_of_range(const void* index, DType dtype, std::int64_t n,
                                          std::int64_t limit) = 0;
  // What an op says of index `value` at `position`, out of range.
  using IndexMessage = std::function<std::string(std::int64_t position, std::int64_t value)>;
  // Checks that the n values of `index` (i32 or i64) are in [0, limit): for
  // the first that is not, throws std::invalid_argument(message(position,
  // value)). Here: at once (first_out_of_range, then a read of the value). A
  // back end where that read would stall the device may queue the check and
  // throw at its next read of the device instead, as PyTorch's device-side
  // asserts do; its index kernels then treat an index out of range as a row
  // of zeros (the CUDA back end).
  virtual void check_index(const void* index, DType dtype, std::int64_t n, std::int64_t limit,
                           const IndexMessage& message);
  // Whether check_index is deferred here: then the ops call it (and pay for
  // the message's copy of their shapes); else they check with
  // first_out_of_range at once, allocating nothing on the hot path.
  virtual bool defers_index_checks() const { return false; }

  // ---- Randomness ----------------------------------------------------------------
  // dst = keep ? src * scale : 0 for n elements of `dtype` (f32, f16, bf16),
  // element i kept by the dropout rule of rig/random.hpp; mask_bits (may be
  // null) receives bit i%32 of word i/32 = kept.
  virtual void dropout_forward(const RandomKey& key, float p, float scale, DType dtype,
                               const void* src, void* dst, std::int64_t n,
                               std::uint32_t* mask_bits) = 0;
  virtual void dropout_backward(const std::uint32_t* mask_bits, float scale, DType dtype,
                                const void* grad, void* dx, std::int64_t n) = 0;
  // dst = residual + dropout_forward's value (rounded to dtype, then the sum
  // rounded: the bits of dropout_forward and an add) in one pass, where
  // fuses_dropout_add() (dtype f32, f16 or bf16; a residual connection).
  // With rows.data, src element i is first multiplied by rows.data[i /
  // rows.row_length] (dtype) and rounded: the bits of a mul by a [..., 1]
  // tensor before the dropout (a Transformer's padding mask on its
  // feed-forward branch).
  virtual bool fuses_dropout_add() const { return false; }
  virtual void dropout_add_forward(const RandomKey& key, float p, float scale, DType dtype,
                                   const void* src, const void* residual, void* dst, std::int64_t n,
                                   std::uint32_t* mask_bits, const RowScale& rows);
  // dropout_add_forward's backward for its src: dropout_backward's dx, then
  // (rows.data) multiplied by the row's scale and rounded, in one pass.
  virtual void dropout_add_backward(const std::uint32_t* mask_bits, float scale, DType dtype,
                                    const void* grad, void* dx, std::int64_t n,
                                    const RowScale& rows);
  // mask[i] = 1 where element first + i of the stream is kept (u8).
  virtual void dropout_mask(const RandomKey& key, float p, std::uint8_t* mask, std::int64_t n,
                            std::uint64_t first) = 0;

  // ---- Indexing and data movement ----------------------------------------------------
  // concat: every output row is the concatenation of the pieces' rows.
  virtual void concat_rows(const RowPiece* pieces, std::int64_t count, std::byte* dst,
                           std::int64_t dst_row_bytes, std::int64_t rows) = 0;
  // Bytes [offset, offset + bytes) of each of `rows` rows of src into a packed dst.
  virtual void extract_rows(const std::byte* src, std::int64_t src_row_bytes, std::int64_t offset,
                            std::byte* dst, std::int64_t bytes, std::int64_t rows) = 0;
  // Zeroes bytes [offset, offset + bytes) of each of `rows` rows of dst.
  virtual void zero_rows(std::byte* dst, std::int64_t dst_row_bytes, std::int64_t offset,
                         std::int64_t bytes, std::int64_t rows) = 0;
  // torch.gather along `axis`: out has index's shape; x and index the same rank.
  virtual void gather(const ConstBuffer& x, std::int64_t axis, const ConstBuffer& index,
                      void* out) = 0;
  // dx (x's shape, f32, zeroed by the caller) += grad (index's shape, f32) at index.
  virtual void gather_backward(const float* grad, std::int64_t axis, const ConstBuffer& index,
                               float* dx, const Shape& x_shape) = 0;
  // x [outer, n, inner] (element_bytes each) -> out [outer, k, inner] at index (i32/i64 [k]).
  virtual void index_select(const void* x, std::size_t element_bytes, std::int64_t outer,
                            std::int64_t n, std::int64_t inner, const ConstBuffer& index,
                            void* out) = 0;
  // dx [outer, n, inner] (f32, accumulates) += grad [outer, k, inner] at index,
  // each destination summed in index order (independent of thread count).
  virtual void index_add(const float* grad, std::int64_t outer, std::int64_t n, std::int64_t inner,
                         const ConstBuffer& index, float* dx) = 0;
  // The same into 16-bit storage (reads_16bit_storage()): dx of `type` (f16
  // or bf16), grad f32 or `type` (grad_type). Each destination row an index
  // reaches becomes round(dx + round(s)), s the f32 sum of its gradient rows
  // in index order: the bits of index_add into zeroed f32, that rounded to
  // `type` and added into dx; rows no index reaches are not written. So an
  // embedding's gradient goes straight into a 16-bit parameter's gradient
  // buffer, with no dense f32 [n, inner] gradient.
  virtual void index_add_16(DType grad_type, const void* grad, std::int64_t outer, std::int64_t n,
                            std::int64_t inner, const ConstBuffer& index, DType type, void* dx);
  // x [outer, n, inner] -> out [outer, inner] (i64): index of the largest
  // along n, the first on ties, NaN largest. x is f32, i32, i64 or u8.
  virtual void argmax(const ConstBuffer& x, std::int64_t outer, std::int64_t n, std::int64_t inner,
                      std::int64_t* out) = 0;
  // x [rows, n] -> values [rows, k] (x's dtype) and indices [rows, k] (i64),
  // sorted descending, ties by lower index, NaN largest.
  virtual void topk(const ConstBuffer& x, std::int64_t rows, std::int64_t n, std::int64_t k,
                    void* values, std::int64_t* indices) = 0;
  // The largest k topk takes here; ops::topk selects a larger one on the host.
  virtual std::int64_t topk_max_k() const { return std::numeric_limits<std::int64_t>::max(); }

  // ---- Matrix products (f32 data, f32 accumulation) -------------------------------------
  // Whether bf16 precision wants its operands rounded ahead of the product
  // (round_bf16): then a layer rounds x and W once for forward and backward.
  virtual bool rounds_bf16_operands() const = 0;
  // Whether bf16 products run faster than f32 here (bf16 dot-product units).
  virtual bool fast_bf16_products() const = 0;
  // The stored matrix of operand x (op(x) is [rows, cols]) rounded to bf16 and
  // densely packed into dst ([stored rows, stored cols]).
  virtual void round_bf16(const GemmOperand& x, std::int64_t rows, std::int64_t cols,
                          std::uint16_t* dst) = 0;
  virtual void gemm(const GemmProduct& p, MatmulPrecision precision) = 0;
  // Whether gemm() honours GemmProduct::c_bf16 (the ops leave it null where not).
  virtual bool gemm_writes_bf16() const { return false; }
  // Whether gemm() honours GemmProduct::bias and relu for a bias at this
  // address (null: relu alone); the ops leave them unset where not.
  virtual bool gemm_adds_bias(const void* /*bias*/) const { return false; }
  // Whether gemm() takes f16 operands and C as they are (GemmOperand::f16,
  // GemmProduct::c_f16: tensor cores); the ops leave them null where not.
  virtual bool f16_products() const { return false; }
  // Whether gemm() takes GemmProduct::relu_mask and bias_grad (a relu
  // layer's backward in its products' epilogues: cuBLASLt's DRELU and
  // BGRADA) on products of `type` (bf16 or f16) and relu_mask() writes the
  // mask they read; the ops leave them unset where not.
  virtual bool gemm_relu_masks(DType /*type*/) { return false; }
  // h [rows, cols] (dtype bf16 or f16, contiguous; a relu's output): where
  // dropout_key is set, dropout_forward's keep rule for p with scale 1 (the
  // kept values as they are) in place; then bit (r * mask_ld + c) of mask
  // (bit b % 8 of byte b / 8) = whether h[r, c] as stored is > 0, for
  // GemmProduct::relu_mask. cols % 8 == 0; mask_ld a multiple of 128, at
  // least cols; mask holds rows * mask_ld / 8 bytes (the bits past cols
  // are left as they were). Where gemm_relu_masks(dtype).
  virtual void relu_mask(const RandomKey* dropout_key, float p, DType dtype, void* h,
                         std::int64_t rows, std::int64_t cols, std::uint8_t* mask,
                         std::int64_t mask_ld);
  // Two independent products (a layer's dX and dW) at once where that is faster.
  virtual void gemm_pair(const GemmProduct& first, const GemmProduct& second,
                         MatmulPrecision precision) = 0;
  // out [..., m, n] (contiguous, the broadcast batch of a and b) = op(a) op(b).
  // The backend plans the layout (operands read in place where their strides
  // allow, copied otherwise) and folds batches into one product where it can.
  virtual void matmul(const MatrixOperand& a, const MatrixOperand& b, float* out,
                      const Shape& out_shape, MatmulPrecision precision) = 0;

  // ---- Mixed precision ------------------------------------------------------------------
  // master[i] = widen(src[i]) * scale for n elements of src_dtype (f32, f16,
  // bf16); master may be src itself (f32, in place) or null (nothing is
  // written). *amax (one f32 of the device; may be null: not wanted) = max
  // |master[i]|, or +inf when any value is inf or NaN: the overflow check of
  // loss scaling.
  virtual void unscale(std::int64_t n, DType src_dtype, const void* src, float* master, float scale,
                       float* amax) = 0;

  // Reads the device: the statistics of n gradients (the master f32, or 16-bit
  // ones unscaled as they are read: GradientSource) come back to the host,
  // with whether the one f32 at `loss` (a device scalar; may be null) is
  // finite. The same bits whatever the source's type for the same values.
  virtual GradientStats gradient_stats(const GradientSource& grads, std::int64_t n,
                                       const float* loss) = 0;
  // The same statistics written to *out, this back end's memory, without
  // reading the device: a step whose host decisions do not need them queues
  // them, and the host reads several steps' at once, when it logs.
  virtual void gradient_stats_to(const GradientSource& grads, std::int64_t n, const float* loss,
                                 GradientStats* out) = 0;
  // grads (n f32) *= f32(max_norm / (norm + 1e-6)) when the norm of *stats
  // (this back end's memory, as gradient_stats_to wrote it) > max_norm:
  // clipping by the global norm without reading it.
  virtual void clip_by_norm(float* grads, std::int64_t n, const GradientStats* stats,
                            double max_norm) = 0;
  // Reads `count` records that gradient_stats_to wrote (this back end's
  // memory) into `host`: the only read of a step that queued them.
  virtual void read_gradient_stats(const GradientStats* records, std::int64_t count,
                                   GradientStats* host) {
    to_host(host, records, static_cast<std::size_t>(count) * sizeof(GradientStats));
  }
  // LARC over `count` parameter slices of the flat buffers (slices: host
  // memory), grads scaled in place.
  virtual void larc(const float* values, float* grads, const FlatSlice* slices, std::int64_t count,
                    const LarcOptions& options) = 0;

  // ---- Optimizer updates (flat f32 buffers, in place) ------------------------------------
  // The gradients come from `grad` (f32, or 16-bit unscaled as read), and the
  // new values are also written to `publish` where it has data: mixed
  // precision's unscale and publish folded into the update's one pass, with
  // the bits of the three passes.
  virtual void adam_update(std::int64_t n, float* p, const GradientSource& grad, float* m, float* v,
                           float* vmax, const AdamUpdate& args, const PublishedValues& publish) = 0;
  // buffer may be null (no momentum).
  virtual void sgd_update(std::int64_t n, float* p, const GradientSource& grad, float* buffer,
                          const SgdUpdate& args, const PublishedValues& publish) = 0;
  // One slice per parameter (host memory); ema holds one f32 per slice.
  virtual void novograd_update(float* p, const float* grad, float* m, float* ema,
                               const FlatSlice* slices, std::int64_t count,
                               const NovogradUpdate& args) = 0;
};

// The backend of `device`; throws std::invalid_argument for a device this
// build or machine cannot compute on, naming it.
Backend& backend_for(Device device);

// Implemented by each backend's own folder (link-time: the include
// dependencies still point one way).
Backend& cpu_backend();  // core/cpu
Backend& sim_backend();  // core/sim
// The back end of visible GPU `index`, made on first use (core/cuda/registry):
// librig_cuda's (loaded by the device probe), or the SIMT emulator's when
// cuda_emulator_requested(). Throws std::invalid_argument saying why not.
Backend& cuda_backend(int index);

}  // namespace rig::backend
