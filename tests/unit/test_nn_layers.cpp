// rig::nn layers: hierarchical parameter names, initialisers, buffers,
// dropout in train and eval mode, argument errors.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <string>
#include <vector>

#include "rig/nn.hpp"
#include "rig/ops.hpp"
#include "test_nn_blocks.hpp"
#include "test_tensor_util.hpp"

namespace {

using rig::Shape;
using rig::Tensor;
namespace nn = rig::nn;
namespace ops = rig::ops;

std::vector<std::string> parameter_names(const rig::ParameterStore& store) {
  std::vector<std::string> names;
  for (const auto& p : store.parameters()) names.push_back(p.name);
  return names;
}

std::vector<std::string> buffer_names(const rig::ParameterStore& store) {
  std::vector<std::string> names;
  for (const auto& p : store.buffer_infos()) names.push_back(p.name);
  return names;
}

Tensor f32(std::vector<float> values, Shape shape) {
  return Tensor::from_vector(values, std::move(shape));
}

float max_abs(const Tensor& t) {
  float m = 0.0F;
  for (float v : t.to_vector()) m = std::max(m, std::abs(v));
  return m;
}

double stddev(const Tensor& t) {
  const auto v = t.to_vector();
  double mean = 0.0;
  for (float x : v) mean += x;
  mean /= static_cast<double>(v.size());
  double var = 0.0;
  for (float x : v) var += (x - mean) * (x - mean);
  return std::sqrt(var / static_cast<double>(v.size()));
}

Tensor random_input(Shape shape, std::uint64_t seed) {
  std::vector<float> v(static_cast<std::size_t>(rig::shape_numel(shape)));
  rig::fill_normal({seed, 0, 0, 7}, v.data(), static_cast<std::int64_t>(v.size()));
  return Tensor::from_vector(v, std::move(shape));
}

TEST(NnModule, ChildNames) {
  rig::ParameterStore store;
  const nn::Module root(store, "");
  EXPECT_EQ(root.child("weight"), "weight");
  const nn::Module m(store, "enc.layers.0");
  EXPECT_EQ(m.name(), "enc.layers.0");
  EXPECT_EQ(m.child("attention"), "enc.layers.0.attention");
}

TEST(NnModule, HierarchicalParameterNames) {
  rig::ParameterStore store;
  const rig_test::EncoderLayer enc(store, "enc.layers.0", 16, 4, 32);
  const rig_test::DecoderLayer dec(store, "dec.layers.1", 16, 4, 32);
  const std::vector<std::string> expected{
      "enc.layers.0.attention_norm.weight",
      "enc.layers.0.attention_norm.bias",
      "enc.layers.0.attention.query.weight",
      "enc.layers.0.attention.query.bias",
      "enc.layers.0.attention.key.weight",
      "enc.layers.0.attention.key.bias",
      "enc.layers.0.attention.value.weight",
      "enc.layers.0.attention.value.bias",
      "enc.layers.0.attention.output.weight",
      "enc.layers.0.attention.output.bias",
      "enc.layers.0.ffn_norm.weight",
      "enc.layers.0.ffn_norm.bias",
      "enc.layers.0.ffn.inner.weight",
      "enc.layers.0.ffn.inner.bias",
      "enc.layers.0.ffn.outer.weight",
      "enc.layers.0.ffn.outer.bias",
      "dec.layers.1.self_attention_norm.weight",
      "dec.layers.1.self_attention_norm.bias",
      "dec.layers.1.self_attention.query.weight",
      "dec.layers.1.self_attention.query.bias",
      "dec.layers.1.self_attention.key.weight",
      "dec.layers.1.self_attention.key.bias",
      "dec.layers.1.self_attention.value.weight",
      "dec.layers.1.self_attention.value.bias",
      "dec.layers.1.self_attention.output.weight",
      "dec.layers.1.self_attention.output.bias",
      "dec.layers.1.cross_attention_norm.weight",
      "dec.layers.1.cross_attention_norm.bias",
      "dec.layers.1.cross_attention.query.weight",
      "dec.layers.1.cross_attention.query.bias",
      "dec.layers.1.cross_attention.key.weight",
      "dec.layers.1.cross_attention.key.bias",
      "dec.layers.1.cross_attention.value.weight",
      "dec.layers.1.cross_attention.value.bias",
      "dec.layers.1.cross_attention.output.weight",
      "dec.layers.1.cross_attention.output.bias",
      "dec.layers.1.ffn_norm.weight",
      "dec.layers.1.ffn_norm.bias",
      "dec.layers.1.ffn.inner.weight",
      "dec.layers.1.ffn.inner.bias",
      "dec.layers.1.ffn.outer.weight",
      "dec.layers.1.ffn.outer.bias",
  };
  EXPECT_EQ(parameter_names(store), expected);
  EXPECT_TRUE(store.buffer_infos().empty());
  EXPECT_EQ(store.find("enc.layers.0.attention.query.weight").shape, (Shape{16, 16}));
  EXPECT_EQ(store.find("enc.layers.0.ffn.inner.weight").shape, (Shape{32, 16}));
  EXPECT_EQ(store.find("enc.layers.0.ffn.outer.weight").shape, (Shape{16, 32}));
  EXPECT_EQ(store.find("dec.layers.1.ffn.outer.bias").shape, (Shape{16}));
}

TEST(NnModule, ResNetBlockNamesAndBuffers) {
  rig::ParameterStore store;
  const rig_test::BasicBlock block(store, "layer1.0", 8);
  EXPECT_EQ(parameter_names(store),
            (std::vector<std::string>{"layer1.0.conv1.weight", "layer1.0.bn1.weight",
                                      "layer1.0.bn1.bias", "layer1.0.conv2.weight",
                                      "layer1.0.bn2.weight", "layer1.0.bn2.bias"}));
  // Running statistics are buffers: checkpointed, never trained.
  EXPECT_EQ(buffer_names(store),
            (std::vector<std::string>{"layer1.0.bn1.running_mean", "layer1.0.bn1.running_var",
                                      "layer1.0.bn2.running_mean", "layer1.0.bn2.running_var"}));
  EXPECT_EQ(store.find("layer1.0.conv1.weight").shape, (Shape{8, 8, 3, 3}));
  EXPECT_EQ(store.numel(), 2 * (8 * 8 * 9 + 2 * 8));
  EXPECT_EQ(store.buffer_numel(), 4 * 8);
}

TEST(NnLinear, InitialisedLikeTorch) {
  rig::ParameterStore store;
  const nn::Linear a(store, "a", 400, 300);
  const nn::Linear b(store, "b", 400, 300, true, rig::Initializer::xavier_uniform());
  const nn::Linear c(store, "c", 50, 20, false);
  store.allocate(5);
  EXPECT_EQ(a.weight().shape(), (Shape{300, 400}));  // [out, in]
  const float bound = 1.0F / 20.0F;                  // 1 / sqrt(400)
  EXPECT_LE(max_abs(a.weight()), bound);
  EXPECT_GT(max_abs(a.weight()), 0.99F * bound);
  EXPECT_LE(max_abs(a.bias()), bound);
  EXPECT_GT(max_abs(a.bias()), 0.9F * bound);
  const float xavier = std::sqrt(6.0F / 700.0F);
  EXPECT_LE(max_abs(b.weight()), xavier);
  EXPECT_GT(max_abs(b.weight()), 0.99F * xavier);
  EXPECT_EQ(max_abs(b.bias()), 0.0F);  // an explicit initialiser zeroes the bias
  EXPECT_FALSE(c.bias().defined());
  EXPECT_EQ(parameter_names(store),
            (std::vector<std::string>{"a.weight", "a.bias", "b.weight", "b.bias", "c.weight"}));
}

TEST(NnLinear, ForwardIsXWTransposedPlusBias) {
  rig::ParameterStore store;
  const nn::Linear layer(store, "", 3, 2);
  store.allocate(0);
  Tensor weight = layer.weight();
  weight.copy_from(f32({1, 2, 3, 4, 5, 6}, {2, 3}));
  Tensor bias = layer.bias();
  bias.copy_from(f32({0.5F, -100.0F}, {2}));
  const Tensor x = f32({1, 0, -1, 2, 1, 0}, {2, 3});
  EXPECT_EQ(layer.forward(x).to_vector(), (std::vector<float>{-1.5F, -102.0F, 4.5F, -87.0F}));
  EXPECT_EQ(layer.forward(x, ops::Activation::relu).to_vector(),
            (std::vector<float>{0.0F, 0.0F, 4.5F, 0.0F}));
}

TEST(NnConv2d, KaimingNormalWeights) {
  rig::ParameterStore store;
  const nn::Conv2d conv(store, "conv", 64, 64, 3);
  store.allocate(11);
  const double expected = std::sqrt(2.0 / (64 * 9));
  EXPECT_NEAR(stddev(store.find("conv.weight").value), expected, 0.03 * expected);
  EXPECT_THROW(store.find("conv.bias"), std::invalid_argument);
}

TEST(NnEmbedding, LooksUpRows) {
  rig::ParameterStore store;
  const nn::Embedding embed(store, "embed", 5, 3);
  store.allocate(1);
  EXPECT_NEAR(stddev(embed.weight()), 1.0, 0.6);  // normal(0, 1) by default
  const Tensor rows = embed.forward(Tensor::from_vector(std::vector<std::int64_t>{4, 0}, {2}));
  const auto w = embed.weight().to_vector();
  EXPECT_EQ(rows.shape(), (Shape{2, 3}));
  EXPECT_EQ(rows.to_vector(), (std::vector<float>{w[12], w[13], w[14], w[0], w[1], w[2]}));
}

TEST(NnLayerNorm, StartsAsPlainNormalisation) {
  rig::ParameterStore store;
  const nn::LayerNorm norm(store, "norm", 4);
  store.allocate(0);
  EXPECT_EQ(store.find("norm.weight").value.to_vector(), (std::vector<float>{1, 1, 1, 1}));
  EXPECT_EQ(store.find("norm.bias").value.to_vector(), (std::vector<float>{0, 0, 0, 0}));
  const auto y = norm.forward(f32({1, 2, 3, 4}, {1, 4})).to_vector();
  EXPECT_NEAR(y[0], -1.5 / std::sqrt(1.25 + 1e-5), 1e-5);
  EXPECT_NEAR(y[3], 1.5 / std::sqrt(1.25 + 1e-5), 1e-5);
}

TEST(NnDropout, InactiveInEvalAndReproducibleInTraining) {
  const nn::Dropout dropout("enc.layers.0.ffn_dropout", 0.5F);
  const Tensor x = Tensor::ones({64, 64});
  const rig::RandomKey key{1, 2, 0, 3};
  // Eval: the input itself.
  const Tensor eval = dropout.forward(x, false, key);
  EXPECT_TRUE(eval.shares_storage(x));
  EXPECT_EQ(eval.to_vector(), x.to_vector());
  // Training: about half zeroed, the rest scaled by 2, the same mask for the same key.
  const auto a = dropout.forward(x, true, key).to_vector();
  const auto kept = std::count(a.begin(), a.end(), 2.0F);
  EXPECT_EQ(kept + std::count(a.begin(), a.end(), 0.0F), 64 * 64);
  EXPECT_NEAR(static_cast<double>(kept) / (64 * 64), 0.5, 0.05);
  EXPECT_EQ(dropout.forward(x, true, key).to_vector(), a);
  // The stream is key.derive(name): another site or another step gives another mask.
  EXPECT_EQ(ops::dropout(x, 0.5F, key.derive("enc.layers.0.ffn_dropout")).to_vector(), a);
  EXPECT_NE(nn::Dropout("enc.layers.1.ffn_dropout", 0.5F).forward(x, true, key).to_vector(), a);
  EXPECT_NE(dropout.forward(x, true, {1, 3, 0, 3}).to_vector(), a);
  // p = 0 is a no-op even when training.
  EXPECT_TRUE(nn::Dropout("none", 0.0F).forward(x, true, key).shares_storage(x));
  EXPECT_THROW(nn::Dropout("bad", 1.0F), std::invalid_argument);
}

TEST(NnDropout, TransformerLayerDeterministicInEval) {
  rig::ParameterStore store;
  const rig_test::EncoderLayer enc(store, "enc", 16, 4, 32, 0.3F);
  store.allocate(3);
  const Tensor x = random_input({2, 5, 16}, 1);
  const auto eval_a = enc.forward(x, {}, false, {1, 1, 0, 0}).to_vector();
  const auto eval_b = enc.forward(x, {}, false, {9, 9, 0, 0}).to_vector();
  EXPECT_EQ(eval_a, eval_b);  // the key does not matter in eval mode
  const auto train_a = enc.forward(x, {}, true, {1, 1, 0, 0}).to_vector();
  const auto train_b = enc.forward(x, {}, true, {1, 1, 0, 0}).to_vector();
  const auto train_c = enc.forward(x, {}, true, {1, 2, 0, 0}).to_vector();
  EXPECT_EQ(train_a, train_b);
  EXPECT_NE(train_a, eval_a);
  EXPECT_NE(train_a, train_c);
}

TEST(NnBatchNorm2d, RunningStatisticsAreBuffers) {
  rig::ParameterStore store;
  const nn::BatchNorm2d bn(store, "bn", 3, 0.1F);
  const nn::BatchNorm2d zero(store, "zero", 3, 0.1F, 1e-5F, true);
  store.allocate(0);
  EXPECT_EQ(parameter_names(store),
            (std::vector<std::string>{"bn.weight", "bn.bias", "zero.weight", "zero.bias"}));
  EXPECT_EQ(buffer_names(store),
            (std::vector<std::string>{"bn.running_mean", "bn.running_var", "zero.running_mean",
                                      "zero.running_var"}));
  EXPECT_EQ(store.find("bn.weight").value.to_vector(), (std::vector<float>{1, 1, 1}));
  EXPECT_EQ(store.find("zero.weight").value.to_vector(), (std::vector<float>{0, 0, 0}));
  EXPECT_EQ(store.find("bn.running_mean").value.to_vector(), (std::vector<float>{0, 0, 0}));
  EXPECT_EQ(store.find("bn.running_var").value.to_vector(), (std::vector<float>{1, 1, 1}));
  EXPECT_FALSE(store.find("bn.running_mean").value.requires_grad());

  // Channel c holds c - 1, c + 1, c - 1, c + 1: mean c, biased variance 1, unbiased 4/3.
  const Tensor x = f32({-1, 1, 0, 2, 1, 3, -1, 1, 0, 2, 1, 3}, {2, 3, 1, 2});
  const Tensor eval_before = bn.forward(x, false);
  EXPECT_EQ(store.find("bn.running_mean").value.to_vector(), (std::vector<float>{0, 0, 0}));
  const auto y = bn.forward(x, true).to_vector();
  EXPECT_NEAR(y[0], -1.0 / std::sqrt(1.0 + 1e-5), 1e-5);  // batch statistics (biased var 1)
  const auto mean = store.find("bn.running_mean").value.to_vector();
  const auto var = store.find("bn.running_var").value.to_vector();
  for (int c = 0; c < 3; ++c) {
    EXPECT_NEAR(mean[c], 0.1 * c, 1e-6);
    EXPECT_NEAR(var[c], 0.9 + 0.1 * 4.0 / 3.0, 1e-6);
  }
  // Eval normalises with the running statistics and leaves them alone.
  const auto e = bn.forward(x, false).to_vector();
  EXPECT_NEAR(e[2], (0.0 - 0.1) / std::sqrt(var[1] + 1e-5), 1e-5);
  EXPECT_EQ(store.find("bn.running_var").value.to_vector(), var);
  EXPECT_NE(eval_before.to_vector(), bn.forward(x, false).to_vector());
}

TEST(NnErrors, NameTheLayerAndShapes) {
  rig::ParameterStore store;
  EXPECT_TRUE(rig_test::contains(
      rig_test::error_of([&] { nn::MultiHeadAttention(store, "dec.attention", 10, 4); }),
      "MultiHeadAttention 'dec.attention': model_dim 10 must be a positive multiple of "
      "num_heads 4"));
  EXPECT_TRUE(rig_test::contains(rig_test::error_of([&] { nn::Linear(store, "proj", 0, 3); }),
                                 "Linear 'proj'"));
  const nn::MultiHeadAttention attention(store, "attention", 8, 2);
  store.allocate(0);
  EXPECT_TRUE(rig_test::contains(
      rig_test::error_of([&] {
        attention.forward(Tensor::zeros({2, 3, 8}), Tensor::zeros({3, 4, 8}), {});
      }),
      "MultiHeadAttention 'attention': query [2,3,8] and memory [3,4,8] must be [batch, time, 8] "
      "with the same batch"));
  EXPECT_TRUE(rig_test::contains(
      rig_test::error_of([&] {
        attention.forward(Tensor::zeros({2, 3, 6}), Tensor::zeros({2, 3, 6}), {});
      }),
      "[2,3,6]"));
}

}  // namespace
