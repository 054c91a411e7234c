// cuDNN graphs as plain host data: the tensors (dimensions, strides, types,
// unique ids) and the operation nodes of one cuDNN operation graph, built
// from rig's kernel shapes (backend/kernel_args.hpp). No cuDNN in here: this
// is built in every configuration; dnn/cudnn_graphs.cpp, the one translation
// unit that includes cuDNN's headers, turns a Graph into cuDNN's backend
// descriptors, checks it against a device description and runs it.
//
// A Graph's key() names everything that makes its cuDNN plan: the cache of
// finalized plans (CudnnGraphs) is keyed by it.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "backend/kernel_args.hpp"

namespace rig::cuda::dnn {

// Element types of graph tensors (cudnnDataType_t's, those rig uses).
enum class DnnType : std::uint8_t { f32, f16, bf16, i32, i64, u8, boolean };
const char* dnn_type_name(DnnType type);

// One tensor of a graph. Strides are in elements. A virtual tensor lives
// inside the graph only (no pointer at execution); a by-value tensor is a
// scalar passed by host pointer at execution (epsilon, scales); one with a
// `value` is a constant of the graph, bound by CudnnGraphs itself. A scratch
// tensor is device memory that only the graph uses between its own kernels
// (cuDNN's attention backward wants some of its intermediates non-virtual):
// CudnnGraphs places it in the workspace, after cuDNN's own part, and the
// caller binds nothing for it.
struct TensorDesc {
  std::int64_t uid = 0;
  DnnType type = DnnType::f32;
  std::vector<std::int64_t> dims;
  std::vector<std::int64_t> strides;
  bool is_virtual = false;
  bool by_value = false;
  bool scratch = false;
  std::optional<float> value;  // by-value constants
};

// Operation kinds, each a cuDNN backend operation descriptor.
enum class OpKind : std::uint8_t {
  conv_forward,          // CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR
  conv_backward_data,    // ..._CONVOLUTION_BACKWARD_DATA_DESCRIPTOR
  conv_backward_filter,  // ..._CONVOLUTION_BACKWARD_FILTER_DESCRIPTOR
  pointwise,             // ..._POINTWISE_DESCRIPTOR
  reduction,             // ..._REDUCTION_DESCRIPTOR
  matmul,                // ..._MATMUL_DESCRIPTOR
  norm_forward,          // ..._NORM_FORWARD_DESCRIPTOR (batch norm, training)
  norm_backward,         // ..._NORM_BACKWARD_DESCRIPTOR (batch norm)
  rng,                   // ..._RNG_DESCRIPTOR (Bernoulli, Philox)
  reshape,               // ..._RESHAPE_DESCRIPTOR (a view: transposes, casts)
};

// The pointwise modes rig's graphs use (cudnnPointwiseMode_t's).
enum class PointwiseMode : std::uint8_t {
  add,
  sub,
  mul,
  div,
  exp,
  log,
  identity,  // a cast when the types differ
  cmp_ge,
  cmp_lt,
  logical_and,
  gen_index,      // y = the index along `axis`
  binary_select,  // y = t ? x : b
};

enum class ReduceMode : std::uint8_t { add, max };

// The role of an operand of a node (which attribute of the operation it is).
enum class Slot : std::uint8_t {
  x,  // conv x, pointwise x, reduction x, norm x
  w,  // conv weights
  y,  // conv y, pointwise y, reduction y, norm y, rng y
  dx,
  dw,
  dy,
  b,  // pointwise second input, matmul B
  t,  // pointwise condition (binary_select)
  a,  // matmul A
  c,  // matmul C
  scale,
  bias,
  epsilon,
  momentum,
  mean,
  inv_variance,
  running_mean_in,
  running_var_in,
  running_mean_out,
  running_var_out,
  dscale,
  dbias,
  seed,
  offset,
  // Matmul: the actual M / N / K per batch (i32 [B, 1, 1, 1]), for padding.
  m_override,
  n_override,
  k_override,
};
const char* slot_name(Slot slot);

struct Node {
  OpKind kind = OpKind::pointwise;
  std::vector<std::pair<Slot, std::int64_t>> operands;  // (role, tensor uid)
  // Convolutions: 2-d, cross-correlation.
  std::array<std::int64_t, 2> padding{0, 0}, stride{1, 1}, dilation{1, 1};
  // Convolutions: the result is added to beta times what the output holds
  // (1: a gradient accumulated where it is made; 0: overwritten).
  float beta = 0.0F;
  PointwiseMode pointwise = PointwiseMode::identity;
  std::int64_t axis = 0;  // gen_index
  // The type a pointwise op computes in (f32; i32 for gen_index, boolean
  // for comparisons and logic).
  DnnType math = DnnType::f32;
  ReduceMode reduce = ReduceMode::add;
  double probability = 0.0;  // rng: the Bernoulli probability of a 1 (keep)

  std::int64_t operand(Slot slot) const;  // 0 where the node has none
};

struct Graph {
  std::string name;
  // The type the operations compute in (convolutions, matmuls, reductions).
  DnnType compute = DnnType::f32;
  // f32 convolutions may use TF32 tensor cores (cuDNN's engines with the
  // TENSOR_CORE numerical note on f32 data). Off: rig's f32 is f32.
  bool allow_tf32 = false;
  // Engines with the NONDETERMINISTIC numerical note (atomics: results that
  // differ from run to run) may run. Off: rig's training is reproducible, and
  // a graph with no deterministic engine has no plan (SupportReport says so).
  bool allow_nondeterministic = false;
  // Running it again with the same bindings gives the same outputs: it reads
  // its inputs and writes its outputs whole (the convolutions; not batch norm,
  // which updates running statistics in place). Only such a graph may be
  // timed with several engines on the caller's data (CudnnGraphs::autotune_with).
  bool rerunnable = false;
  // Outputs the graph adds to (a convolution's beta 1), which make it not
  // rerunnable for that reason alone: it is timed with them bound to copies
  // in its workspace instead (CudnnGraphs::autotune_with).
  std::vector<std::int64_t> accumulated;
  std::vector<TensorDesc> tensors;
  std::vector<Node> nodes;

  const TensorDesc* tensor(std::int64_t uid) const;
  // Everything that makes the plan, as text: equal keys, equal graphs.
  std::string key() const;
};

// Contiguous strides of `dims` (row-major, last axis fastest).
std::vector<std::int64_t> packed_strides(const std::vector<std::int64_t>& dims);

// ---- The unique ids of the tensors the caller binds at execution -------------------

namespace uid {
// Convolutions.
inline constexpr std::int64_t x = 1, w = 2, y = 3, bias = 4, dx = 5, dw = 6, dy = 7, dbias = 8;
// Batch norm (scale = gamma, bias = beta; by value: epsilon, momentum).
inline constexpr std::int64_t bn_scale = 10, bn_bias = 11, bn_epsilon = 12, bn_momentum = 13,
                              bn_mean = 14, bn_inv_variance = 15, bn_running_mean_in = 16,
                              bn_running_var_in = 17, bn_running_mean_out = 18,
                              bn_running_var_out = 19, bn_dscale = 20, bn_dbias = 21;
// Attention. attn_scale, dropout_scale and neg_inf are by value (host f32);
// seq_len_q / seq_len_kv are i32 [B, 1, 1, 1]; seed and offset i64 [1,1,1,1];
// keep is rig's dropout keep mask as 0 / 1 of q's type (f16 / bf16) [B, H,
// Tq, Tk]: cuDNN 9.19 refuses a u8 operand there (its graph build throws
// "argument not found" through the C API); stats f32 [B, H, Tq, 1]
// (max + log sum of the softmax's exponentials, per row).
inline constexpr std::int64_t q = 30, k = 31, v = 32, o = 33, stats = 34, attn_scale = 35,
                              seq_len_q = 36, seq_len_kv = 37, seed = 38, offset = 39, keep = 40,
                              dropout_scale = 41, neg_inf = 42, d_o = 43, dq = 44, dk = 45, dv = 46,
                              causal_shift = 47;
// Attention backward: dropout_scale_inv (by value, f32) is 1 / dropout_scale,
// bound with dropout_scale; d_o is dOut, dq / dk / dv the gradients, strided
// as q / k / v (d_o as o). Graph-owned (bound by CudnnGraphs, not the caller):
// one (the constant 1), softmax_sum (scratch f32 [B, H, Tq, 1]: the rows'
// sum of dOut * out) and dq_accum (scratch f32 [B, H, Tq, D], the
// nondeterministic dq's atomic accumulator).
inline constexpr std::int64_t dropout_scale_inv = 48, one = 49, softmax_sum = 50, dq_accum = 51;
// Virtual tensors get ids from here up.
inline constexpr std::int64_t first_virtual = 1000;
}  // namespace uid

// ---- rig's graphs --------------------------------------------------------------------

// The element type of a convolution's x, w, y (and gradients); computed in
// f32. f16 / bf16 tensors are NCHW like f32.
enum class ConvType : std::uint8_t { f32, f16, bf16 };

// y = conv(x, w) (+ bias[c_out] when s.bias): x [n, c_in, h, w], w [c_out,
// c_in / groups, kh, kw], y [n, c_out, out_h, out_w], contiguous NCHW.
Graph conv2d_forward_graph(const backend::Conv2dShape& s, ConvType type = ConvType::f32);
// dx from dy and w (the data gradient, "dgrad"); with `accumulate`, added to
// what dx holds (beta 1; such a graph reads its output, so is not rerunnable).
Graph conv2d_backward_data_graph(const backend::Conv2dShape& s, ConvType type = ConvType::f32,
                                 bool accumulate = false);
// dw from x and dy (the filter gradient, "wgrad"); with `accumulate`, added
// to what dw holds (beta 1, not rerunnable, as the data gradient's).
Graph conv2d_backward_filter_graph(const backend::Conv2dShape& s, ConvType type = ConvType::f32,
                                   bool accumulate = false);
// The bias gradient (the sum of dy over n, out_h, out_w) has no graph: cuDNN
// 9.19 has no engine for a lone reduction (its heuristics return none for an
// H200), so it stays with rig's own reduction kernel.

// Batch norm in training over x [n, c, inner] (f32, contiguous; cuDNN sees
// [n, c, inner, 1]): y = (x - mean) * inv_variance * scale + bias with the
// batch's mean and biased variance; writes mean and inv_variance ([1, c, 1, 1],
// for the backward) and, when `running_stats`, running = (1 - momentum)
// running + momentum * batch, the variance unbiased (n inner / (n inner - 1)),
// as rig's batch_norm_prepare with unbias = count / (count - 1).
Graph batch_norm_forward_training_graph(const backend::BatchNormShape& s, bool running_stats);
// dx, dscale, dbias from x, dy, scale and the forward's mean and inv_variance
// (rig's batch_norm_backward with batch_stats).
Graph batch_norm_backward_graph(const backend::BatchNormShape& s);

// ---- Attention -----------------------------------------------------------------------

// Where attention dropout's keep bits come from (see docs in cudnn_graphs.hpp).
enum class AttentionDropout : std::uint8_t {
  none,
  philox,  // cuDNN's generator: Bernoulli(1 - p) from (seed, offset); its own bits
  mask,    // rig's keep mask (uid::keep, q's type, [B, H, Tq, Tk]): the CPU's bits;
           // forward only (attention_backward_graph rejects it)
};

// Scaled-dot-product attention on f16 / bf16 q, k, v, o ([B, H, T, D] with
// any HeadStrides, last axis contiguous), f32 softmax, as
// backend::attention_forward: out = dropout(softmax(q k^T scale, masked)) v.
struct AttentionGraphShape {
  std::int64_t b = 0, h = 0, tq = 0, tk = 0, d = 0;
  ConvType type = ConvType::bf16;  // f16 or bf16
  bool causal = false;             // query i sees keys j <= i + (tk - tq)
  bool padding = false;            // key (and query) padding from seq_len_q / seq_len_kv
  AttentionDropout dropout = AttentionDropout::none;
  float dropout_probability = 0.0F;  // philox: the probability of dropping
  // Forward: write the softmax statistics (uid::stats), which the backward
  // reads. Off for inference.
  bool stats = true;
  // Backward: let dq accumulate with atomics (cuDNN's faster default; other
  // bits on every run) instead of the deterministic dP-workspace kernels, and
  // let engines marked nondeterministic run.
  bool allow_nondeterministic = false;
  backend::HeadStrides q_strides, k_strides, v_strides, o_strides;
  // Contiguous [B, H, T, D] strides for all four.
  static AttentionGraphShape packed(std::int64_t b, std::int64_t h, std::int64_t tq,
                                    std::int64_t tk, std::int64_t d);
};

// The graph shape of a back end's fused attention call: its type, strides,
// causal mask, key padding (as seq_len_kv, every query row valid) and dropout
// (cuDNN's Philox), the statistics where a backward will run (a.stats set).
// Throws std::invalid_argument for what the graphs cannot express: a type
// other than f16 / bf16, dropout_p outside [0, 1), a causal mask with tq !=
// tk.
AttentionGraphShape fused_attention_shape(const backend::FusedAttention& a);

// out (uid::o) and, where s.stats, the softmax statistics (uid::stats) for
// the backward. Under padding both matmuls carry seq_len_q / seq_len_kv as
// their M / N / K overrides (as the backward's do).
Graph attention_forward_graph(const AttentionGraphShape& s);
// dq, dk, dv (uid::dq / dk / dv, q's type) from q, k, v, o, dout (uid::d_o)
// and the forward's stats, with the forward's mask and dropout (philox: the
// same seed and offset regenerate the same bits), as
// backend::attention_backward. The graph cuDNN's frontend builds for
// sdpa_backward (cuDNN 9.10+): softmax_sum = rowsum(dOut * out) *
// dropout_scale_inv; P = exp(scores - stats), masked; dv = (P keep
// dropout_scale)^T dOut; dS = P (dOut v^T keep - softmax_sum) dropout_scale
// attn_scale; dk = dS^T q; dq = dS k. Binds: q, k, v, o, d_o, stats,
// attn_scale, dq, dk, dv; neg_inf where causal or padding; seq_len_q /
// seq_len_kv where padding; seed, offset, dropout_scale and
// dropout_scale_inv where philox. f16 / bf16 only: cuDNN has no f32 SDPA
// backward. AttentionDropout::mask throws std::invalid_argument: cuDNN 9.14's
// fused backward either left dropout_scale_inv out of its softmax sum for a
// keep tensor (wrong dq / dk) or, with the scale folded into the mask, read
// out of bounds (H200); the GPU uses philox.
Graph attention_backward_graph(const AttentionGraphShape& s);

}  // namespace rig::cuda::dnn
