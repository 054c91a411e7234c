// Finite-difference spot checks of the composite layers: for a few elements
// of every parameter and of the inputs, the autograd gradient of
// L = sum(layer(x) * w) must match a central difference.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "gradcheck.hpp"
#include "rig/nn.hpp"
#include "rig/ops.hpp"
#include "test_nn_blocks.hpp"

namespace {

using rig::Shape;
using rig::Tensor;
namespace nn = rig::nn;
namespace ops = rig::ops;

Tensor random_leaf(Shape shape, std::uint64_t seed, float scale = 1.0F) {
  std::vector<float> v(static_cast<std::size_t>(rig::shape_numel(shape)));
  rig::fill_normal({seed, 0, 0, 9}, v.data(), static_cast<std::int64_t>(v.size()), 0.0F, scale);
  Tensor t = Tensor::from_vector(v, std::move(shape));
  t.set_requires_grad(true);
  return t;
}

struct Target {
  std::string name;
  Tensor tensor;  // a contiguous leaf: a parameter view or an input
};

// Every parameter of the store, and the given inputs.
std::vector<Target> targets_of(const rig::ParameterStore& store, std::vector<Target> inputs) {
  for (const auto& p : store.parameters()) inputs.push_back({p.name, p.value});
  return inputs;
}

::testing::AssertionResult spot_check(rig::ParameterStore& store, const std::function<Tensor()>& f,
                                      const std::vector<Target>& targets, int samples = 5,
                                      double eps = 1e-2, double rtol = 2e-2, double atol = 2e-3) {
  store.zero_grad();
  std::mt19937 rng(99);
  const std::vector<float> weight = rig_test::backward_weighted(f(), rng);

  rig::NoGradGuard no_grad;
  for (const auto& target : targets) {
    const Tensor grad = target.tensor.grad();
    if (!grad.defined()) return ::testing::AssertionFailure() << target.name << ": no gradient";
    const std::vector<float> analytic = grad.to_vector();
    Tensor leaf = target.tensor;
    float* data = leaf.data<float>();
    const auto n = target.tensor.numel();
    std::vector<std::int64_t> picks(static_cast<std::size_t>(n));
    for (std::int64_t i = 0; i < n; ++i) picks[static_cast<std::size_t>(i)] = i;
    std::shuffle(picks.begin(), picks.end(), rng);
    picks.resize(std::min<std::size_t>(picks.size(), static_cast<std::size_t>(samples)));
    for (const auto i : picks) {
      const double numeric = rig_test::central_difference(f, data, i, eps, weight);
      const double a = analytic[static_cast<std::size_t>(i)];
      if (!rig_test::gradient_close(a, numeric, rtol, atol)) {
        return ::testing::AssertionFailure() << target.name << " element " << i << ": autograd "
                                             << a << " vs numeric " << numeric;
      }
    }
  }
  return ::testing::AssertionSuccess();
}

Tensor padding_mask(const std::vector<std::uint8_t>& keep, std::int64_t batch, std::int64_t t) {
  return Tensor::from_vector(keep, {batch, 1, 1, t});
}

TEST(NnGradCheck, MultiHeadAttentionCausalWithPadding) {
  rig::ParameterStore store;
  const nn::MultiHeadAttention attention(store, "attention", 8, 2);
  store.allocate(1);
  const Tensor x = random_leaf({2, 4, 8}, 1);
  const Tensor mask = padding_mask({1, 1, 1, 1, 1, 1, 0, 0}, 2, 4);
  nn::MultiHeadAttention::Options options;
  options.causal = true;
  options.mask = mask;
  EXPECT_TRUE(spot_check(
      store, [&] { return attention.forward(x, x, options); }, targets_of(store, {{"x", x}})));
}

TEST(NnGradCheck, CrossAttentionWithDropout) {
  rig::ParameterStore store;
  const nn::MultiHeadAttention attention(store, "attention", 8, 2, 0.25F);
  store.allocate(2);
  const Tensor x = random_leaf({2, 3, 8}, 2);
  const Tensor memory = random_leaf({2, 5, 8}, 3);
  nn::MultiHeadAttention::Options options;
  options.training = true;  // a fixed key: the same dropout mask in every evaluation
  options.key = {5, 1, 0, 0};
  EXPECT_TRUE(spot_check(
      store, [&] { return attention.forward(x, memory, options); },
      targets_of(store, {{"x", x}, {"memory", memory}})));
}

TEST(NnGradCheck, FeedForwardGelu) {
  rig::ParameterStore store;
  const nn::FeedForward ffn(store, "ffn", 6, 12, ops::Activation::gelu, 0.2F);
  store.allocate(3);
  const Tensor x = random_leaf({3, 6}, 4);
  EXPECT_TRUE(spot_check(
      store,
      [&] {
        return ffn.forward(x, true, {1, 2, 3, 4});
      },
      targets_of(store, {{"x", x}})));
}

TEST(NnGradCheck, EncoderLayerTrainingWithDropout) {
  rig::ParameterStore store;
  // gelu: smooth, so the differences do not straddle ReLU kinks (the goldens cover relu).
  const rig_test::EncoderLayer layer(store, "enc.layers.0", 8, 2, 16, 0.1F, ops::Activation::gelu);
  store.allocate(4);
  const Tensor x = random_leaf({2, 4, 8}, 5);
  const Tensor mask = padding_mask({1, 1, 1, 1, 1, 1, 1, 0}, 2, 4);
  EXPECT_TRUE(spot_check(
      store,
      [&] {
        return layer.forward(x, mask, true, {7, 0, 0, 0});
      },
      targets_of(store, {{"x", x}}), 3));
}

TEST(NnGradCheck, DecoderLayer) {
  rig::ParameterStore store;
  const rig_test::DecoderLayer layer(store, "dec.layers.0", 8, 2, 16, 0.0F, ops::Activation::gelu);
  store.allocate(5);
  const Tensor x = random_leaf({2, 3, 8}, 6);
  const Tensor memory = random_leaf({2, 4, 8}, 7);
  const Tensor mask = padding_mask({1, 1, 1, 1, 1, 1, 0, 0}, 2, 4);
  EXPECT_TRUE(spot_check(
      store, [&] { return layer.forward(x, memory, mask, false, {}); },
      targets_of(store, {{"x", x}, {"memory", memory}}), 3));
}

TEST(NnGradCheck, ResNetBasicBlockTraining) {
  rig::ParameterStore store;
  const rig_test::BasicBlock block(store, "layer1.0", 3);
  store.allocate(6);
  const Tensor x = random_leaf({4, 3, 5, 5}, 8);
  // Batch statistics make the block smooth away from the ReLU kinks; a small
  // step keeps the differences off them.
  EXPECT_TRUE(spot_check(
      store, [&] { return block.forward(x, true); }, targets_of(store, {{"x", x}}), 5, 1e-3, 3e-2,
      5e-3));
}

TEST(NnGradCheck, StridedGroupedConvAndEmbedding) {
  rig::ParameterStore store;
  ops::Conv2dOptions options;
  options.stride_h = options.stride_w = 2;
  options.pad_h = options.pad_w = 1;
  options.groups = 2;
  const nn::Conv2d conv(store, "conv", 4, 6, 3, options, true);
  const nn::Embedding embed(store, "embed", 5, 4);
  store.allocate(7);
  const Tensor x = random_leaf({2, 4, 5, 5}, 9);
  EXPECT_TRUE(spot_check(store, [&] { return conv.forward(x); },
                         {{"x", x},
                          {"conv.weight", store.find("conv.weight").value},
                          {"conv.bias", store.find("conv.bias").value}}));
  const Tensor ids = Tensor::from_vector(std::vector<std::int64_t>{1, 4, 1, 0}, {2, 2});
  EXPECT_TRUE(spot_check(
      store, [&] { return embed.forward(ids); },
      {{"embed.weight", store.find("embed.weight").value}}, 20));
}

}  // namespace
