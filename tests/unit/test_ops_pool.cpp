// max_pool2d, avg_pool2d, global_avg_pool2d: golden values from PyTorch,
// finite differences, tie and NaN behaviour, error messages.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "golden.hpp"
#include "gradcheck.hpp"
#include "rig/ops.hpp"
#include "test_tensor_util.hpp"

namespace {

using rig::Shape;
using rig::Tensor;
using namespace rig_test;
namespace ops = rig::ops;

ops::Pool2dOptions pool_options(std::int64_t kh, std::int64_t kw, std::int64_t sh, std::int64_t sw,
                                std::int64_t ph, std::int64_t pw) {
  ops::Pool2dOptions o;
  o.kernel_h = kh;
  o.kernel_w = kw;
  o.stride_h = sh;
  o.stride_w = sw;
  o.pad_h = ph;
  o.pad_w = pw;
  return o;
}

Tensor run_pool(const std::string& kind, const Tensor& x, const ops::Pool2dOptions& o) {
  if (kind == "max") return ops::max_pool2d(x, o);
  if (kind == "avg") return ops::avg_pool2d(x, o);
  return ops::global_avg_pool2d(x);
}

TEST(OpsPool, GoldenForwardAndBackward) {
  int seen = 0;
  for (const auto& c : rig_test::load_golden("ops_nn")) {
    if (c.name.find("pool") == std::string::npos) continue;
    ++seen;
    SCOPED_TRACE(c.name);
    const std::string kind = c.params.at("kind");
    ops::Pool2dOptions o;
    if (kind != "global_avg") {
      o = pool_options(c.params.at("kernel_h"), c.params.at("kernel_w"), c.params.at("stride_h"),
                       c.params.at("stride_w"), c.params.at("pad_h"), c.params.at("pad_w"));
    }
    Tensor x = leaf(c, "x");
    const Tensor y = run_pool(kind, x, o);
    EXPECT_TRUE(tensors_close(y, c.output("y"), 1e-5, 1e-6));
    grads_of(y, c.input("upstream"), {x});
    EXPECT_TRUE(tensors_close(x.grad(), c.grad("x"), 1e-5, 1e-6));
  }
  EXPECT_EQ(seen, 8);
}

struct PoolConfig {
  const char* name;
  const char* kind;
  Shape x;
  ops::Pool2dOptions o;
};

class OpsPoolGradCheck : public ::testing::TestWithParam<PoolConfig> {};

TEST_P(OpsPoolGradCheck, MatchesFiniteDifferences) {
  const PoolConfig& cfg = GetParam();
  // Distinct values more than 2 eps apart, so a perturbation never changes
  // which element of a window is the maximum.
  std::vector<float> values(static_cast<std::size_t>(rig::shape_numel(cfg.x)));
  for (std::size_t i = 0; i < values.size(); ++i) {
    values[i] = 0.05F * static_cast<float>((i * 37) % values.size());
  }
  const Tensor x = Tensor::from_vector(values, cfg.x);
  const auto op = [&](const std::vector<Tensor>& in) { return run_pool(cfg.kind, in[0], cfg.o); };
  EXPECT_TRUE(check_gradients(op, {x}, 1e-2, 1e-2, 1e-3, 400));
}

INSTANTIATE_TEST_SUITE_P(
    Configs, OpsPoolGradCheck,
    ::testing::Values(
        PoolConfig{"max_2x2", "max", {2, 2, 6, 6}, pool_options(2, 2, 2, 2, 0, 0)},
        PoolConfig{"max_3x3_s2_p1", "max", {1, 3, 7, 7}, pool_options(3, 3, 2, 2, 1, 1)},
        PoolConfig{"max_overlap", "max", {1, 2, 5, 6}, pool_options(3, 2, 1, 1, 1, 0)},
        PoolConfig{"avg_2x2", "avg", {2, 2, 6, 6}, pool_options(2, 2, 2, 2, 0, 0)},
        PoolConfig{"avg_3x3_s2_p1", "avg", {1, 3, 7, 7}, pool_options(3, 3, 2, 2, 1, 1)},
        PoolConfig{"avg_nonsquare", "avg", {1, 2, 5, 6}, pool_options(3, 2, 2, 1, 1, 1)},
        PoolConfig{"global", "global_avg", {2, 3, 4, 5}, {}}),
    [](const auto& info) { return std::string(info.param.name); });

TEST(OpsPool, MaxTiesRouteTheGradientToTheFirstMaximum) {
  Tensor x = Tensor::from_vector(std::vector<float>{1, 3, 3, 0}, {1, 1, 2, 2});
  x.set_requires_grad(true);
  ops::sum(ops::max_pool2d(x, pool_options(2, 2, 2, 2, 0, 0))).backward();
  EXPECT_EQ(x.grad().to_vector(), (std::vector<float>{0, 1, 0, 0}));
}

TEST(OpsPool, MaxPropagatesNaN) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const Tensor x = Tensor::from_vector(std::vector<float>{1, nan, 3, 0}, {1, 1, 2, 2});
  EXPECT_TRUE(std::isnan(ops::max_pool2d(x, pool_options(2, 2, 2, 2, 0, 0)).item()));
}

TEST(OpsPool, MaxRoutesTheGradientToTheLastNaNAsPyTorch) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  Tensor x = Tensor::from_vector(std::vector<float>{nan, 1, nan, 0}, {1, 1, 2, 2});
  x.set_requires_grad(true);
  ops::sum(ops::max_pool2d(x, pool_options(2, 2, 2, 2, 0, 0))).backward();
  EXPECT_EQ(x.grad().to_vector(), (std::vector<float>{0, 0, 1, 0}));
}

TEST(OpsPool, AvgCountsPaddingInTheDivisor) {
  const Tensor x = Tensor::ones({1, 1, 2, 2});
  const Tensor y = ops::avg_pool2d(x, pool_options(2, 2, 2, 2, 1, 1));
  // Each 2x2 window covers one image pixel and three padding zeros.
  EXPECT_EQ(y.to_vector(), (std::vector<float>{0.25F, 0.25F, 0.25F, 0.25F}));
}

TEST(OpsPool, LargeInputsMatchSmallOnesPlaneByPlane) {
  // 64 planes run on several threads; each plane must equal its own pooling.
  const Tensor x = random_tensor({4, 16, 9, 9}, 5);
  const auto o = pool_options(3, 3, 2, 2, 1, 1);
  const Tensor all = ops::max_pool2d(x, o);
  const Tensor one = ops::max_pool2d(x.slice(0, 3, 4).slice(1, 7, 8).contiguous(), o);
  EXPECT_TRUE(tensors_close(all.slice(0, 3, 4).slice(1, 7, 8).contiguous(), one, 0, 0));
}

TEST(OpsPool, HalfPrecisionKeepsTheDtype) {
  const Tensor x = random_tensor({1, 2, 4, 4}, 6);
  const Tensor y = ops::avg_pool2d(x.to(rig::DType::f16), pool_options(2, 2, 2, 2, 0, 0));
  EXPECT_EQ(y.dtype(), rig::DType::f16);
  EXPECT_TRUE(tensors_close(y.to(rig::DType::f32),
                            ops::avg_pool2d(x, pool_options(2, 2, 2, 2, 0, 0)), 2e-3, 2e-3));
}

TEST(OpsPool, ErrorsNameTheShapes) {
  const Tensor x = Tensor::zeros({2, 3, 8, 8});
  EXPECT_TRUE(contains(error_of([&] {
                         ops::max_pool2d(Tensor::zeros({3, 8, 8}), {});
                       }),
                       "max_pool2d: x [3,8,8] must be [N, C, H, W]"));
  EXPECT_TRUE(contains(error_of([&] { ops::avg_pool2d(x, pool_options(2, 2, 2, 2, 2, 0)); }),
                       "avg_pool2d: x [2,3,8,8] with kernel 2x2, stride 2x2, padding 2x0: padding "
                       "must be >= 0 and at most half the kernel"));
  EXPECT_TRUE(contains(error_of([&] { ops::max_pool2d(x, pool_options(9, 2, 1, 1, 0, 0)); }),
                       "the padded input is smaller than the kernel"));
  EXPECT_TRUE(contains(error_of([&] { ops::max_pool2d(x, pool_options(2, 2, 0, 2, 0, 0)); }),
                       "kernel and stride must be >= 1"));
  EXPECT_TRUE(contains(error_of([&] {
                         ops::global_avg_pool2d(Tensor::zeros({2, 3, 0, 4}));
                       }),
                       "global_avg_pool2d: x [2,3,0,4] has no pixels to average"));
  EXPECT_TRUE(contains(error_of([&] {
                         ops::global_avg_pool2d(Tensor::zeros({2, 3}, rig::DType::u8));
                       }),
                       "global_avg_pool2d: x must be f32 or f16 or bf16, got u8 [2,3]"));
}

}  // namespace
