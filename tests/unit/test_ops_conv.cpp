// conv2d: golden values from PyTorch, finite differences, a direct double
// reference at oneDNN's blocked-layout sizes (odd batches, 32 channels), and
// error messages.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "backend/backend.hpp"
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

// On a CPU with AVX512-BF16, a bf16 convolution without bias runs oneDNN's
// bf16 kernels (products of bf16 values summed in f32, each result rounded
// once): the f32 path's results on the same values, rounded, up to the order
// of the sums (one bf16 ulp, 2^-7 relative at most). NCHW and NHWC.
class OpsConvBf16 : public ::testing::TestWithParam<ConvConfig> {};

TEST_P(OpsConvBf16, MatchesTheF32PathOnTheSameValues) {
  if (!rig::backend::cpu_backend().convolves_16bit(rig::DType::bf16)) {
    GTEST_SKIP() << "this CPU has no AVX512-BF16: bf16 convolutions compute in f32 there";
  }
  const ConvConfig& cfg = GetParam();
  for (const bool last : {false, true}) {
    SCOPED_TRACE(last ? "channels_last" : "channels_first");
    ops::Conv2dOptions o = cfg.o;
    o.channels_last = last;
    // bf16 values, held in f32 for the reference.
    Tensor x = random_tensor(cfg.x, 1).to(rig::DType::bf16).to(rig::DType::f32);
    if (last) x = x.permute({0, 2, 3, 1}).contiguous();
    const Tensor w = random_tensor(cfg.w, 2).to(rig::DType::bf16).to(rig::DType::f32);
    const Tensor xf = x.detach().set_requires_grad(true);
    const Tensor wf = w.detach().set_requires_grad(true);
    const Tensor y = ops::conv2d(xf, wf, {}, o);
    const Tensor r = random_tensor(y.shape(), 3).to(rig::DType::bf16).to(rig::DType::f32);
    ops::sum(ops::mul(y, r)).backward();

    const Tensor xb = x.to(rig::DType::bf16).set_requires_grad(true);
    const Tensor wb = w.to(rig::DType::bf16).set_requires_grad(true);
    const Tensor yb = ops::conv2d(xb, wb, {}, o);
    ops::sum(ops::mul(yb, r.to(rig::DType::bf16))).backward();
    EXPECT_EQ(yb.dtype(), rig::DType::bf16);
    EXPECT_EQ(xb.grad().dtype(), rig::DType::bf16);
    EXPECT_TRUE(tensors_close(yb.to(rig::DType::f32), y, 8e-3, 1e-3));
    EXPECT_TRUE(tensors_close(xb.grad().to(rig::DType::f32), xf.grad(), 8e-3, 2e-3));
    EXPECT_TRUE(tensors_close(wb.grad().to(rig::DType::f32), wf.grad(), 8e-3, 2e-3));
  }
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, OpsConvBf16,
    ::testing::Values(
        // Odd batches split into uneven chunks; 3 input channels as a stem's.
        ConvConfig{
            "basic", {5, 16, 9, 9}, {32, 16, 3, 3}, false, conv_options(1, 1, 1, 1, 1, 1, 1)},
        ConvConfig{
            "stride2", {3, 8, 10, 10}, {16, 8, 3, 3}, false, conv_options(2, 2, 1, 1, 1, 1, 1)},
        ConvConfig{
            "pointwise", {4, 32, 7, 7}, {64, 32, 1, 1}, false, conv_options(1, 1, 0, 0, 1, 1, 1)},
        ConvConfig{"grouped", {2, 8, 6, 6}, {8, 4, 3, 3}, false, conv_options(1, 1, 1, 1, 1, 1, 2)},
        ConvConfig{"stem", {3, 3, 11, 11}, {5, 3, 3, 3}, false, conv_options(2, 2, 1, 1, 1, 1, 1)}),
    [](const auto& info) { return std::string(info.param.name); });

// The CPU back end's bf16 kernels themselves: y as the f32 path's rounded;
// the gradients with `accumulate` made in f32, added to what dx and dw hold,
// rounded once.
TEST(OpsConv, Bf16KernelsOfTheCpuBackEnd) {
  rig::backend::Backend& cpu = rig::backend::cpu_backend();
  if (!cpu.convolves_16bit(rig::DType::bf16)) {
    GTEST_SKIP() << "this CPU has no AVX512-BF16: bf16 convolutions compute in f32 there";
  }
  rig::backend::Conv2dShape s;
  s.n = 3;
  s.c_in = 8;
  s.h = s.w = 6;
  s.c_out = 16;
  s.kernel_h = s.kernel_w = 3;
  s.pad_h = s.pad_w = 1;
  s.out_h = s.out_w = 6;
  const auto bf16_values = [](const Shape& shape, std::uint64_t seed) {
    return random_tensor(shape, seed).to(rig::DType::bf16).to(rig::DType::f32);
  };
  const Tensor x = bf16_values({3, 8, 6, 6}, 1), w = bf16_values({16, 8, 3, 3}, 2),
               dy = bf16_values({3, 16, 6, 6}, 3), dx_old = bf16_values({3, 8, 6, 6}, 4),
               dw_old = bf16_values({16, 8, 3, 3}, 5);
  const Tensor xb = x.to(rig::DType::bf16), wb = w.to(rig::DType::bf16),
               dyb = dy.to(rig::DType::bf16);
  Tensor y = Tensor::zeros(dy.shape()), yb = Tensor::zeros(dy.shape(), rig::DType::bf16);
  cpu.conv2d_forward(s, x.data<float>(), w.data<float>(), nullptr, y.data<float>());
  cpu.conv2d_forward_16(s, rig::DType::bf16, xb.raw_data(), wb.raw_data(), yb.raw_data());
  EXPECT_TRUE(tensors_close(yb.to(rig::DType::f32), y, 8e-3, 1e-3));

  Tensor dx_made = Tensor::zeros(x.shape()), dw_made = Tensor::zeros(w.shape());
  cpu.conv2d_backward(s, x.data<float>(), w.data<float>(), dy.data<float>(), dx_made.data<float>(),
                      dw_made.data<float>(), nullptr);
  Tensor dx = dx_old.to(rig::DType::bf16), dw = dw_old.to(rig::DType::bf16);
  cpu.conv2d_backward_16(s, rig::DType::bf16, xb.raw_data(), wb.raw_data(), dyb.raw_data(),
                         dx.raw_data(), dw.raw_data(), {true, true});
  EXPECT_TRUE(tensors_close(dx.to(rig::DType::f32), ops::add(dx_made, dx_old), 8e-3, 2e-3));
  EXPECT_TRUE(tensors_close(dw.to(rig::DType::f32), ops::add(dw_made, dw_old), 8e-3, 2e-3));
  // Without accumulate they are overwritten.
  cpu.conv2d_backward_16(s, rig::DType::bf16, xb.raw_data(), wb.raw_data(), dyb.raw_data(),
                         dx.raw_data(), dw.raw_data(), {false, false});
  EXPECT_TRUE(tensors_close(dx.to(rig::DType::f32), dx_made, 8e-3, 2e-3));
  EXPECT_TRUE(tensors_close(dw.to(rig::DType::f32), dw_made, 8e-3, 2e-3));
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
