// max_pool2d, avg_pool2d, global_avg_pool2d: golden values from PyTorch,
// finite differences, tie and NaN behaviour, channels last (NHWC), error
// messages.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <string>
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

ops::Pool2dOptions channels_last(ops::Pool2dOptions o) {
  o.channels_last = true;
  return o;
}

// Multiples of 1/4 in [-2, 2]: many ties within a max window.
Tensor tied(const Shape& shape, std::uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<float> v(static_cast<std::size_t>(rig::shape_numel(shape)));
  for (float& f : v) f = 0.25F * static_cast<float>(static_cast<int>(rng() % 17) - 8);
  return Tensor::from_vector(v, shape);
}

// NCHW -> NHWC, contiguous.
Tensor to_nhwc(const Tensor& t) {
  return t.permute({0, 2, 3, 1}).contiguous();
}

Tensor run_pool(const std::string& kind, const Tensor& x, const ops::Pool2dOptions& o) {
  if (kind == "max") return ops::max_pool2d(x, o);
  if (kind == "avg") return ops::avg_pool2d(x, o);
  return ops::global_avg_pool2d(x, o.channels_last);
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
        PoolConfig{"global", "global_avg", {2, 3, 4, 5}, {}},
        // Channels last: x [N, H, W, C].
        PoolConfig{"max_3x3_s2_p1_nhwc",
                   "max",
                   {1, 7, 7, 3},
                   channels_last(pool_options(3, 3, 2, 2, 1, 1))},
        PoolConfig{
            "max_overlap_nhwc", "max", {2, 5, 6, 3}, channels_last(pool_options(3, 2, 1, 1, 1, 0))},
        PoolConfig{"avg_3x3_s2_p1_nhwc",
                   "avg",
                   {1, 7, 7, 3},
                   channels_last(pool_options(3, 3, 2, 2, 1, 1))},
        PoolConfig{"avg_nonsquare_nhwc",
                   "avg",
                   {1, 5, 6, 2},
                   channels_last(pool_options(3, 2, 2, 1, 1, 1))},
        PoolConfig{"global_nhwc", "global_avg", {2, 4, 5, 3}, channels_last({})}),
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

// Channels last gives NCHW's results and gradients on the permuted tensors,
// bit for bit (each plane is computed in the same order).
TEST(OpsPool, ChannelsLastIsNchwOnPermutedTensorsBitForBit) {
  struct Config {
    const char* kind;
    Shape x;  // NCHW
    ops::Pool2dOptions o;
  };
  const Config configs[] = {
      // ResNet's stem pool over more channels than the CPU's 64-channel blocks.
      {"max", {2, 70, 9, 9}, pool_options(3, 3, 2, 2, 1, 1)},
      {"max", {3, 5, 7, 6}, pool_options(3, 2, 1, 1, 1, 1)},  // stride 1: overlapping
      {"avg", {2, 70, 9, 9}, pool_options(3, 3, 2, 2, 1, 1)},
      {"avg", {1, 37, 8, 10}, pool_options(2, 3, 2, 1, 0, 1)},
      {"global_avg", {2, 70, 7, 7}, {}},  // ResNet-50's last pool, 49 pixels
      {"global_avg", {3, 5, 13, 1}, {}},
  };
  std::uint32_t seed = 40;
  for (const Config& cfg : configs) {
    SCOPED_TRACE(::testing::Message() << cfg.kind << " " << rig::to_string(cfg.x));
    const bool max = std::string(cfg.kind) == "max";
    const Tensor x = max ? tied(cfg.x, ++seed) : random_tensor(cfg.x, ++seed);
    Tensor a = leaf(x);
    const Tensor y = run_pool(cfg.kind, a, cfg.o);
    Tensor b = leaf(to_nhwc(x));
    const Tensor yl = run_pool(cfg.kind, b, channels_last(cfg.o));
    const bool global = std::string(cfg.kind) == "global_avg";
    const Tensor want_y = global ? y : to_nhwc(y);
    EXPECT_EQ(yl.shape(), want_y.shape());
    EXPECT_EQ(yl.to_vector(), want_y.to_vector());
    const Tensor up = random_tensor(y.shape(), ++seed);
    backward_with(y, up);
    backward_with(yl, global ? up : to_nhwc(up));
    EXPECT_EQ(b.grad().to_vector(), to_nhwc(a.grad()).to_vector());
  }
}

TEST(OpsPool, ChannelsLastMaxKeepsTheTieAndNaNRules) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  // [1, 2, 2, 2]: channel 0 holds 1 3 / 3 0 (a tie), channel 1 nan 1 / nan 0.
  Tensor x = Tensor::from_vector(std::vector<float>{1, nan, 3, 1, 3, nan, 0, 0}, {1, 2, 2, 2});
  x.set_requires_grad(true);
  const Tensor y = ops::max_pool2d(x, channels_last(pool_options(2, 2, 2, 2, 0, 0)));
  EXPECT_EQ(y.shape(), (Shape{1, 1, 1, 2}));
  const std::vector<float> values = y.to_vector();
  EXPECT_EQ(values[0], 3.0F);
  EXPECT_TRUE(std::isnan(values[1]));
  ops::sum(y).backward();
  // The first maximum of channel 0 (pixel 1), the last NaN of channel 1 (pixel 2).
  EXPECT_EQ(x.grad().to_vector(), (std::vector<float>{0, 0, 1, 0, 0, 1, 0, 0}));
}

TEST(OpsPool, ChannelsLastShapesAndHalfPrecision) {
  const Tensor x = random_tensor({2, 9, 8, 3}, 7);  // [N, H, W, C]
  const auto o = channels_last(pool_options(3, 3, 2, 2, 1, 1));
  EXPECT_EQ(ops::max_pool2d(x, o).shape(), (Shape{2, 5, 4, 3}));
  EXPECT_EQ(ops::avg_pool2d(x, o).shape(), (Shape{2, 5, 4, 3}));
  EXPECT_EQ(ops::global_avg_pool2d(x, true).shape(), (Shape{2, 3}));
  // f16 is computed in f32 and rounded back: the f32 result, rounded.
  const Tensor h = x.to(rig::DType::f16);
  for (const char* kind : {"max", "avg", "global_avg"}) {
    SCOPED_TRACE(kind);
    const Tensor y = run_pool(kind, h, o);
    EXPECT_EQ(y.dtype(), rig::DType::f16);
    EXPECT_EQ(y.to(rig::DType::f32).to_vector(), run_pool(kind, h.to(rig::DType::f32), o)
                                                     .to(rig::DType::f16)
                                                     .to(rig::DType::f32)
                                                     .to_vector());
  }
}

TEST(OpsPool, ChannelsLastErrorsNameTheLayout) {
  const auto o = channels_last(pool_options(2, 2, 2, 2, 0, 0));
  EXPECT_TRUE(contains(error_of([&] {
                         ops::max_pool2d(Tensor::zeros({3, 8, 8}), o);
                       }),
                       "max_pool2d: x [3,8,8] must be [N, H, W, C]"));
  EXPECT_TRUE(contains(error_of([&] {
                         ops::global_avg_pool2d(Tensor::zeros({3, 8, 8}), true);
                       }),
                       "global_avg_pool2d: x [3,8,8] must be [N, H, W, C]"));
  EXPECT_TRUE(contains(
      error_of([&] {
        ops::avg_pool2d(Tensor::zeros({2, 8, 8, 3}), channels_last(pool_options(2, 2, 2, 2, 2, 0)));
      }),
      "avg_pool2d: x [2,8,8,3] (channels last) with kernel 2x2, stride 2x2, padding 2x0: "
      "padding must be >= 0 and at most half the kernel"));
  // H and W are axes 1 and 2: W = 3 is narrower than the kernel (as NCHW, W
  // would be 8 and the call fine).
  EXPECT_TRUE(contains(
      error_of([&] {
        ops::max_pool2d(Tensor::zeros({2, 8, 3, 8}), channels_last(pool_options(2, 4, 1, 1, 0, 0)));
      }),
      "the padded input is smaller than the kernel"));
  EXPECT_NO_THROW(ops::max_pool2d(Tensor::zeros({2, 8, 3, 8}), pool_options(2, 4, 1, 1, 0, 0)));
  EXPECT_TRUE(contains(error_of([&] {
                         ops::global_avg_pool2d(Tensor::zeros({2, 0, 4, 3}), true);
                       }),
                       "global_avg_pool2d: x [2,0,4,3] (channels last) has no pixels to average"));
}

}  // namespace
