// The op API. Every op checks shapes, dtypes and devices and throws
// std::invalid_argument naming the op and the shapes involved, e.g.
// "matmul: [32,64] x [32,64]: inner dimensions 64 and 32 differ"; records
// autograd history when an input requires a gradient; and dispatches to the
// tensor's device (core/cpu now, core/cuda later). Floating ops compute in f32;
// f16/bf16 inputs are converted on load and results rounded on store.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include "rig/mixed_precision_step.hpp"
#include "rig/op_types.hpp"
#include "rig/random.hpp"
#include "rig/tensor.hpp"

namespace rig::backend {
class PendingRead;
}  // namespace rig::backend

namespace rig::ops {

// ---- Precision of matrix products -------------------------------------------
// The precision of the products of matmul, linear and attention on this
// thread: f32 unless a MatmulPrecisionScope says otherwise (the engine opens
// one for the run's `matmul_precision`). An op reads it when it runs, and its
// backward computes at the same precision.
MatmulPrecision matmul_precision();
class RIG_API MatmulPrecisionScope {
 public:
  explicit MatmulPrecisionScope(MatmulPrecision precision);
  ~MatmulPrecisionScope();
  MatmulPrecisionScope(const MatmulPrecisionScope&) = delete;
  MatmulPrecisionScope& operator=(const MatmulPrecisionScope&) = delete;

 private:
  MatmulPrecision previous_;
};
// Whether `device` computes bf16 products faster than f32 (the CPU: with
// bf16 dot-product instructions, AVX512_BF16 or AMX).
bool fast_bf16_products(Device device);

// ---- Linear algebra --------------------------------------------------------
// [..., M, K] x [..., K, N] -> [..., M, N]; leading (batch) axes broadcast.
// The flags use the transposed last two axes of an operand.
Tensor matmul(const Tensor& a, const Tensor& b, bool transpose_a = false, bool transpose_b = false);

using rig::Activation;  // none, relu, gelu, tanh, sigmoid (rig/op_types.hpp)
// activation(x W^T + bias): x [..., in], weight [out, in] (PyTorch's layout),
// bias [out] or undefined. One GEMM with the bias and activation fused.
Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias = {},
              Activation activation = Activation::none);
// dropout(linear(x, weight, bias, relu), p, key), bit for bit in f32, fused: the
// dropout runs in place on the output, and backward keeps only that output,
// since relu's derivative times the kept mask is (output > 0) / (1 - p): no
// separate relu output, no mask. activation must be relu (p > 0); p = 0 is
// linear itself. With `scaled` false the kept outputs are not divided by
// 1 - p: the layer that reads them takes input_scale 1 / (1 - p), which its
// products apply (their alpha) instead of a pass over this output, so a
// 16-bit layer's bias and relu stay in its product's epilogue.
struct OutputDropout {
  float p = 0.0F;
  RandomKey key;
  bool scaled = true;
};
// input_scale s: activation(s (x W^T) + bias), the gradients of x and W
// scaled by s in their products (an unscaled OutputDropout's 1 / (1 - p)).
Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias, Activation activation,
              const OutputDropout& dropout, float input_scale = 1.0F);
// A feed-forward block: linear(linear(x, w1, b1, relu, dropout), w2, b2,
// none, {}, keep_scale), with those results. Where the back end's products
// take a relu mask (Backend::gemm_relu_masks: the GPU's), 16-bit layers with
// biases and an unscaled dropout keep a bit per hidden element for backward
// and the products apply relu's derivative and sum b1's gradient in their
// epilogues: no pass over the hidden layer's gradient.
Tensor relu_feed_forward(const Tensor& x, const Tensor& w1, const Tensor& b1, const Tensor& w2,
                         const Tensor& b2, const OutputDropout& dropout, float keep_scale);

// ---- Elementwise (NumPy broadcasting) -------------------------------------
Tensor add(const Tensor& a, const Tensor& b);
// relu(add(a, b)): one op with the same results, which a back end that fuses
// the two (the CUDA one) runs in one pass (a ResNet block's output).
Tensor add_relu(const Tensor& a, const Tensor& b);
Tensor sub(const Tensor& a, const Tensor& b);
Tensor mul(const Tensor& a, const Tensor& b);
Tensor div(const Tensor& a, const Tensor& b);
Tensor add_scalar(const Tensor& a, float scalar);
Tensor mul_scalar(const Tensor& a, float scalar);
Tensor pow_scalar(const Tensor& a, float exponent);
Tensor neg(const Tensor& a);
Tensor exp(const Tensor& a);
Tensor log(const Tensor& a);
Tensor sqrt(const Tensor& a);
Tensor rsqrt(const Tensor& a);
Tensor relu(const Tensor& a);
Tensor gelu(const Tensor& a, bool tanh_approximation = false);  // erf form by default, as torch
Tensor tanh(const Tensor& a);
Tensor sigmoid(const Tensor& a);
Tensor activate(const Tensor& a, Activation activation);

// ---- Reductions -----------------------------------------------------------
Tensor sum(const Tensor& a);   // all elements -> scalar
Tensor mean(const Tensor& a);  // all elements -> scalar
Tensor sum(const Tensor& a, const Axes& axes, bool keepdim = false);
Tensor mean(const Tensor& a, const Axes& axes, bool keepdim = false);
// Largest value along `axis`; the gradient goes to the first maximal element.
Tensor max(const Tensor& a, std::int64_t axis, bool keepdim = false);

// ---- Softmax and normalisation ---------------------------------------------
// `mask` (u8, broadcastable to x): 1 = keep, 0 = excluded (probability 0). A
// row with nothing kept gives all zeros (softmax) / -inf (log_softmax).
Tensor softmax(const Tensor& x, std::int64_t axis = -1, const Tensor& mask = {});
Tensor log_softmax(const Tensor& x, std::int64_t axis = -1, const Tensor& mask = {});
// Over the last axis: (x - mean) / sqrt(var + eps) * gamma + beta (biased variance).
Tensor layer_norm(const Tensor& x, const Tensor& gamma, const Tensor& beta, float eps = 1e-5F);
// x [N, C, H, W] (or [N, C]). Training: normalise with batch statistics and
// update running_mean / running_var in place (unbiased variance, PyTorch's
// momentum convention). Eval: normalise with the running statistics.
Tensor batch_norm(const Tensor& x, const Tensor& gamma, const Tensor& beta,
                  const Tensor& running_mean, const Tensor& running_var, bool training,
                  float momentum = 0.1F, float eps = 1e-5F);
// relu(batch_norm(...)): one op with the same results, which a back end that
// fuses the two (the CUDA one) runs in two passes over x fewer each way.
Tensor batch_norm_relu(const Tensor& x, const Tensor& gamma, const Tensor& beta,
                       const Tensor& running_mean, const Tensor& running_var, bool training,
                       float momentum = 0.1F, float eps = 1e-5F);
// relu(batch_norm(x, ...) + residual), a residual block's end: add_relu's
// results, which the CUDA back end computes in one pass over x and residual
// (batch norm's output is never written) when residual has x's shape and dtype.
Tensor batch_norm_add_relu(const Tensor& x, const Tensor& residual, const Tensor& gamma,
                           const Tensor& beta, const Tensor& running_mean,
                           const Tensor& running_var, bool training, float momentum = 0.1F,
                           float eps = 1e-5F);
// One batch norm's parameters, running statistics and settings, as
// batch_norm takes them.
struct BatchNormParams {
  Tensor gamma, beta, running_mean, running_var;
  float momentum = 0.1F, eps = 1e-5F;
};
// relu(batch_norm(x, bn...) + batch_norm(x2, bn2...)), a residual block's end
// with a projection shortcut: batch_norm_add_relu of x with the shortcut's
// batch norm, the same results and running statistics, which the CUDA back
// end computes in one pass over x and x2 (neither batch norm's output is
// written, nor the shortcut's gradient) when x2 has x's shape and dtype.
Tensor batch_norm_add_batch_norm_relu(const Tensor& x, const BatchNormParams& bn, const Tensor& x2,
                                      const BatchNormParams& bn2, bool training);

// ---- Neural-network ops -----------------------------------------------------
// weight [V, D], ids (i32/i64) [...] -> [..., D]; ids out of range throw.
Tensor embedding(const Tensor& weight, const Tensor& ids);
// Zeroes each element with probability p (Philox stream `key`), scales the
// rest by 1 / (1 - p). p = 0 returns x.
Tensor dropout(const Tensor& x, float p, const RandomKey& key);
// residual + dropout(x, p, key), bit for bit, in one pass where the back end
// fuses it (Backend::fuses_dropout_add: a residual connection's add and its
// branch's dropout); x and residual of one shape and dtype, else composed.
// row_scale (optional): residual + dropout(x * row_scale, p, key), the
// product in the same pass where row_scale is [..., 1] against x's [..., D],
// of x's dtype and needs no gradient (a padding mask on the branch).
Tensor dropout_add(const Tensor& residual, const Tensor& x, float p, const RandomKey& key,
                   const Tensor& row_scale = {});
// x [N, Cin, H, W], weight [Cout, Cin / groups, kH, kW], bias [Cout] or undefined.
// channels_last: x [N, H, W, Cin] and y [N, H', W', Cout] (NHWC, the layout
// of cuDNN's 16-bit tensor-core kernels); the weight keeps PyTorch's layout.
struct Conv2dOptions {
  std::int64_t stride_h = 1, stride_w = 1;
  std::int64_t pad_h = 0, pad_w = 0;
  std::int64_t dilation_h = 1, dilation_w = 1;
  std::int64_t groups = 1;
  bool channels_last = false;
};
Tensor conv2d(const Tensor& x, const Tensor& weight, const Tensor& bias = {},
              const Conv2dOptions& options = {});
// channels_last: x [N, H, W, C] and y [N, H', W', C].
struct Pool2dOptions {
  std::int64_t kernel_h = 2, kernel_w = 2;
  std::int64_t stride_h = 2, stride_w = 2;
  std::int64_t pad_h = 0, pad_w = 0;
  bool channels_last = false;
};
Tensor max_pool2d(const Tensor& x, const Pool2dOptions& options);
// Padding counts in the divisor (PyTorch's count_include_pad=True).
Tensor avg_pool2d(const Tensor& x, const Pool2dOptions& options);
// [N, C, H, W] -> [N, C]; channels_last: [N, H, W, C] -> [N, C].
Tensor global_avg_pool2d(const Tensor& x, bool channels_last = false);

// softmax(q k^T * scale + mask) v over q [B, H, Tq, D], k and v [B, H, Tk, D].
// mask: u8 broadcastable to [B, H, Tq, Tk], 1 = may attend (e.g. key padding
// [B, 1, 1, Tk]). causal: query i attends to keys j <= i + (Tk - Tq), so a
// cached decode step (Tq = 1) sees the whole prefix. Dropout on the
// attention weights with probability dropout_p from stream `key`.
// scale defaults to 1 / sqrt(D).
struct AttentionOptions {
  Tensor mask;
  // Optional, with a mask: i32 / i64 [B], the number of valid keys of each
  // batch element, when `mask` is exactly the key-padding mask of these
  // lengths (key j seen where j < key_lengths[b]). A back end with fused
  // attention takes the lengths instead of the mask.
  Tensor key_lengths;
  bool causal = false;
  float dropout_p = 0.0F;
  RandomKey key;
  std::optional<float> scale;
};
Tensor scaled_dot_product_attention(const Tensor& q, const Tensor& k, const Tensor& v,
                                    const AttentionOptions& options = {});
// The same attention over operands packed side by side in one projection's
// output (one product for several projections): with q undefined, packed is
// [B, T, 3 H D], q, k and v of `heads` heads each (self-attention); with q
// [B, H, Tq, D], packed is [B, Tk, 2 H D], k and v (cross-attention). The
// kernels read the parts where they are, and the backward writes their
// gradients into one tensor of packed's shape. Returns [B, H, Tq, D].
Tensor scaled_dot_product_attention_packed(const Tensor& q, const Tensor& packed,
                                           std::int64_t heads,
                                           const AttentionOptions& options = {});

// ---- Shape and indexing -----------------------------------------------------
Tensor concat(const TensorList& tensors, std::int64_t axis);
// The rows of `parts` (the same trailing shape, dtype and device) as one
// tensor [sum of their rows, ...]: a view of their storage where they lie one
// after another in it, contiguous (weights declared one after another: one
// product for several projections), else concat's copy. The gradient is
// split back into the parts'.
Tensor joined_rows(const TensorList& parts);
std::vector<Tensor> split(const Tensor& x, const std::vector<std::int64_t>& sizes,
                          std::int64_t axis);
// out[i][j] = x[i][index[i][j]] along `axis` (torch.gather); index i64.
Tensor gather(const Tensor& x, std::int64_t axis, const Tensor& index);
// The slices of x at `index` (i64 [K]) along `axis` (torch.index_select).
Tensor index_select(const Tensor& x, std::int64_t axis, const Tensor& index);
// condition (u8) ? a : b, broadcasting all three.
Tensor where(const Tensor& condition, const Tensor& a, const Tensor& b);
// x with `value` where mask (u8, broadcastable to x) is 1.
Tensor masked_fill(const Tensor& x, const Tensor& mask, float value);

// ---- Not differentiable -------------------------------------------------------
Tensor argmax(const Tensor& x, std::int64_t axis = -1);  // i64, axis removed
// The k largest along `axis`, sorted descending (ties: lower index first): values, i64 indices.
std::pair<Tensor, Tensor> topk(const Tensor& x, std::int64_t k, std::int64_t axis = -1);
// Comparisons giving u8 (broadcasting; mixed dtypes compare as i64 when both
// are integers, else as f32).
Tensor equal(const Tensor& a, const Tensor& b);
Tensor less(const Tensor& a, const Tensor& b);
Tensor not_equal_scalar(const Tensor& a, float scalar);

// ---- Losses --------------------------------------------------------------------
// Mean squared error over all elements -> scalar.
Tensor mse_loss(const Tensor& prediction, const Tensor& target);
// Softmax cross-entropy of logits [N, C] against labels (i64 [N]) -> scalar,
// averaged over the N samples. label_smoothing follows torch: the target
// distribution is (1 - s) one-hot + s / C uniform.
Tensor cross_entropy(const Tensor& logits, const Tensor& labels, float label_smoothing = 0.0F);
// OpenSeq2Seq's PaddedCrossEntropyLossWithSmoothing: logits [B, T, V], labels
// [B, T], weights [B, T] (1 for real tokens, 0 for padding). The target is
// confidence = 1 - s on the label and s / (V - 1) on every other token; the
// entropy of that distribution is subtracted (so a perfect model scores 0);
// the loss is sum(weights * xent) / sum(weights).
Tensor padded_cross_entropy(const Tensor& logits, const Tensor& labels, const Tensor& weights,
                            float label_smoothing = 0.0F);

// ---- Optimizer updates (in place, never recorded) ------------------------------
// One fused Adam / AdamW / AMSGrad step over flat f32 buffers of equal size
// (the parameter store's values and grads, the optimizer's moments); the
// update rule is AdamUpdate's (rig/op_types.hpp). max_exp_avg_sq defined: AMSGrad.
// `mixed` folds mixed precision's unscale and publish into the same pass
// (rig/mixed_precision_step.hpp); grads is then not read where it has grads16.
using rig::AdamUpdate;
using rig::FlatSlice;
using rig::GradientStats;
using rig::LarcOptions;
using rig::NovogradUpdate;
using rig::SgdUpdate;
void adam_update(Tensor& values, const Tensor& grads, Tensor& exp_avg, Tensor& exp_avg_sq,
                 Tensor& max_exp_avg_sq, const AdamUpdate& update,
                 const MixedPrecisionStep& mixed = {});

// torch.optim.SGD's and NovoGrad's steps over the flat f32 buffers
// (rig/op_types.hpp); momentum_buffer undefined: no momentum. NovoGrad's
// slices are the parameters of the flat buffers, grads_ema one f32 each.
void sgd_update(Tensor& values, const Tensor& grads, Tensor& momentum_buffer,
                const SgdUpdate& update, const MixedPrecisionStep& mixed = {});
void novograd_update(Tensor& values, const Tensor& grads, Tensor& momentum, Tensor& grads_ema,
                     const std::vector<FlatSlice>& slices, const NovogradUpdate& update);

// The global norm and max |g| of a flat buffer (rig/op_types.hpp), and
// whether `loss` (an f32 scalar on the same device, optional) is finite: one
// trip to the device per training step for the overflow check and clipping.
// grads is f32, or the model's f16 / bf16 gradients, each read as f32 times
// `scale` (mixed precision's 1 / loss scale): the statistics of the f32
// master gradients unscaling would write, without writing them.
GradientStats gradient_stats(const Tensor& grads, const Tensor& loss = {}, float scale = 1.0F);
// The same statistics queued into record `slot` of `records` (i64 [slots *
// kGradientStatsWords], contiguous, on grads' device) without reading the
// device; read_gradient_stats brings back records [0, count) in one read.
void gradient_stats_into(const Tensor& grads, const Tensor& loss, Tensor& records,
                         std::int64_t slot, float scale = 1.0F);
std::vector<GradientStats> read_gradient_stats(const Tensor& records, std::int64_t count);
// grads (flat f32) *= max_norm / (norm + 1e-6) when the norm of record `slot`
// of `records` > max_norm: clipping by the global norm on the device, without
// reading it (the same bits as scale_ by the factor the host would compute).
void clip_by_recorded_norm_(Tensor& grads, const Tensor& records, std::int64_t slot,
                            double max_norm);

// A read of `t` (f32, contiguous) queued now, behind the work queued so far,
// and collected later: values() waits for this copy alone, not for work
// queued after read_later (on the CPU and the sim device it is read at once).
// The training loop reads its ranks' per-step agreement this way, a step late.
class LaterRead {
 public:
  LaterRead();
  ~LaterRead();
  LaterRead(LaterRead&& other) noexcept;
  LaterRead& operator=(LaterRead&& other) noexcept;
  bool pending() const { return read_ != nullptr; }
  // The values; the read is then no longer pending.
  std::vector<float> values();

 private:
  friend LaterRead read_later(const Tensor& t);
  std::unique_ptr<backend::PendingRead> read_;
  std::int64_t numel_ = 0;
};
LaterRead read_later(const Tensor& t);

// Copies to `device` made between begin_uploads and end_uploads (tensors
// made there with Tensor::to) may overlap the kernels queued after
// begin_uploads: a GPU's copy stream. use_uploads(device, ticket) makes the
// work queued after it wait for them; call it before those tensors are read
// or freed. Plain copies where the device has one queue.
void begin_uploads(Device device);
std::uint64_t end_uploads(Device device);
void use_uploads(Device device, std::uint64_t ticket);
// t *= factor for a contiguous f32 tensor (gradient clipping).
void scale_(Tensor& t, float factor);
// t += other for contiguous f32 tensors of one size (a parameter server's sum
// of its workers' gradients): the bits of ops::add, without a new tensor.
void add_(Tensor& t, const Tensor& other);
// LARC's per-parameter trust ratios applied to grads (rig/op_types.hpp), each
// slice one parameter of the flat values / grads buffers.
void larc_(Tensor& grads, const Tensor& values, const std::vector<FlatSlice>& slices,
           const LarcOptions& options);

}  // namespace rig::ops
