// conv2d: golden values from PyTorch, finite differences, a direct double
// reference at oneDNN's blocked-layout sizes (odd batches, 32 channels), and
// error messages.
#include <gtest/gtest.h>

#include <cmath>
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

ops::Conv2dOptions options_of(const nlohmann::json& p) {
  ops::Conv2dOptions o;
  o.stride_h = p.at("stride_h");
  o.stride_w = p.at("stride_w");
  o.pad_h = p.at("pad_h");
  o.pad_w = p.at("pad_w");
  o.dilation_h = p.at("dilation_h");
  o.dilation_w = p.at("dilation_w");
  o.groups = p.at("groups");
  return o;
}

TEST(OpsConv, GoldenForwardAndBackward) {
  int seen = 0;
  for (const auto& c : rig_test::load_golden("ops_nn")) {
    if (c.name.rfind("conv_", 0) != 0) continue;
    ++seen;
    SCOPED_TRACE(c.name);
    Tensor x = leaf(c, "x");
    Tensor w = leaf(c, "weight");
    const bool has_bias = c.inputs.count("bias") > 0;
    Tensor b = has_bias ? leaf(c, "bias") : Tensor();
    const Tensor y = ops::conv2d(x, w, b, options_of(c.params));
    EXPECT_TRUE(tensors_close(y, c.output("y"), 1e-4, 1e-4));
    grads_of(y, c.input("upstream"), {x, w});
    EXPECT_TRUE(tensors_close(x.grad(), c.grad("x"), 1e-4, 1e-4));
    EXPECT_TRUE(tensors_close(w.grad(), c.grad("weight"), 1e-4, 1e-4));
    if (has_bias) {
      EXPECT_TRUE(tensors_close(b.grad(), c.grad("bias"), 1e-4, 1e-4));
    }
  }
  EXPECT_GE(seen, 8);
}

struct ConvConfig {
  const char* name;
  Shape x, w;
  bool bias;
  ops::Conv2dOptions o;
};

ops::Conv2dOptions conv_options(std::int64_t sh, std::int64_t sw, std::int64_t ph, std::int64_t pw,
                                std::int64_t dh, std::int64_t dw, std::int64_t groups) {
  ops::Conv2dOptions o;
  o.stride_h = sh;
  o.stride_w = sw;
  o.pad_h = ph;
  o.pad_w = pw;
  o.dilation_h = dh;
  o.dilation_w = dw;
  o.groups = groups;
  return o;
}

class OpsConvGradCheck : public ::testing::TestWithParam<ConvConfig> {};

TEST_P(OpsConvGradCheck, MatchesFiniteDifferences) {
  const ConvConfig& cfg = GetParam();
  std::vector<Tensor> inputs{random_tensor(cfg.x, 1), random_tensor(cfg.w, 2)};
  if (cfg.bias) inputs.push_back(random_tensor({cfg.w[0]}, 3));
  const auto op = [&](const std::vector<Tensor>& in) {
    return ops::conv2d(in[0], in[1], cfg.bias ? in[2] : Tensor(), cfg.o);
  };
  EXPECT_TRUE(check_gradients(op, inputs, 1e-2, 1e-2, 1e-3, 160));
}

INSTANTIATE_TEST_SUITE_P(
    Configs, OpsConvGradCheck,
    ::testing::Values(
        ConvConfig{"basic", {2, 3, 5, 5}, {4, 3, 3, 3}, true, conv_options(1, 1, 1, 1, 1, 1, 1)},
        ConvConfig{"stride2", {2, 2, 7, 6}, {3, 2, 3, 3}, false, conv_options(2, 2, 1, 1, 1, 1, 1)},
        ConvConfig{"dilation", {1, 2, 8, 8}, {2, 2, 3, 3}, true, conv_options(1, 1, 2, 2, 2, 2, 1)},
        ConvConfig{"groups", {2, 4, 5, 5}, {6, 2, 3, 3}, true, conv_options(1, 1, 1, 1, 1, 1, 2)},
        ConvConfig{
            "depthwise", {2, 3, 6, 6}, {3, 1, 3, 3}, false, conv_options(2, 2, 1, 1, 1, 1, 3)},
        ConvConfig{
            "nonsquare", {2, 3, 7, 6}, {4, 3, 2, 3}, true, conv_options(2, 1, 1, 0, 1, 2, 1)},
        ConvConfig{
            "blocked16", {3, 16, 4, 4}, {16, 16, 3, 3}, true, conv_options(1, 1, 1, 1, 1, 1, 1)}),
    [](const auto& info) { return std::string(info.param.name); });

// The same configurations in channels_last: x [N, H, W, C], y [N, H', W', C'].
class OpsConvChannelsLast : public ::testing::TestWithParam<ConvConfig> {
 protected:
  static ops::Conv2dOptions last(ops::Conv2dOptions o) {
    o.channels_last = true;
    return o;
  }
};

TEST_P(OpsConvChannelsLast, MatchesFiniteDifferences) {
  const ConvConfig& cfg = GetParam();
  const Shape x_shape{cfg.x[0], cfg.x[2], cfg.x[3], cfg.x[1]};
  std::vector<Tensor> inputs{random_tensor(x_shape, 1), random_tensor(cfg.w, 2)};
  if (cfg.bias) inputs.push_back(random_tensor({cfg.w[0]}, 3));
  const auto op = [&](const std::vector<Tensor>& in) {
    return ops::conv2d(in[0], in[1], cfg.bias ? in[2] : Tensor(), last(cfg.o));
  };
  EXPECT_TRUE(check_gradients(op, inputs, 1e-2, 1e-2, 1e-3, 160));
}

TEST_P(OpsConvChannelsLast, IsChannelsFirstTransposed) {
  // y, dx, dW and db against channels_first on the transposed x and upstream.
  const ConvConfig& cfg = GetParam();
  Tensor x = leaf(random_tensor(cfg.x, 4));
  Tensor w = leaf(random_tensor(cfg.w, 5));
  Tensor b = cfg.bias ? leaf(random_tensor({cfg.w[0]}, 6)) : Tensor();
  const Tensor y = ops::conv2d(x, w, b, cfg.o);
  const Tensor upstream = random_tensor(y.shape(), 7);
  grads_of(y, upstream, cfg.bias ? std::vector<Tensor>{x, w, b} : std::vector<Tensor>{x, w});

  Tensor xl = leaf(x.detach().permute({0, 2, 3, 1}).contiguous());
  Tensor wl = leaf(w.detach());
  Tensor bl = cfg.bias ? leaf(b.detach()) : Tensor();
  const Tensor yl = ops::conv2d(xl, wl, bl, last(cfg.o));
  ASSERT_EQ(yl.shape(), (Shape{y.size(0), y.size(2), y.size(3), y.size(1)}));
  EXPECT_TRUE(tensors_close(yl.permute({0, 3, 1, 2}), y, 1e-5, 1e-5));
  grads_of(yl, upstream.permute({0, 2, 3, 1}).contiguous(),
           cfg.bias ? std::vector<Tensor>{xl, wl, bl} : std::vector<Tensor>{xl, wl});
  EXPECT_TRUE(tensors_close(xl.grad().permute({0, 3, 1, 2}), x.grad(), 1e-5, 1e-5));
  EXPECT_TRUE(tensors_close(wl.grad(), w.grad(), 1e-5, 1e-5));
  if (cfg.bias) {
    EXPECT_TRUE(tensors_close(bl.grad(), b.grad(), 1e-5, 1e-5));
  }
}

INSTANTIATE_TEST_SUITE_P(
    Configs, OpsConvChannelsLast,
    ::testing::Values(
        ConvConfig{"basic", {2, 3, 5, 5}, {4, 3, 3, 3}, true, conv_options(1, 1, 1, 1, 1, 1, 1)},
        ConvConfig{"stride2", {2, 2, 7, 6}, {3, 2, 3, 3}, false, conv_options(2, 2, 1, 1, 1, 1, 1)},
        ConvConfig{
            "pointwise", {2, 5, 4, 3}, {6, 5, 1, 1}, true, conv_options(1, 1, 0, 0, 1, 1, 1)},
        ConvConfig{"groups", {2, 4, 5, 5}, {6, 2, 3, 3}, true, conv_options(1, 1, 1, 1, 1, 1, 2)},
        ConvConfig{
            "nonsquare", {2, 3, 7, 6}, {4, 3, 2, 3}, true, conv_options(2, 1, 1, 0, 1, 2, 1)},
        ConvConfig{
            "blocked16", {3, 16, 4, 4}, {16, 16, 3, 3}, true, conv_options(1, 1, 1, 1, 1, 1, 1)},
        ConvConfig{
            "stem7x7", {2, 3, 12, 12}, {8, 3, 7, 7}, false, conv_options(2, 2, 3, 3, 1, 1, 1)},
        ConvConfig{"downsample1x1",
                   {2, 8, 6, 6},
                   {16, 8, 1, 1},
                   false,
                   conv_options(2, 2, 0, 0, 1, 1, 1)}),
    [](const auto& info) { return std::string(info.param.name); });

// ---- A direct double reference, for shapes too large for the golden file ----

struct Reference {
  std::vector<double> y, dx, dw, db;
};

Reference reference_conv(const std::vector<float>& x, const Shape& xs, const std::vector<float>& w,
                         const Shape& ws, const std::vector<float>& b,
                         const std::vector<float>& upstream, const ops::Conv2dOptions& o,
                         std::int64_t oh, std::int64_t ow) {
  const std::int64_t n = xs[0], ci = xs[1], h = xs[2], wd = xs[3];
  const std::int64_t co = ws[0], cig = ws[1], kh = ws[2], kw = ws[3];
  const std::int64_t cog = co / o.groups;
  Reference r;
  r.y.assign(static_cast<std::size_t>(n * co * oh * ow), 0.0);
  r.dx.assign(x.size(), 0.0);
  r.dw.assign(w.size(), 0.0);
  r.db.assign(static_cast<std::size_t>(co), 0.0);
  for (std::int64_t in = 0; in < n; ++in) {
    for (std::int64_t oc = 0; oc < co; ++oc) {
      const std::int64_t g = oc / cog;
      for (std::int64_t oy = 0; oy < oh; ++oy) {
        for (std::int64_t ox = 0; ox < ow; ++ox) {
          const auto yi = static_cast<std::size_t>(((in * co + oc) * oh + oy) * ow + ox);
          double total = b.empty() ? 0.0 : b[static_cast<std::size_t>(oc)];
          const double up = upstream[yi];
          r.db[static_cast<std::size_t>(oc)] += up;
          for (std::int64_t c = 0; c < cig; ++c) {
            const std::int64_t ic = g * cig + c;
            for (std::int64_t ky = 0; ky < kh; ++ky) {
              const std::int64_t iy = oy * o.stride_h - o.pad_h + ky * o.dilation_h;
              if (iy < 0 || iy >= h) continue;
              for (std::int64_t kx = 0; kx < kw; ++kx) {
                const std::int64_t ix = ox * o.stride_w - o.pad_w + kx * o.dilation_w;
                if (ix < 0 || ix >= wd) continue;
                const auto xi = static_cast<std::size_t>(((in * ci + ic) * h + iy) * wd + ix);
                const auto wi = static_cast<std::size_t>(((oc * cig + c) * kh + ky) * kw + kx);
                total += static_cast<double>(x[xi]) * w[wi];
                r.dx[xi] += up * w[wi];
                r.dw[wi] += up * x[xi];
              }
            }
          }
          r.y[yi] = total;
        }
      }
    }
  }
  return r;
}

Tensor as_tensor(const std::vector<double>& v, const Shape& shape) {
  return Tensor::from_vector(std::vector<float>(v.begin(), v.end()), shape);
}

class OpsConvReference : public ::testing::TestWithParam<ConvConfig> {};

TEST_P(OpsConvReference, MatchesDirectConvolution) {
  const ConvConfig& cfg = GetParam();
  Tensor x = random_tensor(cfg.x, 11);
  Tensor w = random_tensor(cfg.w, 12, -0.3F, 0.3F);
  Tensor b = cfg.bias ? random_tensor({cfg.w[0]}, 13) : Tensor();
  x.set_requires_grad(true);
  w.set_requires_grad(true);
  if (cfg.bias) b.set_requires_grad(true);
  const Tensor y = ops::conv2d(x, w, b, cfg.o);
  const Tensor upstream = random_tensor(y.shape(), 14);
  const Reference r = reference_conv(x.to_vector(), cfg.x, w.to_vector(), cfg.w,
                                     cfg.bias ? b.to_vector() : std::vector<float>{},
                                     upstream.to_vector(), cfg.o, y.size(2), y.size(3));
  EXPECT_TRUE(tensors_close(y, as_tensor(r.y, y.shape()), 1e-4, 1e-4));
  grads_of(y, upstream, {x, w});
  EXPECT_TRUE(tensors_close(x.grad(), as_tensor(r.dx, cfg.x), 1e-4, 1e-4));
  EXPECT_TRUE(tensors_close(w.grad(), as_tensor(r.dw, cfg.w), 1e-4, 1e-3));
  if (cfg.bias) {
    EXPECT_TRUE(tensors_close(b.grad(), as_tensor(r.db, {cfg.w[0]}), 1e-4, 1e-3));
  }
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, OpsConvReference,
    ::testing::Values(
        ConvConfig{"resnet_block_odd_batch",
                   {5, 32, 14, 14},
                   {32, 32, 3, 3},
                   false,
                   conv_options(1, 1, 1, 1, 1, 1, 1)},
        ConvConfig{
            "downsample", {3, 32, 9, 9}, {64, 32, 3, 3}, true, conv_options(2, 2, 1, 1, 1, 1, 1)},
        ConvConfig{"projection_1x1",
                   {4, 32, 8, 8},
                   {16, 32, 1, 1},
                   false,
                   conv_options(2, 2, 0, 0, 1, 1, 1)},
        ConvConfig{"depthwise32",
                   {3, 32, 10, 10},
                   {32, 1, 3, 3},
                   true,
                   conv_options(1, 1, 1, 1, 1, 1, 32)},
        ConvConfig{"groups4_dilated",
                   {2, 32, 11, 11},
                   {32, 8, 3, 3},
                   false,
                   conv_options(1, 1, 2, 2, 2, 2, 4)},
        ConvConfig{
            "stem_7x7", {2, 3, 20, 20}, {16, 3, 7, 7}, false, conv_options(2, 2, 3, 3, 1, 1, 1)},
        ConvConfig{
            "one_image", {1, 16, 5, 7}, {8, 16, 3, 2}, true, conv_options(1, 2, 1, 0, 1, 1, 1)},
        ConvConfig{"padding_beyond_kernel",
                   {2, 3, 4, 4},
                   {4, 3, 1, 1},
                   true,
                   conv_options(1, 1, 2, 2, 1, 1, 1)},
        ConvConfig{"batch_of_seven",
                   {7, 16, 6, 6},
                   {16, 16, 3, 3},
                   true,
                   conv_options(1, 1, 1, 1, 1, 1, 1)}),
    [](const auto& info) { return std::string(info.param.name); });

TEST(OpsConv, OnlyTheRequestedGradients) {
  Tensor x = random_tensor({2, 3, 5, 5}, 1);
  Tensor w = random_tensor({4, 3, 3, 3}, 2);
  w.set_requires_grad(true);
  ops::sum(ops::conv2d(x, w)).backward();
  EXPECT_TRUE(w.grad().defined());
  EXPECT_FALSE(x.grad().defined());
}

TEST(OpsConv, EmptyBatch) {
  Tensor x = Tensor::zeros({0, 3, 5, 5});
  Tensor w = random_tensor({4, 3, 3, 3}, 2);
  Tensor b = random_tensor({4}, 3);
  x.set_requires_grad(true);
  w.set_requires_grad(true);
  b.set_requires_grad(true);
  const Tensor y = ops::conv2d(x, w, b);
  EXPECT_EQ(y.shape(), (Shape{0, 4, 3, 3}));
  ops::sum(y).backward();
  EXPECT_EQ(w.grad().to_vector(), std::vector<float>(108, 0.0F));
  EXPECT_EQ(b.grad().to_vector(), std::vector<float>(4, 0.0F));
}

TEST(OpsConv, HalfPrecisionComputesInFloat) {
  const Tensor x = random_tensor({2, 3, 5, 5}, 1);
  const Tensor w = random_tensor({4, 3, 3, 3}, 2);
  const Tensor y = ops::conv2d(x, w, {}, conv_options(1, 1, 1, 1, 1, 1, 1));
  const Tensor yh = ops::conv2d(x.to(rig::DType::bf16), w.to(rig::DType::bf16), {},
                                conv_options(1, 1, 1, 1, 1, 1, 1));
  EXPECT_EQ(yh.dtype(), rig::DType::bf16);
  EXPECT_TRUE(tensors_close(yh.to(rig::DType::f32), y, 3e-2, 3e-2));
}

TEST(OpsConv, ErrorsNameTheShapes) {
  const Tensor x = Tensor::zeros({2, 3, 8, 8});
  EXPECT_TRUE(contains(error_of([&] {
                         ops::conv2d(x, Tensor::zeros({4, 2, 3, 3}));
                       }),
                       "conv2d: x [2,3,8,8], weight [4,2,3,3]: weight expects 2 input channels"));
  EXPECT_TRUE(contains(error_of([&] {
                         ops::conv2d(Tensor::zeros({3, 8, 8}), Tensor::zeros({4, 3, 3, 3}));
                       }),
                       "conv2d: x [3,8,8], weight [4,3,3,3]: x must be [N, C, H, W]"));
  ops::Conv2dOptions last;
  last.channels_last = true;
  EXPECT_TRUE(
      contains(error_of([&] {
                 ops::conv2d(Tensor::zeros({3, 8, 8}), Tensor::zeros({4, 3, 3, 3}), {}, last);
               }),
               "x must be [N, H, W, C] (channels_last)"));
  EXPECT_TRUE(contains(error_of([&] {
                         ops::conv2d(x, Tensor::zeros({4, 3, 3, 3}), {}, last);  // [N, C, H, W]
                       }),
                       "conv2d: x [2,3,8,8], weight [4,3,3,3]: weight expects 3 input channels "
                       "(3 per group x 1 groups), x has 8"));
  ops::Conv2dOptions groups;
  groups.groups = 2;
  EXPECT_TRUE(contains(error_of([&] {
                         ops::conv2d(x, Tensor::zeros({4, 1, 3, 3}), {}, groups);
                       }),
                       "groups 2 must divide the input channels 3"));
  EXPECT_TRUE(contains(error_of([&] {
                         ops::conv2d(x, Tensor::zeros({4, 3, 3, 3}), Tensor::zeros({5}));
                       }),
                       "bias [5] must be [4]"));
  EXPECT_TRUE(contains(error_of([&] {
                         ops::conv2d(x, Tensor::zeros({4, 3, 9, 9}));
                       }),
                       "the padded input 8x8 is smaller than the (dilated) kernel 9x9"));
  ops::Conv2dOptions bad;
  bad.stride_h = 0;
  EXPECT_TRUE(contains(error_of([&] {
                         ops::conv2d(x, Tensor::zeros({4, 3, 3, 3}), {}, bad);
                       }),
                       "stride 0x1"));
  EXPECT_TRUE(contains(
      error_of([&] {
        ops::conv2d(Tensor::zeros({2, 3, 8, 8}, rig::DType::i64), Tensor::zeros({4, 3, 3, 3}));
      }),
      "conv2d: x must be f32 or f16 or bf16"));
}

}  // namespace
