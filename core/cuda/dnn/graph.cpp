#include "cuda/dnn/graph.hpp"

#include <sstream>
#include <stdexcept>

namespace rig::cuda::dnn {

const char* dnn_type_name(DnnType type) {
  switch (type) {
    case DnnType::f32:
      return "f32";
    case DnnType::f16:
      return "f16";
    case DnnType::bf16:
      return "bf16";
    case DnnType::i32:
      return "i32";
    case DnnType::i64:
      return "i64";
    case DnnType::u8:
      return "u8";
    case DnnType::boolean:
      return "bool";
  }
  return "?";
}

const char* slot_name(Slot slot) {
  static constexpr const char* names[] = {
      "x",     "w",       "y",       "dx",     "dw",      "dy",      "b",
      "t",     "a",       "c",       "scale",  "bias",    "epsilon", "momentum",
      "mean",  "inv_var", "rmean_i", "rvar_i", "rmean_o", "rvar_o",  "dscale",
      "dbias", "seed",    "offset",  "m_over", "n_over",  "k_over"};
  return names[static_cast<int>(slot)];
}

std::int64_t Node::operand(Slot slot) const {
  for (const auto& [role, id] : operands) {
    if (role == slot) return id;
  }
  return 0;
}

const TensorDesc* Graph::tensor(std::int64_t id) const {
  for (const TensorDesc& t : tensors) {
    if (t.uid == id) return &t;
  }
  return nullptr;
}

std::string Graph::key() const {
  std::ostringstream out;
  out << name << " compute " << dnn_type_name(compute) << (allow_tf32 ? " tf32" : "")
      << (allow_nondeterministic ? " nondeterministic" : "") << ";";
  for (const TensorDesc& t : tensors) {
    out << " t" << t.uid << ":" << dnn_type_name(t.type) << (t.is_virtual ? "v" : "")
        << (t.by_value ? "s" : "") << (t.scratch ? "w" : "");
    if (t.value) out << "=" << *t.value;
    out << "[";
    for (std::int64_t d : t.dims) out << d << ",";
    out << "/";
    for (std::int64_t s : t.strides) out << s << ",";
    out << "]";
  }
  out << ";";
  for (const Node& n : nodes) {
    out << " op" << static_cast<int>(n.kind) << "(";
    for (const auto& [slot, id] : n.operands) out << slot_name(slot) << "=" << id << ",";
    switch (n.kind) {
      case OpKind::conv_forward:
      case OpKind::conv_backward_data:
      case OpKind::conv_backward_filter:
        out << "p" << n.padding[0] << "," << n.padding[1] << " s" << n.stride[0] << ","
            << n.stride[1] << " d" << n.dilation[0] << "," << n.dilation[1];
        if (n.beta != 0.0F) out << " beta" << n.beta;
        break;
      case OpKind::pointwise:
        out << "pw" << static_cast<int>(n.pointwise) << " axis" << n.axis << " "
            << dnn_type_name(n.math);
        break;
      case OpKind::reduction:
        out << "red" << static_cast<int>(n.reduce);
        break;
      case OpKind::rng:
        out << "p" << n.probability;
        break;
      default:
        break;
    }
    out << ")";
  }
  return out.str();
}

std::vector<std::int64_t> packed_strides(const std::vector<std::int64_t>& dims) {
  std::vector<std::int64_t> strides(dims.size(), 1);
  std::int64_t stride = 1;
  for (std::size_t i = dims.size(); i-- > 0;) {
    strides[i] = stride;
    stride *= dims[i];
  }
  return strides;
}

namespace {

DnnType dnn_type(ConvType type) {
  switch (type) {
    case ConvType::f32:
      return DnnType::f32;
    case ConvType::f16:
      return DnnType::f16;
    case ConvType::bf16:
      return DnnType::bf16;
  }
  return DnnType::f32;
}

// Adds tensors and nodes, numbering virtual tensors from uid::first_virtual.
class Builder {
 public:
  explicit Builder(std::string name) { graph_.name = std::move(name); }

  std::int64_t tensor(std::int64_t id, DnnType type, std::vector<std::int64_t> dims,
                      std::vector<std::int64_t> strides = {}) {
    if (strides.empty()) strides = packed_strides(dims);
    graph_.tensors.push_back(
        {id, type, std::move(dims), std::move(strides), false, false, false, {}});
    return id;
  }
  std::int64_t scalar(std::int64_t id, DnnType type = DnnType::f32) {
    graph_.tensors.push_back({id, type, {1, 1, 1, 1}, {1, 1, 1, 1}, false, true, false, {}});
    return id;
  }
  // A by-value constant of the graph (bound by CudnnGraphs).
  std::int64_t constant(std::int64_t id, float value) {
    scalar(id);
    graph_.tensors.back().value = value;
    return id;
  }
  // Device memory of the graph's own (see TensorDesc::scratch).
  std::int64_t scratch(std::int64_t id, DnnType type, std::vector<std::int64_t> dims) {
    tensor(id, type, std::move(dims));
    graph_.tensors.back().scratch = true;
    return id;
  }
  std::int64_t virtual_tensor(DnnType type, std::vector<std::int64_t> dims,
                              std::vector<std::int64_t> strides = {}) {
    if (strides.empty()) strides = packed_strides(dims);
    const std::int64_t id = next_virtual_++;
    graph_.tensors.push_back(
        {id, type, std::move(dims), std::move(strides), true, false, false, {}});
    return id;
  }
  const std::vector<std::int64_t>& dims(std::int64_t id) const { return graph_.tensor(id)->dims; }

  Node& node(OpKind kind, std::vector<std::pair<Slot, std::int64_t>> operands) {
    Node n;
    n.kind = kind;
    n.operands = std::move(operands);
    graph_.nodes.push_back(std::move(n));
    return graph_.nodes.back();
  }
  // y = mode(x, b) (b, t optional) into a new virtual tensor of `type` shaped
  // like `shape_of` (x when 0).
  std::int64_t pointwise(PointwiseMode mode, std::int64_t x, std::int64_t b = 0,
                         DnnType type = DnnType::f32, DnnType math = DnnType::f32,
                         std::int64_t t = 0, std::int64_t out = 0) {
    if (out == 0) out = virtual_tensor(type, dims(x));
    std::vector<std::pair<Slot, std::int64_t>> operands{{Slot::x, x}};
    if (b != 0) operands.emplace_back(Slot::b, b);
    if (t != 0) operands.emplace_back(Slot::t, t);
    operands.emplace_back(Slot::y, out);
    Node& n = node(OpKind::pointwise, std::move(operands));
    n.pointwise = mode;
    n.math = math;
    return out;
  }
  std::int64_t gen_index(std::int64_t like, std::int64_t axis) {
    const std::int64_t out = virtual_tensor(DnnType::i32, dims(like));
    Node& n = node(OpKind::pointwise, {{Slot::x, like}, {Slot::y, out}});
    n.pointwise = PointwiseMode::gen_index;
    n.axis = axis;
    n.math = DnnType::i32;
    return out;
  }
  // Reduces the last axis of x to 1.
  std::int64_t reduce_last(ReduceMode mode, std::int64_t x, std::int64_t out = 0) {
    if (out == 0) {
      std::vector<std::int64_t> d = dims(x);
      d.back() = 1;
      out = virtual_tensor(DnnType::f32, d);
    }
    Node& n = node(OpKind::reduction, {{Slot::x, x}, {Slot::y, out}});
    n.reduce = mode;
    return out;
  }
  std::int64_t matmul(std::int64_t a, std::int64_t b, std::int64_t c) {
    node(OpKind::matmul, {{Slot::a, a}, {Slot::b, b}, {Slot::c, c}});
    return c;
  }
  // Attaches the per-batch M / N / K (0: none) to the last matmul.
  void override_matmul(std::int64_t m, std::int64_t n, std::int64_t k) {
    Node& mm = graph_.nodes.back();
    if (m != 0) mm.operands.emplace_back(Slot::m_override, m);
    if (n != 0) mm.operands.emplace_back(Slot::n_override, n);
    if (k != 0) mm.operands.emplace_back(Slot::k_override, k);
  }
  // y = x seen with other dims / strides (and type).
  std::int64_t reshape(std::int64_t x, DnnType type, std::vector<std::int64_t> dims,
                       std::vector<std::int64_t> strides) {
    const std::int64_t out = virtual_tensor(type, std::move(dims), std::move(strides));
    node(OpKind::reshape, {{Slot::x, x}, {Slot::y, out}});
    return out;
  }

  Graph take() { return std::move(graph_); }
  Graph& graph() { return graph_; }

 private:
  Graph graph_;
  std::int64_t next_virtual_ = uid::first_virtual;
};

void check_conv(const backend::Conv2dShape& s) {
  if (s.n <= 0 || s.c_in <= 0 || s.c_out <= 0 || s.groups <= 0 || s.c_in % s.groups != 0 ||
      s.c_out % s.groups != 0 || s.out_h <= 0 || s.out_w <= 0) {
    throw std::invalid_argument("cuDNN convolution: bad Conv2dShape");
  }
}

std::vector<std::int64_t> x_dims(const backend::Conv2dShape& s) {
  return {s.n, s.c_in, s.h, s.w};
}
std::vector<std::int64_t> w_dims(const backend::Conv2dShape& s) {
  return {s.c_out, s.c_in / s.groups, s.kernel_h, s.kernel_w};
}
std::vector<std::int64_t> y_dims(const backend::Conv2dShape& s) {
  return {s.n, s.c_out, s.out_h, s.out_w};
}

// The strides of a [n, c, h, w] operand (cuDNN's dims are always in that
// order): packed NCHW, or NHWC with Conv2dShape::channels_last.
std::vector<std::int64_t> conv_strides(const backend::Conv2dShape& s,
                                       const std::vector<std::int64_t>& dims) {
  if (!s.channels_last) return packed_strides(dims);
  const std::int64_t c = dims[1], h = dims[2], w = dims[3];
  return {h * w * c, 1, w * c, c};
}

void set_conv(Node& n, const backend::Conv2dShape& s) {
  n.padding = {s.pad_h, s.pad_w};
  n.stride = {s.stride_h, s.stride_w};
  n.dilation = {s.dilation_h, s.dilation_w};
}

}  // namespace

Graph conv2d_forward_graph(const backend::Conv2dShape& s, ConvType type) {
  check_conv(s);
  const DnnType io = dnn_type(type);
  Builder g("conv2d_forward");
  g.tensor(uid::x, io, x_dims(s), conv_strides(s, x_dims(s)));
  g.tensor(uid::w, io, w_dims(s), conv_strides(s, w_dims(s)));
  if (s.bias) {
    const std::int64_t conv = g.virtual_tensor(DnnType::f32, y_dims(s), conv_strides(s, y_dims(s)));
    set_conv(g.node(OpKind::conv_forward, {{Slot::x, uid::x}, {Slot::w, uid::w}, {Slot::y, conv}}),
             s);
    g.tensor(uid::bias, io, {1, s.c_out, 1, 1});
    g.tensor(uid::y, io, y_dims(s), conv_strides(s, y_dims(s)));
    g.pointwise(PointwiseMode::add, conv, uid::bias, io, DnnType::f32, 0, uid::y);
  } else {
    g.tensor(uid::y, io, y_dims(s), conv_strides(s, y_dims(s)));
    set_conv(
        g.node(OpKind::conv_forward, {{Slot::x, uid::x}, {Slot::w, uid::w}, {Slot::y, uid::y}}), s);
  }
  g.graph().allow_tf32 = s.allow_tf32;
  g.graph().rerunnable = true;
  return g.take();
}

Graph conv2d_backward_data_graph(const backend::Conv2dShape& s, ConvType type, bool accumulate) {
  check_conv(s);
  const DnnType io = dnn_type(type);
  Builder g(accumulate ? "conv2d_backward_data_accumulating" : "conv2d_backward_data");
  g.tensor(uid::dy, io, y_dims(s), conv_strides(s, y_dims(s)));
  g.tensor(uid::w, io, w_dims(s), conv_strides(s, w_dims(s)));
  g.tensor(uid::dx, io, x_dims(s), conv_strides(s, x_dims(s)));
  Node& dgrad = g.node(OpKind::conv_backward_data,
                       {{Slot::dy, uid::dy}, {Slot::w, uid::w}, {Slot::dx, uid::dx}});
  set_conv(dgrad, s);
  dgrad.beta = accumulate ? 1.0F : 0.0F;
  g.graph().allow_tf32 = s.allow_tf32;
  g.graph().rerunnable = !accumulate;
  if (accumulate) g.graph().accumulated = {uid::dx};
  return g.take();
}

Graph conv2d_backward_filter_graph(const backend::Conv2dShape& s, ConvType type, bool accumulate) {
  check_conv(s);
  const DnnType io = dnn_type(type);
  Builder g(accumulate ? "conv2d_backward_filter_accumulating" : "conv2d_backward_filter");
  g.tensor(uid::x, io, x_dims(s), conv_strides(s, x_dims(s)));
  g.tensor(uid::dy, io, y_dims(s), conv_strides(s, y_dims(s)));
  g.tensor(uid::dw, io, w_dims(s), conv_strides(s, w_dims(s)));
  Node& wgrad = g.node(OpKind::conv_backward_filter,
                       {{Slot::x, uid::x}, {Slot::dy, uid::dy}, {Slot::dw, uid::dw}});
  set_conv(wgrad, s);
  wgrad.beta = accumulate ? 1.0F : 0.0F;
  g.graph().allow_tf32 = s.allow_tf32;
  g.graph().rerunnable = !accumulate;
  if (accumulate) g.graph().accumulated = {uid::dw};
  return g.take();
}

Graph batch_norm_forward_training_graph(const backend::BatchNormShape& s, bool running_stats) {
  if (s.n <= 0 || s.c <= 0 || s.inner <= 0) throw std::invalid_argument("bad BatchNormShape");
  Builder g(running_stats ? "batch_norm_forward_training_running" : "batch_norm_forward_training");
  const std::vector<std::int64_t> data{s.n, s.c, s.inner, 1};
  const std::vector<std::int64_t> channel{1, s.c, 1, 1};
  g.tensor(uid::x, DnnType::f32, data);
  g.tensor(uid::bn_scale, DnnType::f32, channel);
  g.tensor(uid::bn_bias, DnnType::f32, channel);
  g.scalar(uid::bn_epsilon);
  g.tensor(uid::y, DnnType::f32, data);
  g.tensor(uid::bn_mean, DnnType::f32, channel);
  g.tensor(uid::bn_inv_variance, DnnType::f32, channel);
  std::vector<std::pair<Slot, std::int64_t>> operands{{Slot::x, uid::x},
                                                      {Slot::scale, uid::bn_scale},
                                                      {Slot::bias, uid::bn_bias},
                                                      {Slot::epsilon, uid::bn_epsilon},
                                                      {Slot::y, uid::y},
                                                      {Slot::mean, uid::bn_mean},
                                                      {Slot::inv_variance, uid::bn_inv_variance}};
  if (running_stats) {
    g.scalar(uid::bn_momentum);
    g.tensor(uid::bn_running_mean_in, DnnType::f32, channel);
    g.tensor(uid::bn_running_var_in, DnnType::f32, channel);
    g.tensor(uid::bn_running_mean_out, DnnType::f32, channel);
    g.tensor(uid::bn_running_var_out, DnnType::f32, channel);
    operands.insert(operands.end(), {{Slot::momentum, uid::bn_momentum},
                                     {Slot::running_mean_in, uid::bn_running_mean_in},
                                     {Slot::running_var_in, uid::bn_running_var_in},
                                     {Slot::running_mean_out, uid::bn_running_mean_out},
                                     {Slot::running_var_out, uid::bn_running_var_out}});
  }
  g.node(OpKind::norm_forward, std::move(operands));
  return g.take();
}

Graph batch_norm_backward_graph(const backend::BatchNormShape& s) {
  if (s.n <= 0 || s.c <= 0 || s.inner <= 0) throw std::invalid_argument("bad BatchNormShape");
  Builder g("batch_norm_backward");
  const std::vector<std::int64_t> data{s.n, s.c, s.inner, 1};
  const std::vector<std::int64_t> channel{1, s.c, 1, 1};
  g.tensor(uid::x, DnnType::f32, data);
  g.tensor(uid::dy, DnnType::f32, data);
  g.tensor(uid::bn_scale, DnnType::f32, channel);
  g.tensor(uid::bn_mean, DnnType::f32, channel);
  g.tensor(uid::bn_inv_variance, DnnType::f32, channel);
  g.tensor(uid::dx, DnnType::f32, data);
  g.tensor(uid::bn_dscale, DnnType::f32, channel);
  g.tensor(uid::bn_dbias, DnnType::f32, channel);
  g.node(OpKind::norm_backward, {{Slot::x, uid::x},
                                 {Slot::dy, uid::dy},
                                 {Slot::scale, uid::bn_scale},
                                 {Slot::mean, uid::bn_mean},
                                 {Slot::inv_variance, uid::bn_inv_variance},
                                 {Slot::dx, uid::dx},
                                 {Slot::dscale, uid::bn_dscale},
                                 {Slot::dbias, uid::bn_dbias}});
  return g.take();
}

// ---- Attention -----------------------------------------------------------------------

AttentionGraphShape AttentionGraphShape::packed(std::int64_t b, std::int64_t h, std::int64_t tq,
                                                std::int64_t tk, std::int64_t d) {
  AttentionGraphShape s;
  s.b = b;
  s.h = h;
  s.tq = tq;
  s.tk = tk;
  s.d = d;
  s.q_strides = {h * tq * d, tq * d, d};
  s.o_strides = s.q_strides;
  s.k_strides = {h * tk * d, tk * d, d};
  s.v_strides = s.k_strides;
  return s;
}

namespace {

void check_attention(const AttentionGraphShape& s) {
  if (s.b <= 0 || s.h <= 0 || s.tq <= 0 || s.tk <= 0 || s.d <= 0) {
    throw std::invalid_argument("cuDNN attention: bad shape");
  }
  if (s.type == ConvType::f32) {
    throw std::invalid_argument("cuDNN attention: q, k, v must be f16 or bf16");
  }
  if (s.causal && s.tq != s.tk) {
    throw std::invalid_argument("cuDNN attention: causal masks need tq == tk");
  }
}

std::vector<std::int64_t> head_strides(const backend::HeadStrides& s) {
  return {s.batch, s.head, s.time, 1};
}
// The same operand seen as [B, H, D, T] (its transpose).
std::vector<std::int64_t> transposed(const backend::HeadStrides& s) {
  return {s.batch, s.head, 1, s.time};
}

// Declares what the masks of `s` read: neg_inf, seq_len_q and seq_len_kv.
void declare_mask_inputs(Builder& g, const AttentionGraphShape& s) {
  if (s.padding || s.causal) g.scalar(uid::neg_inf);
  if (s.padding) {
    g.tensor(uid::seq_len_q, DnnType::i32, {s.b, 1, 1, 1});
    g.tensor(uid::seq_len_kv, DnnType::i32, {s.b, 1, 1, 1});
  }
}

// Sets the entries of scores [B, H, Tq, Tk] that the padding and causal masks
// hide to neg_inf.
std::int64_t apply_masks(Builder& g, const AttentionGraphShape& s, std::int64_t out) {
  if (s.padding) {
    const std::int64_t row = g.gen_index(out, 2);
    const std::int64_t col = g.gen_index(out, 3);
    const std::int64_t row_ok =
        g.pointwise(PointwiseMode::cmp_lt, row, uid::seq_len_q, DnnType::boolean, DnnType::boolean);
    const std::int64_t col_ok = g.pointwise(PointwiseMode::cmp_lt, col, uid::seq_len_kv,
                                            DnnType::boolean, DnnType::boolean);
    const std::int64_t ok =
        g.pointwise(PointwiseMode::logical_and, row_ok, col_ok, DnnType::boolean, DnnType::boolean);
    out = g.pointwise(PointwiseMode::binary_select, out, uid::neg_inf, DnnType::f32, DnnType::f32,
                      ok);
  }
  if (s.causal) {
    const std::int64_t row = g.gen_index(out, 2);
    const std::int64_t col = g.gen_index(out, 3);
    const std::int64_t ok =
        g.pointwise(PointwiseMode::cmp_ge, row, col, DnnType::boolean, DnnType::boolean);
    out = g.pointwise(PointwiseMode::binary_select, out, uid::neg_inf, DnnType::f32, DnnType::f32,
                      ok);
  }
  return out;
}

// The masked, scaled scores s = q k^T scale (masked to -inf) of [B, H, Tq, Tk].
// Under padding the matmul carries M = seq_len_q and N = seq_len_kv as its
// overrides, as cudnn-frontend's sdpa does: cuDNN's fused forward takes the
// sequence lengths from there. Without them (cuDNN 9.14 on an H200) it ran
// the GEN_INDEX / CMP_LT / BINARY_SELECT padding mask as if every key were
// valid: the padded batch's output was that of all Tk keys.
std::int64_t masked_scores(Builder& g, const AttentionGraphShape& s) {
  const std::vector<std::int64_t> scores{s.b, s.h, s.tq, s.tk};
  declare_mask_inputs(g, s);
  // k is declared [B, H, D, Tk] (transposed strides): the matmul's B.
  const std::int64_t raw = g.virtual_tensor(DnnType::f32, scores);
  g.matmul(uid::q, uid::k, raw);
  if (s.padding) g.override_matmul(uid::seq_len_q, uid::seq_len_kv, 0);
  g.scalar(uid::attn_scale);
  const std::int64_t out = g.pointwise(PointwiseMode::mul, raw, uid::attn_scale);
  return apply_masks(g, s, out);
}

// Applies dropout to the probabilities p: p * keep * dropout_scale.
std::int64_t apply_dropout(Builder& g, const AttentionGraphShape& s, std::int64_t p) {
  if (s.dropout == AttentionDropout::none) return p;
  std::int64_t keep = uid::keep;
  if (s.dropout == AttentionDropout::philox) {
    g.tensor(uid::seed, DnnType::i64, {1, 1, 1, 1});
    g.tensor(uid::offset, DnnType::i64, {1, 1, 1, 1});
    keep = g.virtual_tensor(DnnType::f32, g.dims(p));
    Node& n = g.node(OpKind::rng,
                     {{Slot::y, keep}, {Slot::seed, uid::seed}, {Slot::offset, uid::offset}});
    n.probability = 1.0 - static_cast<double>(s.dropout_probability);
  } else if (g.graph().tensor(uid::keep) == nullptr) {
    g.tensor(uid::keep, dnn_type(s.type), g.dims(p));
  }
  if (g.graph().tensor(uid::dropout_scale) == nullptr) g.scalar(uid::dropout_scale);
  const std::int64_t kept = g.pointwise(PointwiseMode::mul, p, keep);
  return g.pointwise(PointwiseMode::mul, kept, uid::dropout_scale);
}

void declare_qkv(Builder& g, const AttentionGraphShape& s) {
  const DnnType io = dnn_type(s.type);
  g.tensor(uid::q, io, {s.b, s.h, s.tq, s.d}, head_strides(s.q_strides));
  g.tensor(uid::k, io, {s.b, s.h, s.d, s.tk}, transposed(s.k_strides));
  g.tensor(uid::v, io, {s.b, s.h, s.tk, s.d}, head_strides(s.v_strides));
}

}  // namespace

AttentionGraphShape fused_attention_shape(const backend::FusedAttention& a) {
  AttentionGraphShape s;
  s.b = a.b;
  s.h = a.h;
  s.tq = a.tq;
  s.tk = a.tk;
  s.d = a.d;
  switch (a.type) {
    case DType::bf16:
      s.type = ConvType::bf16;
      break;
    case DType::f16:
      s.type = ConvType::f16;
      break;
    default:
      throw std::invalid_argument("fused attention: q, k, v must be f16 or bf16");
  }
  if (!(a.dropout_p >= 0.0F && a.dropout_p < 1.0F)) {
    throw std::invalid_argument("fused attention: dropout_p must be in [0, 1)");
  }
  s.causal = a.causal;
  s.padding = a.key_lengths != nullptr;
  s.dropout = a.dropout_p > 0.0F ? AttentionDropout::philox : AttentionDropout::none;
  s.dropout_probability = a.dropout_p;
  s.stats = a.stats != nullptr;
  s.q_strides = a.qs;
  s.k_strides = a.ks;
  s.v_strides = a.vs;
  s.o_strides = a.os;
  check_attention(s);
  return s;
}

Graph attention_forward_graph(const AttentionGraphShape& s) {
  check_attention(s);
  const DnnType io = dnn_type(s.type);
  Builder g("attention_forward");
  declare_qkv(g, s);
  g.tensor(uid::o, io, {s.b, s.h, s.tq, s.d}, head_strides(s.o_strides));
  if (s.stats) g.tensor(uid::stats, DnnType::f32, {s.b, s.h, s.tq, 1});
  const std::int64_t scores = masked_scores(g, s);
  // Softmax with its statistics: stats = max + log(sum exp(s - max)).
  const std::int64_t max = g.reduce_last(ReduceMode::max, scores);
  const std::int64_t shifted = g.pointwise(PointwiseMode::sub, scores, max);
  const std::int64_t e = g.pointwise(PointwiseMode::exp, shifted);
  const std::int64_t sum = g.reduce_last(ReduceMode::add, e);
  if (s.stats) {
    const std::int64_t log_sum = g.pointwise(PointwiseMode::log, sum);
    g.pointwise(PointwiseMode::add, max, log_sum, DnnType::f32, DnnType::f32, 0, uid::stats);
  }
  const std::int64_t p = g.pointwise(PointwiseMode::div, e, sum);
  const std::int64_t dropped = apply_dropout(g, s, p);
  const std::int64_t p_io = g.pointwise(PointwiseMode::identity, dropped, 0, io);
  g.matmul(p_io, uid::v, uid::o);
  if (s.padding) g.override_matmul(uid::seq_len_q, 0, uid::seq_len_kv);
  return g.take();
}

Graph attention_backward_graph(const AttentionGraphShape& s) {
  check_attention(s);
  if (s.dropout == AttentionDropout::mask) {
    // Both forms were tried on an H200 (cuDNN 9.14): keep * dropout_scale in
    // the graph with softmax_sum * dropout_scale_inv ran, but the engine
    // computed softmax_sum without dropout_scale_inv for a keep tensor (dq
    // and dk wrong); the scale folded into a virtual keep * dropout_scale
    // made the generated flash_bprop kernel read out of bounds (illegal
    // memory access). The forward's mask support stays.
    throw std::invalid_argument(
        "attention backward with rig's keep mask: cuDNN 9.14's fused backward either drops the "
        "dropout scale from its softmax sum (wrong dQ/dK) or reads out of bounds with a scaled "
        "mask (seen on an H200); use AttentionDropout::philox, cuDNN's generator, on the GPU");
  }
  const DnnType io = dnn_type(s.type);
  Builder g("attention_backward");
  g.graph().allow_nondeterministic = s.allow_nondeterministic;
  const std::vector<std::int64_t> rows{s.b, s.h, s.tq, 1};
  const std::vector<std::int64_t> scores{s.b, s.h, s.tq, s.tk};
  // The transposed [B, H, Tk, Tq] view of a packed scores tensor.
  const std::vector<std::int64_t> scores_t{s.b, s.h, s.tk, s.tq};
  const std::vector<std::int64_t> scores_t_strides{s.h * s.tq * s.tk, s.tq * s.tk, 1, s.tk};
  // q [B, H, Tq, D]; k and v as [B, H, D, Tk] (the B of q k^T and dOut v^T).
  g.tensor(uid::q, io, {s.b, s.h, s.tq, s.d}, head_strides(s.q_strides));
  g.tensor(uid::k, io, {s.b, s.h, s.d, s.tk}, transposed(s.k_strides));
  g.tensor(uid::v, io, {s.b, s.h, s.d, s.tk}, transposed(s.v_strides));
  g.tensor(uid::o, io, {s.b, s.h, s.tq, s.d}, head_strides(s.o_strides));
  g.tensor(uid::d_o, io, {s.b, s.h, s.tq, s.d}, head_strides(s.o_strides));
  g.tensor(uid::stats, DnnType::f32, rows);
  g.tensor(uid::dq, io, {s.b, s.h, s.tq, s.d}, head_strides(s.q_strides));
  g.tensor(uid::dk, io, {s.b, s.h, s.tk, s.d}, head_strides(s.k_strides));
  g.tensor(uid::dv, io, {s.b, s.h, s.tk, s.d}, head_strides(s.v_strides));
  g.scalar(uid::attn_scale);
  declare_mask_inputs(g, s);
  const std::int64_t len_q = s.padding ? uid::seq_len_q : 0;
  const std::int64_t len_kv = s.padding ? uid::seq_len_kv : 0;
  const bool dropout = s.dropout == AttentionDropout::philox;
  // The keep bits: cuDNN's generator, whose seed and offset make the
  // forward's bits again (rig's mask is rejected above).
  std::int64_t keep = 0;
  if (dropout) {
    g.tensor(uid::seed, DnnType::i64, {1, 1, 1, 1});
    g.tensor(uid::offset, DnnType::i64, {1, 1, 1, 1});
    keep = g.virtual_tensor(DnnType::f32, scores);
    Node& n = g.node(OpKind::rng,
                     {{Slot::y, keep}, {Slot::seed, uid::seed}, {Slot::offset, uid::offset}});
    n.probability = 1.0 - static_cast<double>(s.dropout_probability);
    g.scalar(uid::dropout_scale);
    g.scalar(uid::dropout_scale_inv);
  }
  // softmax_sum = rowsum(dOut * out) * dropout_scale_inv: the rows' <P, dP>
  // (a constant one without dropout).
  const std::int64_t d_o_o = g.pointwise(PointwiseMode::mul, uid::d_o, uid::o);
  const std::int64_t d_o_o_sum = g.reduce_last(ReduceMode::add, d_o_o);
  g.scratch(uid::softmax_sum, DnnType::f32, rows);
  g.pointwise(PointwiseMode::mul, d_o_o_sum,
              dropout ? uid::dropout_scale_inv : g.constant(uid::one, 1.0F), DnnType::f32,
              DnnType::f32, 0, uid::softmax_sum);
  // P = exp(q k^T scale - stats), masked.
  const std::int64_t raw = g.virtual_tensor(DnnType::f32, scores);
  g.matmul(uid::q, uid::k, raw);
  g.override_matmul(len_q, len_kv, 0);
  const std::int64_t scaled = g.pointwise(PointwiseMode::mul, raw, uid::attn_scale);
  const std::int64_t centered = g.pointwise(PointwiseMode::sub, scaled, uid::stats);
  const std::int64_t p = g.pointwise(PointwiseMode::exp, apply_masks(g, s, centered));
  // dv = (P keep dropout_scale)^T dOut.
  std::int64_t p_dropped = p;
  if (dropout) {
    p_dropped = g.pointwise(PointwiseMode::mul, p_dropped, keep);
    p_dropped = g.pointwise(PointwiseMode::mul, p_dropped, uid::dropout_scale);
  }
  g.matmul(g.reshape(p_dropped, io, scores_t, scores_t_strides), uid::d_o, uid::dv);
  g.override_matmul(len_kv, 0, len_q);
  // dS = P (dOut v^T keep - softmax_sum) dropout_scale attn_scale.
  std::int64_t ds = g.virtual_tensor(DnnType::f32, scores);
  g.matmul(uid::d_o, uid::v, ds);
  g.override_matmul(len_q, len_kv, 0);
  if (dropout) ds = g.pointwise(PointwiseMode::mul, ds, keep);
  ds = g.pointwise(PointwiseMode::sub, ds, uid::softmax_sum);
  ds = g.pointwise(PointwiseMode::mul, ds, p);
  if (dropout) ds = g.pointwise(PointwiseMode::mul, ds, uid::dropout_scale);
  ds = g.pointwise(PointwiseMode::mul, ds, uid::attn_scale);
  // dk = dS^T q.
  g.matmul(g.reshape(ds, io, scores_t, scores_t_strides), uid::q, uid::dk);
  g.override_matmul(len_kv, 0, len_q);
  // dq = dS k, k seen as [B, H, Tk, D]. Deterministic: straight into dq (cuDNN
  // keeps dP in its workspace); else through an f32 accumulator of atomics.
  const std::int64_t k_rows =
      g.reshape(uid::k, io, {s.b, s.h, s.tk, s.d}, head_strides(s.k_strides));
  if (s.allow_nondeterministic) {
    g.scratch(uid::dq_accum, DnnType::f32, {s.b, s.h, s.tq, s.d});
    g.matmul(ds, k_rows, uid::dq_accum);
    g.override_matmul(len_q, 0, len_kv);
    g.pointwise(PointwiseMode::identity, uid::dq_accum, 0, io, DnnType::f32, 0, uid::dq);
  } else {
    g.matmul(ds, k_rows, uid::dq);
    g.override_matmul(len_q, 0, len_kv);
  }
  return g.take();
}

}  // namespace rig::cuda::dnn
