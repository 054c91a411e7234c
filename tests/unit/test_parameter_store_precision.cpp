// The ParameterStore under a float16 / bfloat16 compute dtype: f32 master
// values and gradients, model-facing compute copies, unscaling with overflow
// detection, publishing and rounding; the layers computing with 16-bit
// weights; and a Linear + cross-entropy model (and the mlp plugin) training
// in f16 / bf16 close to f32.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "rig/nn.hpp"
#include "rig/ops.hpp"
#include "rig/parameter_store.hpp"
#include "test_plugins_util.hpp"
#include "test_tensor_util.hpp"

namespace {

using rig::DType;
using rig::Initializer;
using rig::ParameterStore;
using rig::Tensor;
namespace ops = rig::ops;
namespace nn = rig::nn;

constexpr double kInf = std::numeric_limits<double>::infinity();

float round_to(DType dtype, float x) {
  return dtype == DType::f16 ? rig::half_to_float(rig::float_to_half(x))
                             : rig::bfloat16_to_float(rig::float_to_bfloat16(x));
}

std::vector<float> rounded(DType dtype, std::vector<float> v) {
  for (float& x : v) x = round_to(dtype, x);
  return v;
}

double max_abs(const std::vector<float>& v) {
  double m = 0;
  for (float x : v) m = std::max(m, static_cast<double>(std::abs(x)));
  return m;
}

class LowPrecisionStore : public ::testing::TestWithParam<DType> {};

TEST_P(LowPrecisionStore, MasterAndComputeCopies) {
  const DType low = GetParam();
  ParameterStore reference;
  reference.declare("w", {2, 3}, Initializer::uniform(-1, 1));
  reference.declare("b", {3}, Initializer::normal(0, 1));
  reference.allocate(7);

  ParameterStore s;
  Tensor w = s.declare("w", {2, 3}, Initializer::uniform(-1, 1));
  Tensor b = s.declare("b", {3}, Initializer::normal(0, 1));
  Tensor mean = s.declare_buffer("running_mean", {3}, Initializer::constant(0.1F));
  s.allocate(7, low);
  EXPECT_EQ(s.compute_dtype(), low);
  // The model's tensors are 16-bit views of compute_values(), gradients into compute_grads().
  EXPECT_EQ(w.dtype(), low);
  EXPECT_TRUE(w.requires_grad());
  EXPECT_EQ(w.impl()->storage, s.compute_values().impl()->storage);
  EXPECT_EQ(w.grad().impl()->storage, s.compute_grads().impl()->storage);
  EXPECT_EQ(b.offset(), 6);
  EXPECT_EQ(s.compute_values().dtype(), low);
  EXPECT_EQ(s.compute_grads().dtype(), low);
  EXPECT_EQ(s.values().dtype(), DType::f32);
  // The master is the f32 view of values(), initialised exactly as under f32, then published.
  const auto& info = s.find("w");
  EXPECT_EQ(info.value.impl(), w.impl());
  EXPECT_EQ(info.master.dtype(), DType::f32);
  EXPECT_FALSE(info.master.requires_grad());
  EXPECT_EQ(info.master.impl()->storage, s.values().impl()->storage);
  EXPECT_EQ(info.master.grad().impl()->storage, s.grads().impl()->storage);
  EXPECT_EQ(s.values().to_vector(), reference.values().to_vector());
  EXPECT_EQ(s.compute_values().to_vector(), rounded(low, s.values().to_vector()));
  EXPECT_NE(s.compute_values().to_vector(), s.values().to_vector());  // rounding happened
  // Buffers stay f32, and value and master are one tensor.
  const auto& buffer = s.find("running_mean");
  EXPECT_EQ(mean.dtype(), DType::f32);
  EXPECT_EQ(buffer.master.impl(), buffer.value.impl());
  EXPECT_EQ(mean.to_vector(), (std::vector<float>{0.1F, 0.1F, 0.1F}));
}

TEST_P(LowPrecisionStore, GradientsLandInComputeGradsThenMaster) {
  const DType low = GetParam();
  ParameterStore s;
  Tensor w = s.declare("w", {2, 3}, Initializer::constant(0.5F));
  Tensor b = s.declare("b", {3}, Initializer::zeros());
  s.allocate(0, low);
  const Tensor x = Tensor::from_vector(std::vector<float>{1, 2}, {1, 2}).to(low);
  // loss = 8 x sum(x W + b): d/dW = 8 x^T 1, d/db = 8.
  ops::mul_scalar(ops::sum(ops::add(ops::matmul(x, w), b)), 8.0F).backward();
  const std::vector<float> scaled{8, 8, 8, 16, 16, 16, 8, 8, 8};
  EXPECT_EQ(s.compute_grads().to_vector(), scaled);
  for (float g : s.grads().to_vector()) EXPECT_EQ(g, 0.0F);  // nothing in the master yet
  EXPECT_EQ(s.unscale_grads(1.0 / 8.0).item(), 2.0);  // max |master gradient| after unscaling
  EXPECT_EQ(s.grads().to_vector(), (std::vector<float>{1, 1, 1, 2, 2, 2, 1, 1, 1}));
  EXPECT_EQ(s.find("b").master.grad().to_vector(), (std::vector<float>{1, 1, 1}));
  // zero_grad zeroes what backward accumulates into; the masters are left
  // for the next unscale_grads, which rewrites them all.
  s.zero_grad();
  for (float g : s.compute_grads().to_vector()) EXPECT_EQ(g, 0.0F);
  EXPECT_EQ(s.grads().to_vector(), (std::vector<float>{1, 1, 1, 2, 2, 2, 1, 1, 1}));
  EXPECT_EQ(s.unscale_grads(1.0).item(), 0.0);
  for (float g : s.grads().to_vector()) EXPECT_EQ(g, 0.0F);
}

TEST_P(LowPrecisionStore, UnscaleDetectsOverflow) {
  const DType low = GetParam();
  ParameterStore s;
  s.declare("w", {70000}, Initializer::zeros());  // several parallel chunks
  s.allocate(0, low);
  std::mt19937 rng(3);
  std::normal_distribution<float> normal(0.0F, 100.0F);
  std::vector<float> g(70000);
  for (float& x : g) x = round_to(low, normal(rng));
  g[54321] = round_to(low, -3000.0F);
  s.compute_grads().copy_from(Tensor::from_vector(g, {70000}).to(low));
  EXPECT_EQ(s.unscale_grads(0.25).item(), 0.25 * std::abs(round_to(low, -3000.0F)));
  const auto master = s.grads().to_vector();
  for (std::size_t i = 0; i < g.size(); ++i) ASSERT_EQ(master[i], g[i] * 0.25F) << i;

  auto* bits = s.compute_grads().data<std::uint16_t>();
  const std::uint16_t inf = low == DType::f16 ? 0x7C00 : 0x7F80;
  bits[69999] = inf | 0x8000;  // -inf
  EXPECT_EQ(s.unscale_grads(0.25).item(), kInf);
  bits[69999] = inf | 0x0001;  // NaN
  EXPECT_EQ(s.unscale_grads(1.0).item(), kInf);
  EXPECT_TRUE(std::isnan(s.grads().to_vector()[69999]));

  // Without the statistic (a reducer's bucket): the same masters, nothing returned.
  bits[69999] = 0;
  EXPECT_FALSE(s.unscale_grads(0.5, 1000, 60000, /*largest=*/false).defined());
  const auto half = s.grads().to_vector();
  for (std::size_t i = 1000; i < 61000; ++i) ASSERT_EQ(half[i], g[i] * 0.5F) << i;
  EXPECT_EQ(half[999], g[999]);  // outside the range: as the last unscale (scale 1) left it
}

TEST_P(LowPrecisionStore, PublishAndRound) {
  const DType low = GetParam();
  ParameterStore s;
  Tensor w = s.declare("w", {3}, Initializer::zeros());
  s.allocate(0, low);
  float* v = s.values().data<float>();
  v[0] = 1.0F / 3.0F;
  v[1] = 1e-3F;
  v[2] = -7.1234567F;
  const std::vector<float> exact = s.values().to_vector();
  EXPECT_EQ(w.to_vector(), (std::vector<float>{0, 0, 0}));  // not yet published
  s.publish_values();
  EXPECT_EQ(w.to_vector(), rounded(low, exact));
  EXPECT_EQ(s.values().to_vector(), exact);  // the master keeps full precision
  s.round_values_to(DType::f32);
  EXPECT_EQ(s.values().to_vector(), exact);
  s.round_values_to(low);
  EXPECT_EQ(s.values().to_vector(), rounded(low, exact));
  EXPECT_THROW(s.round_values_to(DType::i64), std::invalid_argument);
}

INSTANTIATE_TEST_SUITE_P(F16AndBf16, LowPrecisionStore, ::testing::Values(DType::f16, DType::bf16),
                         [](const auto& info) { return std::string(rig::dtype_name(info.param)); });

TEST(ParameterStorePrecision, F32ComputeIsTheMasterItself) {
  ParameterStore s;
  Tensor w = s.declare("w", {4}, Initializer::constant(1.0F));
  s.allocate(0);
  EXPECT_EQ(s.compute_dtype(), DType::f32);
  EXPECT_EQ(s.compute_values().impl(), s.values().impl());
  EXPECT_EQ(s.compute_grads().impl(), s.grads().impl());
  EXPECT_EQ(s.find("w").master.impl(), w.impl());
  ops::mul_scalar(ops::sum(ops::mul(w, w)), 3.0F).backward();  // 6 w = 6
  EXPECT_EQ(s.unscale_grads(1.0).item(), 6.0);
  EXPECT_EQ(s.grads().to_vector(), (std::vector<float>{6, 6, 6, 6}));
  EXPECT_EQ(s.unscale_grads(0.5).item(), 3.0);  // in place
  EXPECT_EQ(s.grads().to_vector(), (std::vector<float>{3, 3, 3, 3}));
  s.grads().data<float>()[2] = std::numeric_limits<float>::infinity();
  EXPECT_EQ(s.unscale_grads(1.0).item(), kInf);
  s.publish_values();  // a no-op
  EXPECT_EQ(w.to_vector(), (std::vector<float>{1, 1, 1, 1}));
  ParameterStore bad;
  EXPECT_THROW(bad.allocate(0, DType::i32), std::invalid_argument);
}

// One step of the engine's order: scaled loss, backward, unscale, SGD on the
// master, publish. Returns the (f32) loss.
float sgd_step(ParameterStore& s, const std::function<Tensor()>& loss, float lr, float scale) {
  s.zero_grad();
  const Tensor l = loss();
  EXPECT_EQ(l.dtype(), DType::f32);
  ops::mul_scalar(l, scale).backward();
  EXPECT_LT(s.unscale_grads(1.0 / scale).item(), kInf);
  float* v = s.values().data<float>();
  const float* g = s.grads().data<float>();
  for (std::int64_t i = 0; i < s.numel(); ++i) v[i] -= lr * g[i];
  s.publish_values();
  return l.item();
}

TEST(ParameterStorePrecision, LinearCrossEntropyTrainsCloseToF32) {
  std::mt19937 rng(5);
  std::normal_distribution<float> normal;
  std::vector<float> features(16 * 8);
  for (float& x : features) x = normal(rng);
  std::vector<std::int64_t> labels(16);
  for (std::size_t i = 0; i < labels.size(); ++i) labels[i] = static_cast<std::int64_t>(i % 4);
  const Tensor x = Tensor::from_vector(features, {16, 8});
  const Tensor y = Tensor::from_vector(labels, {16});

  auto train = [&](DType dtype, float scale) {
    ParameterStore s;
    nn::Linear fc(s, "fc", 8, 4);
    s.allocate(11, dtype);
    const Tensor input = x.to(dtype);
    std::vector<float> losses;
    for (int step = 0; step < 8; ++step) {
      losses.push_back(sgd_step(
          s, [&] { return ops::cross_entropy(fc.forward(input), y); }, 0.5F, scale));
    }
    return losses;
  };
  const auto f32 = train(DType::f32, 1.0F);
  EXPECT_LT(f32.back(), 0.8 * f32.front());  // it learns
  for (const auto& [dtype, scale, tolerance] :
       {std::tuple{DType::f16, 1024.0F, 5e-3}, std::tuple{DType::bf16, 1.0F, 3e-2}}) {
    SCOPED_TRACE(rig::dtype_name(dtype));
    const auto low = train(dtype, scale);
    for (std::size_t i = 0; i < f32.size(); ++i) {
      EXPECT_NEAR(low[i], f32[i], tolerance * f32[i]) << "step " << i;
    }
  }
}

// Embedding, layer norm, attention, feed-forward with dropout, linear, conv,
// batch norm (f32 running statistics) and cross-entropy with 16-bit weights and activations give
// the f32 loss and gradients to 16-bit accuracy.
TEST(ParameterStorePrecision, LayersComputeWith16BitWeights) {
  struct Net {
    ParameterStore store;
    nn::Embedding embedding{store, "embedding", 10, 8};
    nn::LayerNorm norm{store, "norm", 8};
    nn::MultiHeadAttention attention{store, "attention", 8, 2};
    nn::Linear head{store, "head", 8, 4};
    nn::Conv2d conv{store, "conv", 3, 4, 3, ops::Conv2dOptions{1, 1, 1, 1, 1, 1, 1}, true};
    nn::BatchNorm2d bn{store, "bn", 4};
    nn::FeedForward ffn{store, "ffn", 8, 16, ops::Activation::relu, 0.1F};

    Tensor loss(DType dtype) {
      const Tensor ids =
          Tensor::from_vector(std::vector<std::int64_t>{1, 4, 2, 9, 0, 3, 3, 7, 5, 8}, {2, 5});
      const Tensor labels = Tensor::from_vector(std::vector<std::int64_t>{2, 0}, {2});
      Tensor h = norm.forward(embedding.forward(ids));
      EXPECT_EQ(h.dtype(), dtype);
      h = attention.forward(h, h, {});
      h = ffn.forward(h, true, rig::RandomKey{5, 0, 0, 1});
      EXPECT_EQ(h.dtype(), dtype);
      const Tensor text = ops::cross_entropy(head.forward(ops::mean(h, {1})), labels);
      std::vector<float> pixels(2 * 3 * 6 * 6);
      for (std::size_t i = 0; i < pixels.size(); ++i) pixels[i] = std::sin(0.37F * i);
      const Tensor image = Tensor::from_vector(pixels, {2, 3, 6, 6}).to(dtype);
      const Tensor c = bn.forward(conv.forward(image), true);
      EXPECT_EQ(c.dtype(), dtype);
      const Tensor vision = ops::cross_entropy(ops::global_avg_pool2d(c), labels);
      return ops::add(text, vision);
    }
  };
  Net reference;
  reference.store.allocate(3);
  const Tensor expected = reference.loss(DType::f32);
  expected.backward();
  for (const auto& [dtype, tolerance] :
       {std::pair{DType::f16, 1e-2}, std::pair{DType::bf16, 5e-2}}) {
    SCOPED_TRACE(rig::dtype_name(dtype));
    Net net;
    net.store.allocate(3, dtype);
    const Tensor loss = net.loss(dtype);
    EXPECT_EQ(loss.dtype(), DType::f32);
    EXPECT_NEAR(loss.item(), expected.item(), tolerance * expected.item());
    ops::mul_scalar(loss, 64.0F).backward();
    EXPECT_LT(net.store.unscale_grads(1.0 / 64.0).item(), kInf);
    // Relative to each parameter's largest gradient, plus a floor for the ones
    // that are 0 in exact arithmetic (attention's key bias) and so only rounding noise.
    const double floor = 1e-3 * max_abs(reference.store.grads().to_vector());
    for (const auto& p : net.store.parameters()) {
      SCOPED_TRACE(p.name);
      const auto got = p.master.grad().to_vector();
      const auto want = reference.store.find(p.name).master.grad().to_vector();
      EXPECT_GT(max_abs(got), 0.0);
      for (std::size_t i = 0; i < got.size(); ++i) {
        ASSERT_NEAR(got[i], want[i], 4 * tolerance * max_abs(want) + floor) << i;
      }
    }
    // The f32 running statistics were updated from the 16-bit activations.
    const auto running = net.store.find("bn.running_mean").value;
    EXPECT_EQ(running.dtype(), DType::f32);
    const auto want = reference.store.find("bn.running_mean").value.to_vector();
    const auto got = running.to_vector();
    for (std::size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], want[i], 2e-2 * max_abs(want));
  }
}

// The mlp plugin computes in ctx.run.dtype: 16-bit parameters and
// activations, an f32 loss, and it learns the synthetic task.
TEST(ParameterStorePrecision, MlpPluginTrainsInMixedPrecision) {
  rig_test::LoadedPlugin mlp{"model", "mlp"};
  rig_test::LoadedPlugin synthetic{"data_layer", "synthetic"};
  rig_test::LoadedPlugin sgd{"optimizer", "sgd"};
  for (const DType dtype : {DType::f16, DType::bf16}) {
    SCOPED_TRACE(rig::dtype_name(dtype));
    rig::DataLayerContext data_ctx;
    data_ctx.batch_size = 32;
    auto data = synthetic.descriptor->make_data_layer(
        synthetic.params("{num_features: 6, num_classes: 3}"), data_ctx);
    ParameterStore store;
    rig::RunContext run;
    run.dtype = dtype;
    const rig::ModelContext model_ctx{run, data->info(), store};
    auto net = mlp.descriptor->make_model(mlp.params("{hidden_sizes: [16]}"), model_ctx);
    store.allocate(1, dtype);
    const rig::OptimizerContext opt_ctx{run, store};
    auto opt = sgd.descriptor->make_optimizer(sgd.params("{momentum: 0.9}"), opt_ctx);
    EXPECT_EQ(store.find("layers.0.weight").value.dtype(), dtype);
    std::vector<float> losses;
    std::int64_t epoch = 0;
    data->start_epoch(epoch);
    for (int step = 0; step < 150; ++step) {
      auto batch = data->next_batch();
      if (!batch) {
        data->start_epoch(++epoch);
        batch = data->next_batch();
      }
      store.zero_grad();
      const rig::ModelOutput out = net->forward(*batch, rig::Mode::train);
      ASSERT_EQ(out.loss.dtype(), DType::f32);
      ops::mul_scalar(out.loss, 128.0F).backward();
      ASSERT_LT(store.unscale_grads(1.0 / 128.0).item(), kInf);
      opt->step(0.1);
      store.publish_values();
      losses.push_back(out.loss.item());
    }
    const double first = (losses[0] + losses[1] + losses[2]) / 3.0;
    double last = 0.0;
    for (std::size_t i = losses.size() - 20; i < losses.size(); ++i) last += losses[i] / 20.0;
    EXPECT_LT(last, 0.7 * first);
    data->start_epoch(++epoch);
    const Tensor predicted = net->infer(*data->next_batch());
    EXPECT_EQ(predicted.dtype(), DType::i64);
  }
}

}  // namespace
