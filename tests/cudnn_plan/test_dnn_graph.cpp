// rig's cuDNN graphs as host data (core/cuda/dnn/graph.hpp): shapes, strides
// and keys. No cuDNN needed.
#include <gtest/gtest.h>

#include <set>
#include <stdexcept>

#include "cuda/dnn/graph.hpp"

namespace dnn = rig::cuda::dnn;

namespace {

rig::backend::Conv2dShape conv(std::int64_t c_in, std::int64_t c_out, std::int64_t k,
                               std::int64_t stride, std::int64_t size) {
  rig::backend::Conv2dShape s;
  s.n = 4;
  s.c_in = c_in;
  s.h = s.w = size;
  s.c_out = c_out;
  s.kernel_h = s.kernel_w = k;
  s.stride_h = s.stride_w = stride;
  s.pad_h = s.pad_w = k / 2;
  s.out_h = s.out_w = (size + 2 * (k / 2) - k) / stride + 1;
  return s;
}

}  // namespace

TEST(DnnGraph, ConvForwardDeclaresNchwTensors) {
  const dnn::Graph g = dnn::conv2d_forward_graph(conv(16, 32, 3, 2, 32));
  ASSERT_EQ(g.nodes.size(), 1U);
  EXPECT_EQ(g.nodes[0].kind, dnn::OpKind::conv_forward);
  EXPECT_EQ(g.tensor(dnn::uid::x)->dims, (std::vector<std::int64_t>{4, 16, 32, 32}));
  EXPECT_EQ(g.tensor(dnn::uid::x)->strides, (std::vector<std::int64_t>{16384, 1024, 32, 1}));
  EXPECT_EQ(g.tensor(dnn::uid::w)->dims, (std::vector<std::int64_t>{32, 16, 3, 3}));
  EXPECT_EQ(g.tensor(dnn::uid::y)->dims, (std::vector<std::int64_t>{4, 32, 16, 16}));
  EXPECT_EQ(g.nodes[0].stride, (std::array<std::int64_t, 2>{2, 2}));
  EXPECT_EQ(g.nodes[0].padding, (std::array<std::int64_t, 2>{1, 1}));
}

TEST(DnnGraph, ChannelsLastKeepsNchwDimsWithNhwcStrides) {
  rig::backend::Conv2dShape s = conv(16, 32, 3, 2, 32);
  s.channels_last = true;
  s.bias = true;
  for (const dnn::Graph& g : {dnn::conv2d_forward_graph(s), dnn::conv2d_backward_data_graph(s),
                              dnn::conv2d_backward_filter_graph(s)}) {
    SCOPED_TRACE(g.name);
    for (const dnn::TensorDesc& t : g.tensors) {
      if (t.uid == dnn::uid::bias) continue;
      // [n, c, h, w] dims, laid out n, h, w, c.
      const std::vector<std::int64_t>& d = t.dims;
      ASSERT_EQ(d.size(), 4U);
      EXPECT_EQ(t.strides, (std::vector<std::int64_t>{d[1] * d[2] * d[3], 1, d[3] * d[1], d[1]}))
          << "tensor " << t.uid;
    }
  }
  EXPECT_EQ(dnn::conv2d_forward_graph(s).tensor(dnn::uid::x)->dims,
            (std::vector<std::int64_t>{4, 16, 32, 32}));
  EXPECT_EQ(dnn::conv2d_backward_filter_graph(s).tensor(dnn::uid::dw)->strides,
            (std::vector<std::int64_t>{144, 1, 48, 16}));
  rig::backend::Conv2dShape first = s;
  first.channels_last = false;
  EXPECT_NE(dnn::conv2d_forward_graph(s).key(), dnn::conv2d_forward_graph(first).key());
}

TEST(DnnGraph, GroupsShrinkTheFilter) {
  rig::backend::Conv2dShape s = conv(16, 32, 3, 1, 8);
  s.groups = 4;
  EXPECT_EQ(dnn::conv2d_backward_filter_graph(s).tensor(dnn::uid::dw)->dims,
            (std::vector<std::int64_t>{32, 4, 3, 3}));
}

TEST(DnnGraph, BiasIsAFusedAdd) {
  rig::backend::Conv2dShape s = conv(3, 16, 3, 1, 32);
  s.bias = true;
  const dnn::Graph g = dnn::conv2d_forward_graph(s);
  ASSERT_EQ(g.nodes.size(), 2U);
  EXPECT_EQ(g.nodes[1].pointwise, dnn::PointwiseMode::add);
  EXPECT_TRUE(g.tensor(g.nodes[0].operand(dnn::Slot::y))->is_virtual);
}

TEST(DnnGraph, KeysTellShapesTypesAndOptionsApart) {
  std::set<std::string> keys;
  keys.insert(dnn::conv2d_forward_graph(conv(16, 16, 3, 1, 32)).key());
  keys.insert(dnn::conv2d_forward_graph(conv(16, 16, 3, 2, 32)).key());
  keys.insert(dnn::conv2d_forward_graph(conv(16, 16, 3, 1, 32), dnn::ConvType::f16).key());
  keys.insert(dnn::conv2d_backward_data_graph(conv(16, 16, 3, 1, 32)).key());
  keys.insert(dnn::conv2d_backward_filter_graph(conv(16, 16, 3, 1, 32)).key());
  dnn::AttentionGraphShape a = dnn::AttentionGraphShape::packed(8, 8, 64, 64, 64);
  keys.insert(dnn::attention_forward_graph(a).key());
  a.causal = true;
  keys.insert(dnn::attention_forward_graph(a).key());
  a.dropout = dnn::AttentionDropout::philox;
  a.dropout_probability = 0.1F;
  keys.insert(dnn::attention_forward_graph(a).key());
  a.dropout_probability = 0.2F;
  keys.insert(dnn::attention_forward_graph(a).key());
  EXPECT_EQ(keys.size(), 9U);
  EXPECT_EQ(dnn::conv2d_forward_graph(conv(16, 16, 3, 1, 32)).key(),
            dnn::conv2d_forward_graph(conv(16, 16, 3, 1, 32)).key());
}

TEST(DnnGraph, AccumulatingGradientsNameTheOutputTheyAddTo) {
  // beta 1: rerun, such a graph would add twice, so it is not rerunnable;
  // it names the output it adds to, which autotuning binds to a copy.
  const rig::backend::Conv2dShape s = conv(16, 16, 3, 1, 32);
  for (const bool accumulate : {false, true}) {
    const dnn::Graph dgrad = dnn::conv2d_backward_data_graph(s, dnn::ConvType::bf16, accumulate);
    const dnn::Graph wgrad = dnn::conv2d_backward_filter_graph(s, dnn::ConvType::bf16, accumulate);
    EXPECT_EQ(dgrad.rerunnable, !accumulate);
    EXPECT_EQ(wgrad.rerunnable, !accumulate);
    EXPECT_EQ(dgrad.nodes[0].beta, accumulate ? 1.0F : 0.0F);
    EXPECT_EQ(wgrad.nodes[0].beta, accumulate ? 1.0F : 0.0F);
    EXPECT_EQ(dgrad.accumulated,
              accumulate ? std::vector<std::int64_t>{dnn::uid::dx} : std::vector<std::int64_t>{});
    EXPECT_EQ(wgrad.accumulated,
              accumulate ? std::vector<std::int64_t>{dnn::uid::dw} : std::vector<std::int64_t>{});
  }
  EXPECT_NE(dnn::conv2d_backward_filter_graph(s, dnn::ConvType::bf16, true).key(),
            dnn::conv2d_backward_filter_graph(s, dnn::ConvType::bf16, false).key());
}

TEST(DnnGraph, BatchNormViewsInnerAsHeight) {
  const dnn::Graph g = dnn::batch_norm_forward_training_graph({8, 16, 64}, true);
  EXPECT_EQ(g.tensor(dnn::uid::x)->dims, (std::vector<std::int64_t>{8, 16, 64, 1}));
  EXPECT_EQ(g.tensor(dnn::uid::bn_mean)->dims, (std::vector<std::int64_t>{1, 16, 1, 1}));
  EXPECT_TRUE(g.tensor(dnn::uid::bn_epsilon)->by_value);
  EXPECT_NE(g.tensor(dnn::uid::bn_running_var_out), nullptr);
  EXPECT_EQ(dnn::batch_norm_forward_training_graph({8, 16, 64}, false)
                .tensor(dnn::uid::bn_running_var_out),
            nullptr);
}

TEST(DnnGraph, AttentionReadsKTransposed) {
  const dnn::Graph g =
      dnn::attention_forward_graph(dnn::AttentionGraphShape::packed(2, 8, 32, 48, 64));
  EXPECT_EQ(g.tensor(dnn::uid::k)->dims, (std::vector<std::int64_t>{2, 8, 64, 48}));
  EXPECT_EQ(g.tensor(dnn::uid::k)->strides,
            (std::vector<std::int64_t>{8 * 48 * 64, 48 * 64, 1, 64}));
  EXPECT_EQ(g.tensor(dnn::uid::stats)->dims, (std::vector<std::int64_t>{2, 8, 32, 1}));
}

TEST(DnnGraph, AttentionRejectsWhatCudnnCannotDo) {
  dnn::AttentionGraphShape a = dnn::AttentionGraphShape::packed(2, 8, 32, 48, 64);
  a.causal = true;  // tq != tk
  EXPECT_THROW(dnn::attention_forward_graph(a), std::invalid_argument);
  a = dnn::AttentionGraphShape::packed(2, 8, 32, 32, 64);
  a.type = dnn::ConvType::f32;
  EXPECT_THROW(dnn::attention_forward_graph(a), std::invalid_argument);
}

TEST(DnnGraph, FusedAttentionShapeOfABackEndCall) {
  rig::backend::FusedAttention a;
  a.b = 2;
  a.h = 8;
  a.tq = a.tk = 32;
  a.d = 64;
  a.qs = a.ks = a.vs = a.os = {32 * 8 * 64, 64, 8 * 64};  // [B, T, H, D] memory
  dnn::AttentionGraphShape s = dnn::fused_attention_shape(a);
  EXPECT_EQ(s.type, dnn::ConvType::bf16);
  EXPECT_FALSE(s.padding);
  EXPECT_FALSE(s.stats);  // no backward to come
  EXPECT_EQ(s.dropout, dnn::AttentionDropout::none);
  EXPECT_EQ(s.q_strides.time, 8 * 64);
  EXPECT_EQ(s.o_strides.head, 64);
  const dnn::Graph g = dnn::attention_forward_graph(s);
  EXPECT_EQ(g.tensor(dnn::uid::q)->strides,
            (std::vector<std::int64_t>{32 * 8 * 64, 64, 8 * 64, 1}));
  EXPECT_EQ(g.tensor(dnn::uid::stats), nullptr);
  EXPECT_EQ(g.tensor(dnn::uid::seq_len_kv), nullptr);

  const std::int32_t lengths = 0;
  float stats = 0.0F;
  a.key_lengths = &lengths;
  a.stats = &stats;
  a.dropout_p = 0.1F;
  a.type = rig::DType::f16;
  s = dnn::fused_attention_shape(a);
  EXPECT_EQ(s.type, dnn::ConvType::f16);
  EXPECT_TRUE(s.padding);
  EXPECT_TRUE(s.stats);
  EXPECT_EQ(s.dropout, dnn::AttentionDropout::philox);
  EXPECT_FLOAT_EQ(s.dropout_probability, 0.1F);
  const dnn::Graph with = dnn::attention_forward_graph(s);
  EXPECT_NE(with.tensor(dnn::uid::seq_len_kv), nullptr);
  EXPECT_NE(with.tensor(dnn::uid::seed), nullptr);
  EXPECT_NE(with.tensor(dnn::uid::stats), nullptr);

  a.type = rig::DType::f32;  // cuDNN has no f32 flash attention
  EXPECT_THROW(dnn::fused_attention_shape(a), std::invalid_argument);
  a.type = rig::DType::bf16;
  a.dropout_p = 1.0F;
  EXPECT_THROW(dnn::fused_attention_shape(a), std::invalid_argument);
  a.dropout_p = 0.0F;
  a.causal = true;
  a.tk = 48;  // causal needs tq == tk
  EXPECT_THROW(dnn::fused_attention_shape(a), std::invalid_argument);
}

TEST(DnnGraph, AttentionForwardStatsAreOptional) {
  dnn::AttentionGraphShape a = dnn::AttentionGraphShape::packed(2, 8, 32, 32, 64);
  EXPECT_NE(dnn::attention_forward_graph(a).tensor(dnn::uid::stats), nullptr);
  a.stats = false;
  const dnn::Graph inference = dnn::attention_forward_graph(a);
  EXPECT_EQ(inference.tensor(dnn::uid::stats), nullptr);
  EXPECT_NE(inference.tensor(dnn::uid::o), nullptr);
}

TEST(DnnGraph, AttentionBackwardDeclaresWhatTheCallerBinds) {
  dnn::AttentionGraphShape a = dnn::AttentionGraphShape::packed(2, 8, 32, 48, 64);
  a.padding = true;
  a.dropout = dnn::AttentionDropout::philox;
  a.dropout_probability = 0.1F;
  const dnn::Graph g = dnn::attention_backward_graph(a);
  for (std::int64_t id :
       {dnn::uid::q, dnn::uid::k, dnn::uid::v, dnn::uid::o, dnn::uid::d_o, dnn::uid::stats,
        dnn::uid::dq, dnn::uid::dk, dnn::uid::dv, dnn::uid::attn_scale, dnn::uid::neg_inf,
        dnn::uid::seq_len_q, dnn::uid::seq_len_kv, dnn::uid::seed, dnn::uid::offset,
        dnn::uid::dropout_scale, dnn::uid::dropout_scale_inv}) {
    const dnn::TensorDesc* t = g.tensor(id);
    ASSERT_NE(t, nullptr) << id;
    EXPECT_FALSE(t->is_virtual || t->scratch || t->value) << id;
  }
  EXPECT_EQ(g.tensor(dnn::uid::keep), nullptr);
  // k and v are read as [B, H, D, Tk]; dk and dv are written [B, H, Tk, D].
  EXPECT_EQ(g.tensor(dnn::uid::v)->dims, (std::vector<std::int64_t>{2, 8, 64, 48}));
  EXPECT_EQ(g.tensor(dnn::uid::dv)->dims, (std::vector<std::int64_t>{2, 8, 48, 64}));
  EXPECT_EQ(g.tensor(dnn::uid::dq)->dims, (std::vector<std::int64_t>{2, 8, 32, 64}));
  // softmax_sum lives in the workspace; the deterministic graph has no dq accumulator.
  ASSERT_NE(g.tensor(dnn::uid::softmax_sum), nullptr);
  EXPECT_TRUE(g.tensor(dnn::uid::softmax_sum)->scratch);
  EXPECT_EQ(g.tensor(dnn::uid::dq_accum), nullptr);
  EXPECT_FALSE(g.allow_nondeterministic);
  int reshapes = 0, overridden = 0;
  for (const dnn::Node& n : g.nodes) {
    reshapes += n.kind == dnn::OpKind::reshape;
    overridden += n.kind == dnn::OpKind::matmul && n.operand(dnn::Slot::m_override) != 0;
  }
  EXPECT_EQ(reshapes, 3);    // P^T, dS^T, k as [B, H, Tk, D]
  EXPECT_EQ(overridden, 5);  // every matmul, under padding
}

TEST(DnnGraph, PaddedAttentionForwardOverridesBothMatmuls) {
  dnn::AttentionGraphShape a = dnn::AttentionGraphShape::packed(2, 8, 32, 32, 64);
  a.padding = true;
  const dnn::Graph g = dnn::attention_forward_graph(a);
  std::vector<const dnn::Node*> matmuls;
  for (const dnn::Node& n : g.nodes) {
    if (n.kind == dnn::OpKind::matmul) matmuls.push_back(&n);
  }
  ASSERT_EQ(matmuls.size(), 2U);
  // q k^T: M = seq_len_q, N = seq_len_kv; P v: M = seq_len_q, K = seq_len_kv.
  EXPECT_EQ(matmuls[0]->operand(dnn::Slot::m_override), dnn::uid::seq_len_q);
  EXPECT_EQ(matmuls[0]->operand(dnn::Slot::n_override), dnn::uid::seq_len_kv);
  EXPECT_EQ(matmuls[1]->operand(dnn::Slot::m_override), dnn::uid::seq_len_q);
  EXPECT_EQ(matmuls[1]->operand(dnn::Slot::k_override), dnn::uid::seq_len_kv);
  a.padding = false;
  for (const dnn::Node& n : dnn::attention_forward_graph(a).nodes) {
    EXPECT_EQ(n.operand(dnn::Slot::m_override), 0);
  }
}

TEST(DnnGraph, AttentionBackwardRejectsRigsKeepMask) {
  dnn::AttentionGraphShape a = dnn::AttentionGraphShape::packed(2, 8, 32, 32, 64);
  a.dropout = dnn::AttentionDropout::mask;
  a.dropout_probability = 0.1F;
  EXPECT_NO_THROW(dnn::attention_forward_graph(a));  // the forward keeps the mask
  try {
    dnn::attention_backward_graph(a);
    ADD_FAILURE() << "attention_backward_graph accepted AttentionDropout::mask";
  } catch (const std::invalid_argument& e) {
    EXPECT_STREQ(e.what(),
                 "attention backward with rig's keep mask: cuDNN 9.14's fused backward either "
                 "drops the dropout scale from its softmax sum (wrong dQ/dK) or reads out of "
                 "bounds with a scaled mask (seen on an H200); use AttentionDropout::philox, "
                 "cuDNN's generator, on the GPU");
  }
}

TEST(DnnGraph, PhiloxDropoutBackwardScalesBySoftmaxSumsInverse) {
  dnn::AttentionGraphShape a = dnn::AttentionGraphShape::packed(2, 8, 32, 32, 64);
  a.dropout = dnn::AttentionDropout::philox;
  a.dropout_probability = 0.1F;
  const dnn::Graph g = dnn::attention_backward_graph(a);
  EXPECT_EQ(g.tensor(dnn::uid::keep), nullptr);
  EXPECT_EQ(g.tensor(dnn::uid::one), nullptr);
  // softmax_sum = rowsum(dOut * out) * dropout_scale_inv.
  bool found = false;
  for (const dnn::Node& n : g.nodes) {
    if (n.operand(dnn::Slot::y) == dnn::uid::softmax_sum) {
      found = true;
      EXPECT_EQ(n.operand(dnn::Slot::b), dnn::uid::dropout_scale_inv);
    }
  }
  EXPECT_TRUE(found);
}

TEST(DnnGraph, AttentionBackwardWithoutDropoutMultipliesByAConstantOne) {
  const dnn::Graph g =
      dnn::attention_backward_graph(dnn::AttentionGraphShape::packed(2, 8, 32, 32, 64));
  const dnn::TensorDesc* one = g.tensor(dnn::uid::one);
  ASSERT_NE(one, nullptr);
  EXPECT_TRUE(one->by_value);
  EXPECT_EQ(one->value, 1.0F);
  EXPECT_EQ(g.tensor(dnn::uid::dropout_scale_inv), nullptr);
  EXPECT_EQ(g.tensor(dnn::uid::neg_inf), nullptr);
}

TEST(DnnGraph, NondeterministicAttentionBackwardAccumulatesDqInScratch) {
  dnn::AttentionGraphShape a = dnn::AttentionGraphShape::packed(2, 8, 32, 32, 64);
  const std::string deterministic = dnn::attention_backward_graph(a).key();
  a.allow_nondeterministic = true;
  const dnn::Graph g = dnn::attention_backward_graph(a);
  EXPECT_TRUE(g.allow_nondeterministic);
  ASSERT_NE(g.tensor(dnn::uid::dq_accum), nullptr);
  EXPECT_TRUE(g.tensor(dnn::uid::dq_accum)->scratch);
  EXPECT_EQ(g.tensor(dnn::uid::dq_accum)->type, dnn::DnnType::f32);
  EXPECT_NE(g.key(), deterministic);
}

TEST(DnnGraph, DeterminismIsPartOfTheKey) {
  dnn::Graph g = dnn::conv2d_backward_filter_graph(conv(16, 16, 3, 1, 32));
  const std::string key = g.key();
  g.allow_nondeterministic = true;
  EXPECT_NE(g.key(), key);
}

TEST(DnnGraph, AttentionBackwardRejectsWhatCudnnCannotDo) {
  dnn::AttentionGraphShape a = dnn::AttentionGraphShape::packed(2, 8, 32, 48, 64);
  a.causal = true;  // tq != tk
  EXPECT_THROW(dnn::attention_backward_graph(a), std::invalid_argument);
  a = dnn::AttentionGraphShape::packed(2, 8, 32, 32, 64);
  a.type = dnn::ConvType::f32;
  EXPECT_THROW(dnn::attention_backward_graph(a), std::invalid_argument);
}
