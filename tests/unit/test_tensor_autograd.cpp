// Autograd bookkeeping and the flat ParameterStore.
#include <gtest/gtest.h>

#include <cmath>
#include <numeric>

#include "rig/autograd.hpp"
#include "rig/ops.hpp"
#include "rig/parameter_store.hpp"
#include "test_tensor_util.hpp"

namespace {

using rig::Initializer;
using rig::ParameterStore;
using rig::Tensor;
using rig_test::contains;
using rig_test::error_of;
namespace ops = rig::ops;

TEST(TensorAutograd, LeafGradientsAccumulateAcrossBackwardCalls) {
  Tensor x = Tensor::from_vector(std::vector<float>{1, 2, 3}, {3});
  x.set_requires_grad(true);
  Tensor y = ops::sum(ops::mul(x, x));  // dy/dx = 2x
  y.backward();
  EXPECT_EQ(x.grad().to_vector(), (std::vector<float>{2, 4, 6}));
  ops::sum(x).backward();  // adds 1
  EXPECT_EQ(x.grad().to_vector(), (std::vector<float>{3, 5, 7}));
  EXPECT_EQ(y.impl()->grad_fn->op, "sum");
  EXPECT_FALSE(y.grad().defined());  // non-leaf gradients are not kept
}

TEST(TensorAutograd, OnlyInputsThatRequireGradGetOne) {
  Tensor a = Tensor::full({2, 2}, 1.0F).set_requires_grad(true);
  Tensor b = Tensor::full({2, 2}, 2.0F);
  ops::sum(ops::matmul(a, b)).backward();
  EXPECT_TRUE(a.grad().defined());
  EXPECT_FALSE(b.grad().defined());
  EXPECT_FALSE(ops::matmul(b, b).requires_grad());
}

TEST(TensorAutograd, NoGradGuardRecordsNothingAndNests) {
  Tensor x = Tensor::full({2}, 1.0F).set_requires_grad(true);
  EXPECT_TRUE(rig::grad_mode_enabled());
  {
    rig::NoGradGuard outer;
    {
      rig::NoGradGuard inner;
      EXPECT_FALSE(rig::grad_mode_enabled());
    }
    EXPECT_FALSE(rig::grad_mode_enabled());
    Tensor y = ops::sum(ops::tanh(x));
    EXPECT_FALSE(y.requires_grad());
    EXPECT_EQ(y.impl()->grad_fn, nullptr);
    EXPECT_TRUE(contains(error_of([&] { y.backward(); }), "does not require a gradient"));
  }
  EXPECT_TRUE(rig::grad_mode_enabled());
  EXPECT_TRUE(ops::sum(ops::tanh(x)).requires_grad());
}

TEST(TensorAutograd, BackwardNeedsOneElement) {
  Tensor x = Tensor::full({2}, 1.0F).set_requires_grad(true);
  EXPECT_TRUE(contains(error_of([&] { ops::tanh(x).backward(); }), "needs one f32 element"));
}

TEST(TensorAutograd, BackwardReleasesTheGraph) {
  Tensor x = Tensor::full({2}, 1.0F).set_requires_grad(true);
  Tensor y = ops::sum(ops::tanh(x));
  y.backward();
  EXPECT_TRUE(y.impl()->grad_fn->inputs.empty());
  EXPECT_TRUE(contains(error_of<std::logic_error>([&] { y.backward(); }),
                       "graph through 'sum' was already released"));
}

TEST(TensorAutograd, DeepChainIsTraversedAndFreedIteratively) {
  Tensor x = Tensor::full({1}, 0.5F).set_requires_grad(true);
  Tensor y = x;
  for (int i = 0; i < 20000; ++i) y = ops::mul_scalar(y, 1.0F);
  ops::sum(y).backward();
  EXPECT_FLOAT_EQ(x.grad().item(), 1.0F);
}

TEST(TensorParameterStore, GradientsAccumulateIntoTheFlatBuffer) {
  ParameterStore store;
  Tensor w = store.declare("layer.weight", {2, 3}, Initializer::constant(0.5F));
  Tensor b = store.declare("layer.bias", {3}, Initializer::constant(0.0F));
  EXPECT_EQ(store.numel(), 9);
  EXPECT_FALSE(store.allocated());
  store.allocate(7);
  EXPECT_TRUE(store.allocated());
  EXPECT_EQ(store.find("layer.bias").offset, 6);
  EXPECT_TRUE(w.requires_grad());
  // The parameter is a view of the flat values buffer.
  EXPECT_EQ(w.impl()->storage, store.values().impl()->storage);
  EXPECT_EQ(store.values().to_vector(), (std::vector<float>{.5, .5, .5, .5, .5, .5, 0, 0, 0}));

  Tensor x = Tensor::from_vector(std::vector<float>{1, 2}, {1, 2});
  auto loss = [&] { return ops::sum(ops::add(ops::matmul(x, w), b)); };
  loss().backward();
  // d/dW = x^T * ones, d/db = ones.
  const std::vector<float> once{1, 1, 1, 2, 2, 2, 1, 1, 1};
  EXPECT_EQ(store.grads().to_vector(), once);
  EXPECT_EQ(w.grad().impl()->storage, store.grads().impl()->storage);
  loss().backward();
  std::vector<float> twice = once;
  for (auto& g : twice) g *= 2;
  EXPECT_EQ(store.grads().to_vector(), twice);
  store.zero_grad();
  for (float g : store.grads().to_vector()) EXPECT_EQ(g, 0.0F);

  // Writing through the flat buffer is seen by the parameter (what an optimizer does).
  store.values().data<float>()[6] = 3.0F;
  EXPECT_EQ(b.to_vector()[0], 3.0F);
}

TEST(TensorParameterStore, InitialisationDependsOnlyOnSeedAndName) {
  auto values_of = [](std::uint64_t seed, bool reversed) {
    ParameterStore s;
    if (reversed) s.declare("other", {5}, Initializer::normal(0, 1));
    s.declare("w", {4, 8}, Initializer::xavier_uniform());
    if (!reversed) s.declare("other", {5}, Initializer::normal(0, 1));
    s.allocate(seed);
    return s.find("w").value.to_vector();
  };
  EXPECT_EQ(values_of(1, false), values_of(1, true));
  EXPECT_NE(values_of(1, false), values_of(2, false));
}

TEST(TensorParameterStore, InitialiserDistributions) {
  ParameterStore s;
  s.declare("xavier", {64, 192}, Initializer::xavier_uniform());
  s.declare("uniform", {10000}, Initializer::uniform(2.0F, 3.0F));
  s.declare("normal", {10000}, Initializer::normal(1.0F, 0.5F));
  s.allocate(0);
  auto stats = [](const std::vector<float>& v) {
    double mean = std::accumulate(v.begin(), v.end(), 0.0) / static_cast<double>(v.size());
    double var = 0;
    for (float x : v) var += (x - mean) * (x - mean);
    return std::pair{mean, std::sqrt(var / static_cast<double>(v.size()))};
  };
  const auto xavier = s.find("xavier").value.to_vector();
  const double bound = std::sqrt(6.0 / (64 + 192));
  for (float x : xavier) EXPECT_LE(std::abs(x), bound);
  EXPECT_NEAR(stats(xavier).second, bound / std::sqrt(3.0), 0.01);
  const auto uniform = s.find("uniform").value.to_vector();
  for (float x : uniform) EXPECT_TRUE(x >= 2.0F && x <= 3.0F);
  EXPECT_NEAR(stats(uniform).first, 2.5, 0.02);
  const auto [mean, std] = stats(s.find("normal").value.to_vector());
  EXPECT_NEAR(mean, 1.0, 0.02);
  EXPECT_NEAR(std, 0.5, 0.02);
}

TEST(TensorParameterStore, Errors) {
  ParameterStore s;
  Tensor w = s.declare("w", {2}, Initializer::constant(1));
  EXPECT_TRUE(contains(error_of([&] { s.declare("w", {3}, Initializer::constant(0)); }),
                       "parameter 'w' is declared twice"));
  EXPECT_TRUE(contains(error_of([&] { s.declare("v", {3}, Initializer::xavier_uniform()); }),
                       "xavier_uniform needs at least 2 dimensions, got [3]"));
  EXPECT_TRUE(contains(error_of<std::logic_error>([&] { w.to_vector(); }),
                       "before ParameterStore::allocate()"));
  EXPECT_EQ(error_of([&] { s.find("b"); }), "unknown parameter 'b'; the parameters are: w");
  s.allocate(0);
  EXPECT_THROW(s.declare("late", {1}, Initializer::constant(0)), std::logic_error);
  EXPECT_THROW(s.allocate(0), std::logic_error);
}

}  // namespace
