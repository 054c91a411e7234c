// The flat ParameterStore: parameters and buffers as views of flat storage,
// initialisers from Philox streams, PyTorch's fan conventions.
#include <gtest/gtest.h>

#include <cmath>
#include <numeric>

#include "rig/autograd.hpp"
#include "rig/ops.hpp"
#include "rig/parameter_store.hpp"
#include "rig/random.hpp"
#include "test_tensor_util.hpp"

namespace {

using rig::Initializer;
using rig::ParameterStore;
using rig::Tensor;
using rig_test::contains;
using rig_test::error_of;
namespace ops = rig::ops;

std::pair<double, double> mean_std(const std::vector<float>& v) {
  const double mean = std::accumulate(v.begin(), v.end(), 0.0) / static_cast<double>(v.size());
  double var = 0;
  for (float x : v) var += (x - mean) * (x - mean);
  return {mean, std::sqrt(var / static_cast<double>(v.size()))};
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
  EXPECT_TRUE(contains(error_of([&] { s.declare_buffer("w", {3}, Initializer::constant(0)); }),
                       "'w' is declared twice"));
  EXPECT_TRUE(contains(error_of([&] { s.declare("u", {3}, Initializer::uniform(1, 0)); }),
                       "bad initialiser parameters 1 and 0"));
  EXPECT_TRUE(contains(error_of<std::logic_error>([&] { w.to_vector(); }),
                       "before ParameterStore::allocate()"));
  EXPECT_EQ(error_of([&] { s.find("b"); }), "unknown parameter 'b'; the parameters are: w");
  s.allocate(0);
  EXPECT_THROW(s.declare("late", {1}, Initializer::constant(0)), std::logic_error);
  EXPECT_THROW(s.allocate(0), std::logic_error);
}

TEST(TensorParameterStore, ValuesComeFromThePhiloxStreamOfTheName) {
  ParameterStore s;
  s.declare("enc.w", {3, 5}, Initializer::uniform(-1.0F, 2.0F));
  s.declare("enc.n", {7}, Initializer::normal(0.5F, 2.0F));
  s.allocate(99);
  std::vector<float> expected(15);
  rig::fill_uniform({99, 0, 0, rig::purpose_id("enc.w")}, expected.data(), 15, -1.0F, 2.0F);
  EXPECT_EQ(s.find("enc.w").value.to_vector(), expected);
  expected.resize(7);
  rig::fill_normal({99, 0, 0, rig::purpose_id("enc.n")}, expected.data(), 7, 0.5F, 2.0F);
  EXPECT_EQ(s.find("enc.n").value.to_vector(), expected);
}

TEST(TensorParameterStore, FansFollowPyTorch) {
  // Linear [out, in]: xavier bound sqrt(6 / (in + out)); conv [out, in, kh, kw]: times kh kw.
  ParameterStore s;
  s.declare("linear", {300, 100}, Initializer::xavier_uniform());
  s.declare("conv", {16, 8, 3, 3}, Initializer::xavier_uniform(2.0F));
  s.declare("kaiming", {64, 32, 3, 3}, Initializer::kaiming_normal());
  s.declare("kaiming_linear", {200, 400}, Initializer::kaiming_normal(1.0F));
  s.declare("vector", {1000}, Initializer::xavier_uniform());
  s.allocate(3);
  auto check_uniform = [&](const std::string& name, double bound) {
    SCOPED_TRACE(name);
    const auto v = s.find(name).value.to_vector();
    double max = 0;
    for (float x : v) max = std::max(max, static_cast<double>(std::abs(x)));
    EXPECT_LE(max, bound);
    EXPECT_GE(max, 0.95 * bound);
    EXPECT_NEAR(mean_std(v).second, bound / std::sqrt(3.0), 0.05 * bound);
  };
  check_uniform("linear", std::sqrt(6.0 / 400.0));
  check_uniform("conv", 2.0 * std::sqrt(6.0 / ((8 + 16) * 9.0)));
  check_uniform("vector", std::sqrt(6.0 / 2000.0));  // 1-D: fan_in = fan_out = size
  const auto [km, ks] = mean_std(s.find("kaiming").value.to_vector());
  EXPECT_NEAR(km, 0.0, 0.01);
  EXPECT_NEAR(ks, std::sqrt(2.0) / std::sqrt(32.0 * 9.0), 0.003);
  const auto [lm, ls] = mean_std(s.find("kaiming_linear").value.to_vector());
  EXPECT_NEAR(lm, 0.0, 0.002);
  EXPECT_NEAR(ls, 1.0 / std::sqrt(400.0), 0.001);
}

TEST(TensorParameterStore, BuffersLiveInTheirOwnFlatBuffer) {
  ParameterStore s;
  Tensor w = s.declare("bn.weight", {4}, Initializer::ones());
  Tensor mean = s.declare_buffer("bn.running_mean", {4}, Initializer::zeros());
  Tensor var = s.declare_buffer("bn.running_var", {4}, Initializer::ones());
  EXPECT_EQ(s.numel(), 4);
  EXPECT_EQ(s.buffer_numel(), 8);
  s.allocate(0);
  EXPECT_EQ(s.buffers().shape(), (rig::Shape{8}));
  EXPECT_EQ(s.buffers().to_vector(), (std::vector<float>{0, 0, 0, 0, 1, 1, 1, 1}));
  EXPECT_FALSE(mean.requires_grad());
  EXPECT_TRUE(w.requires_grad());
  EXPECT_EQ(var.impl()->storage, s.buffers().impl()->storage);
  EXPECT_EQ(var.offset(), 4);
  EXPECT_EQ(s.buffer_infos().size(), 2U);
  EXPECT_EQ(s.find("bn.running_var").offset, 4);
  EXPECT_EQ(s.parameters().size(), 1U);
  // Updating a buffer in place is seen through the flat buffer (what batch norm does).
  mean.fill_(0.5F);
  EXPECT_EQ(s.buffers().to_vector()[3], 0.5F);
  EXPECT_EQ(error_of([&] { s.find("bn.bias"); }),
            "unknown parameter 'bn.bias'; the parameters are: bn.weight, bn.running_mean, "
            "bn.running_var");
  EXPECT_THROW(s.declare_buffer("late", {1}, Initializer::zeros()), std::logic_error);
  // A store without buffers still has a (empty) buffers tensor.
  ParameterStore none;
  none.declare("p", {1}, Initializer::zeros());
  none.allocate(0);
  EXPECT_EQ(none.buffers().numel(), 0);
}

}  // namespace
