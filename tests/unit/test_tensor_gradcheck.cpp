// Finite-difference gradient checks for every differentiable core math op:
// several shapes, broadcasting, and non-contiguous inputs (views built inside
// the op from contiguous leaves).
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "gradcheck.hpp"
#include "rig/autograd.hpp"
#include "rig/ops.hpp"
#include "test_tensor_util.hpp"

namespace {

using rig::Shape;
using rig::Tensor;
using namespace rig_test;
namespace ops = rig::ops;

class TensorGradCheck : public ::testing::Test {
 protected:
  std::mt19937 rng{42};
  Tensor rand(Shape shape, float min_magnitude = 0.0F) {
    return random_tensor(std::move(shape), rng, min_magnitude);
  }
  Tensor uniform(Shape shape, float low, float high) {
    return uniform_tensor(std::move(shape), rng, low, high);
  }
  Tensor labels(std::vector<std::int64_t> v) {
    const auto n = static_cast<std::int64_t>(v.size());
    return Tensor::from_vector(v, {n});
  }
};

// ---- matmul ------------------------------------------------------------------------

TEST_F(TensorGradCheck, MatmulEveryTransposeCombination) {
  for (bool ta : {false, true}) {
    for (bool tb : {false, true}) {
      // op(a) is [3,4], op(b) is [4,5].
      Tensor a = ta ? rand({4, 3}) : rand({3, 4});
      Tensor b = tb ? rand({5, 4}) : rand({4, 5});
      EXPECT_TRUE(check_gradients(
          [ta, tb](const std::vector<Tensor>& in) { return ops::matmul(in[0], in[1], ta, tb); },
          {a, b}))
          << "transpose_a=" << ta << " transpose_b=" << tb;
    }
  }
}

TEST_F(TensorGradCheck, MatmulBatchedAndBroadcast) {
  EXPECT_TRUE(check_gradients([](const auto& in) { return ops::matmul(in[0], in[1]); },
                              {rand({2, 3, 4}), rand({2, 4, 2})}));
  // Batch axes broadcast both ways: [2,1] x [3] -> [2,3].
  EXPECT_TRUE(check_gradients([](const auto& in) { return ops::matmul(in[0], in[1], false, true); },
                              {rand({2, 1, 3, 4}), rand({3, 2, 4})}));
  // A batched x a 2-D weight (the folded single-GEMM path), both flags.
  for (bool ta : {false, true}) {
    for (bool tb : {false, true}) {
      Tensor a = ta ? rand({2, 3, 4, 3}) : rand({2, 3, 3, 4});
      Tensor b = tb ? rand({2, 4}) : rand({4, 2});
      EXPECT_TRUE(check_gradients(
          [ta, tb](const auto& in) { return ops::matmul(in[0], in[1], ta, tb); }, {a, b}))
          << "transpose_a=" << ta << " transpose_b=" << tb;
    }
  }
  // A 2-D left operand against a batched right one.
  EXPECT_TRUE(check_gradients([](const auto& in) { return ops::matmul(in[0], in[1]); },
                              {rand({3, 4}), rand({2, 4, 2})}));
}

TEST_F(TensorGradCheck, MatmulNonContiguousInputs) {
  // A transposed view (BLAS flag), a strided slice (copied) and a permuted batch.
  EXPECT_TRUE(check_gradients(
      [](const auto& in) { return ops::matmul(in[0].transpose(0, 1), in[1].slice(1, 0, 6, 2)); },
      {rand({4, 3}), rand({4, 6})}));
  EXPECT_TRUE(check_gradients(
      [](const auto& in) {
        return ops::matmul(in[0].permute({1, 0, 2}), in[1].transpose(-1, -2));
      },
      {rand({3, 2, 4}), rand({2, 5, 4})}));
}

// ---- linear ---------------------------------------------------------------------------

TEST_F(TensorGradCheck, LinearEveryActivation) {
  for (auto act : {ops::Activation::none, ops::Activation::relu, ops::Activation::gelu,
                   ops::Activation::tanh, ops::Activation::sigmoid}) {
    EXPECT_TRUE(
        check_gradients([act](const auto& in) { return ops::linear(in[0], in[1], in[2], act); },
                        {rand({2, 3, 4}, 0.1F), rand({5, 4}), rand({5})}))
        << "activation " << static_cast<int>(act);
  }
}

TEST_F(TensorGradCheck, LinearWithoutBiasAndStridedInput) {
  EXPECT_TRUE(check_gradients([](const auto& in) { return ops::linear(in[0], in[1]); },
                              {rand({3, 4}), rand({2, 4})}));
  EXPECT_TRUE(check_gradients(
      [](const auto& in) { return ops::linear(in[0].transpose(0, 1), in[1], in[2]); },
      {rand({4, 3}), rand({2, 4}), rand({2})}));
}

TEST_F(TensorGradCheck, AddReluWithBroadcasting) {
  // b [4] broadcast over a's rows; every a + b kept 0.1 off relu's kink.
  const Tensor b = rand({4});
  std::vector<float> a = rand({3, 4}).to_vector();
  const std::vector<float> bv = b.to_vector();
  for (std::size_t i = 0; i < a.size(); ++i) {
    if (std::fabs(a[i] + bv[i % 4]) < 0.1F) a[i] += 0.3F;
  }
  const Tensor at = Tensor::from_vector(a, {3, 4});
  EXPECT_TRUE(check_gradients([](const auto& in) { return ops::add_relu(in[0], in[1]); }, {at, b}));
  EXPECT_EQ(ops::add_relu(at, b).to_vector(), ops::relu(ops::add(at, b)).to_vector());
}

TEST_F(TensorGradCheck, LinearWithOutputDropout) {
  // A fixed key: the same mask at every evaluation. Inputs kept off relu's kink.
  const ops::OutputDropout dropout{0.3F, {7, 1, 0, 5}};
  EXPECT_TRUE(check_gradients(
      [&](const auto& in) {
        return ops::linear(in[0], in[1], in[2], ops::Activation::relu, dropout);
      },
      {rand({2, 5, 4}, 0.1F), rand({6, 4}), rand({6})}));
}

// The fused output dropout is dropout(linear(...)) bit for bit, forward and
// backward, at both matmul precisions.
TEST_F(TensorGradCheck, LinearOutputDropoutIsDropoutOfLinear) {
  const ops::OutputDropout dropout{0.4F, {3, 9, 2, 11}};
  for (auto precision : {rig::MatmulPrecision::f32, rig::MatmulPrecision::bf16}) {
    const ops::MatmulPrecisionScope scope(precision);
    const Tensor x0 = rand({4, 33, 40}), w0 = rand({96, 40}), b0 = rand({96}),
                 up = rand({4, 33, 96});
    const auto run = [&](bool fused) {
      std::vector<Tensor> in{x0.detach().clone(), w0.detach().clone(), b0.detach().clone()};
      for (auto& t : in) t.set_requires_grad(true);
      const Tensor y = fused ? ops::linear(in[0], in[1], in[2], ops::Activation::relu, dropout)
                             : ops::dropout(ops::linear(in[0], in[1], in[2], ops::Activation::relu),
                                            dropout.p, dropout.key);
      ops::sum(ops::mul(y, up)).backward();
      return std::vector<Tensor>{y, in[0].grad(), in[1].grad(), in[2].grad()};
    };
    const std::vector<Tensor> fused = run(true), composed = run(false);
    for (std::size_t i = 0; i < fused.size(); ++i) {
      EXPECT_EQ(fused[i].to_vector(), composed[i].to_vector())
          << "output " << i << ", precision " << static_cast<int>(precision);
    }
  }
  // p = 0: linear itself; p = 1: zeros, as dropout gives.
  const Tensor x = rand({3, 4}), w = rand({5, 4}), b = rand({5});
  EXPECT_EQ(ops::linear(x, w, b, ops::Activation::relu, {}).to_vector(),
            ops::linear(x, w, b, ops::Activation::relu).to_vector());
  EXPECT_EQ(ops::linear(x, w, b, ops::Activation::relu, {1.0F, {1, 2, 3, 4}}).to_vector(),
            std::vector<float>(15, 0.0F));
}

// An unscaled output dropout (relu(x W^T + b) times the mask) read by a
// layer with input_scale 1 / (1 - p) is the scaled pair: the same mask, the
// scale applied by the second layer's products (alpha), forward and
// backward; within f32 rounding of the scaled pair, whose scale is a pass.
// Finite differences through both layers.
TEST_F(TensorGradCheck, UnscaledOutputDropoutReadWithInputScale) {
  const ops::OutputDropout scaled{0.25F, {5, 2, 0, 8}};
  ops::OutputDropout unscaled = scaled;
  unscaled.scaled = false;
  const float keep = 1.0F / (1.0F - scaled.p);
  const Tensor x0 = rand({3, 7, 12}), w0 = rand({20, 12}), b0 = rand({20}), v0 = rand({6, 20}),
               c0 = rand({6}), up = rand({3, 7, 6});
  const auto run = [&](bool fold) {
    std::vector<Tensor> in{x0.detach().clone(), w0.detach().clone(), b0.detach().clone(),
                           v0.detach().clone(), c0.detach().clone()};
    for (auto& t : in) t.set_requires_grad(true);
    const Tensor h =
        ops::linear(in[0], in[1], in[2], ops::Activation::relu, fold ? unscaled : scaled);
    const Tensor y = fold ? ops::linear(h, in[3], in[4], ops::Activation::none, {}, keep)
                          : ops::linear(h, in[3], in[4]);
    ops::sum(ops::mul(y, up)).backward();
    return std::vector<Tensor>{y,           in[0].grad(), in[1].grad(), in[2].grad(), in[3].grad(),
                               in[4].grad()};
  };
  const std::vector<Tensor> folded = run(true), pass = run(false);
  for (std::size_t i = 0; i < folded.size(); ++i) {
    EXPECT_TRUE(tensors_close(folded[i], pass[i], 1e-5, 1e-6)) << "output " << i;
  }
  // The unscaled layer's kept outputs are relu's exactly.
  const Tensor relu = ops::linear(x0, w0, b0, ops::Activation::relu);
  const Tensor kept = ops::linear(x0, w0, b0, ops::Activation::relu, unscaled);
  const std::vector<float> r = relu.to_vector(), k = kept.to_vector();
  int zeroed = 0;
  for (std::size_t i = 0; i < r.size(); ++i) {
    EXPECT_TRUE(k[i] == r[i] || k[i] == 0.0F) << i;
    zeroed += k[i] == 0.0F && r[i] != 0.0F ? 1 : 0;
  }
  EXPECT_GT(zeroed, 0) << "the mask dropped nothing";
  EXPECT_TRUE(check_gradients(
      [&](const auto& in) {
        return ops::linear(ops::linear(in[0], in[1], in[2], ops::Activation::relu, unscaled), in[3],
                           in[4], ops::Activation::none, {}, keep);
      },
      {rand({2, 5, 4}, 0.1F), rand({6, 4}), rand({6}), rand({3, 6}), rand({3})}));
}

TEST_F(TensorGradCheck, LinearOutputDropoutErrors) {
  const Tensor x = rand({3, 4}), w = rand({5, 4});
  EXPECT_TRUE(contains(error_of([&] {
                         ops::linear(x, w, {}, ops::Activation::gelu, {0.1F, {}});
                       }),
                       "output dropout needs activation relu"));
  EXPECT_TRUE(contains(error_of([&] {
                         ops::linear(x, w, {}, ops::Activation::relu, {1.5F, {}});
                       }),
                       "p = 1.5 is not in [0, 1]"));
}

// ---- elementwise -------------------------------------------------------------------------

TEST_F(TensorGradCheck, BinaryOpsSameShapeAndBroadcast) {
  using Fn = Tensor (*)(const Tensor&, const Tensor&);
  const std::pair<const char*, Fn> fns[] = {
      {"add", &ops::add}, {"sub", &ops::sub}, {"mul", &ops::mul}, {"div", &ops::div}};
  const std::pair<Shape, Shape> shapes[] = {
      {{3, 4}, {3, 4}}, {{5, 3}, {3}}, {{2, 3, 4}, {3, 1}}, {{2, 1, 4}, {3, 1}}, {{3, 2}, {}}};
  for (const auto& [name, fn] : fns) {
    for (const auto& [sa, sb] : shapes) {
      const bool is_div = std::string(name) == "div";
      Tensor a = rand(sa);
      Tensor b = is_div ? uniform(sb, 0.5F, 1.5F) : rand(sb);
      EXPECT_TRUE(check_gradients([fn = fn](const auto& in) { return fn(in[0], in[1]); }, {a, b}))
          << name << " " << rig::to_string(sa) << " " << rig::to_string(sb);
    }
  }
}

TEST_F(TensorGradCheck, BinaryOpsNonContiguous) {
  EXPECT_TRUE(check_gradients(
      [](const auto& in) { return ops::mul(in[0].transpose(0, 1), in[1].slice(0, 0, 6, 2)); },
      {rand({4, 3}), rand({6, 4})}));
  EXPECT_TRUE(check_gradients([](const auto& in) { return ops::div(in[0], in[1].transpose(0, 1)); },
                              {rand({2, 3}), uniform({3, 2}, 0.5F, 1.5F)}));
}

TEST_F(TensorGradCheck, SameTensorOnBothSides) {
  EXPECT_TRUE(
      check_gradients([](const auto& in) { return ops::mul(in[0], in[0]); }, {rand({5}, 0.2F)}));
  EXPECT_TRUE(check_gradients([](const auto& in) { return ops::div(in[0], in[0]); },
                              {uniform({4}, 0.5F, 1.5F)}));
}

TEST_F(TensorGradCheck, ScalarOps) {
  EXPECT_TRUE(
      check_gradients([](const auto& in) { return ops::mul_scalar(in[0], -2.5F); }, {rand({7})}));
  EXPECT_TRUE(
      check_gradients([](const auto& in) { return ops::add_scalar(in[0], 0.3F); }, {rand({7})}));
  for (float p : {2.0F, 3.0F, 0.5F, -1.0F, -0.5F, 1.7F}) {
    EXPECT_TRUE(check_gradients([p](const auto& in) { return ops::pow_scalar(in[0], p); },
                                {uniform({2, 5}, 0.3F, 2.0F)}))
        << "exponent " << p;
  }
}

TEST_F(TensorGradCheck, UnaryOps) {
  using Fn = Tensor (*)(const Tensor&);
  const std::pair<const char*, Fn> anywhere[] = {
      {"neg", &ops::neg}, {"exp", &ops::exp}, {"tanh", &ops::tanh}, {"sigmoid", &ops::sigmoid}};
  for (const auto& [name, fn] : anywhere) {
    EXPECT_TRUE(check_gradients([fn = fn](const auto& in) { return fn(in[0]); }, {rand({3, 4})}))
        << name;
  }
  const std::pair<const char*, Fn> positive[] = {
      {"log", &ops::log}, {"sqrt", &ops::sqrt}, {"rsqrt", &ops::rsqrt}};
  for (const auto& [name, fn] : positive) {
    EXPECT_TRUE(check_gradients([fn = fn](const auto& in) { return fn(in[0]); },
                                {uniform({3, 4}, 0.3F, 2.0F)}))
        << name;
  }
  EXPECT_TRUE(
      check_gradients([](const auto& in) { return ops::relu(in[0]); }, {rand({3, 4}, 0.1F)}));
  EXPECT_TRUE(check_gradients([](const auto& in) { return ops::gelu(in[0]); },
                              {uniform({3, 5}, -3.0F, 3.0F)}));
  EXPECT_TRUE(check_gradients([](const auto& in) { return ops::gelu(in[0], true); },
                              {uniform({3, 5}, -3.0F, 3.0F)}));
  // A strided input goes through the contiguous copy.
  EXPECT_TRUE(check_gradients([](const auto& in) { return ops::tanh(in[0].transpose(0, 1)); },
                              {rand({3, 4})}));
}

TEST_F(TensorGradCheck, Activate) {
  for (auto act : {ops::Activation::none, ops::Activation::relu, ops::Activation::gelu,
                   ops::Activation::tanh, ops::Activation::sigmoid}) {
    EXPECT_TRUE(check_gradients([act](const auto& in) { return ops::activate(in[0], act); },
                                {rand({2, 6}, 0.1F)}));
  }
}

// ---- reductions ----------------------------------------------------------------------------

TEST_F(TensorGradCheck, SumAndMean) {
  EXPECT_TRUE(check_gradients([](const auto& in) { return ops::sum(in[0]); }, {rand({3, 4})}));
  EXPECT_TRUE(check_gradients([](const auto& in) { return ops::mean(in[0]); }, {rand({3, 4})}));
  const std::pair<std::vector<std::int64_t>, bool> cases[] = {{{0}, false},   {{1}, true},
                                                              {{-1}, false},  {{0, 2}, false},
                                                              {{1, 2}, true}, {{0, 1, 2}, false}};
  for (const auto& [axes, keepdim] : cases) {
    const auto ax = axes;
    const bool kd = keepdim;
    EXPECT_TRUE(check_gradients([ax, kd](const auto& in) { return ops::sum(in[0], ax, kd); },
                                {rand({2, 3, 4})}));
    EXPECT_TRUE(check_gradients([ax, kd](const auto& in) { return ops::mean(in[0], ax, kd); },
                                {rand({2, 3, 4})}));
  }
  EXPECT_TRUE(
      check_gradients([](const auto& in) { return ops::sum(in[0].transpose(0, 2), {1}, false); },
                      {rand({2, 3, 4})}));
}

TEST_F(TensorGradCheck, Max) {
  // Distinct values (no ties) so the numeric derivative is well defined.
  std::vector<float> v(24);
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>((i * 7) % 24) * 0.1F;
  Tensor x = Tensor::from_vector(v, {2, 3, 4});
  for (std::int64_t axis : {0, 1, 2, -1}) {
    for (bool keepdim : {false, true}) {
      EXPECT_TRUE(check_gradients(
          [axis, keepdim](const auto& in) { return ops::max(in[0], axis, keepdim); }, {x.clone()},
          1e-2))
          << "axis " << axis;
    }
  }
}

// ---- softmax / layer_norm ---------------------------------------------------------------------

TEST_F(TensorGradCheck, SoftmaxAndLogSoftmaxAnyAxis) {
  for (std::int64_t axis : {-1, 0, 1}) {
    EXPECT_TRUE(check_gradients([axis](const auto& in) { return ops::softmax(in[0], axis); },
                                {rand({3, 4, 5})}))
        << "axis " << axis;
    EXPECT_TRUE(check_gradients([axis](const auto& in) { return ops::log_softmax(in[0], axis); },
                                {rand({3, 4, 5})}))
        << "axis " << axis;
  }
  EXPECT_TRUE(check_gradients(
      [](const auto& in) { return ops::softmax(in[0].transpose(0, 1), -1); }, {rand({5, 3})}));
}

TEST_F(TensorGradCheck, MaskedSoftmax) {
  // Key-padding style mask [2,1,5] over [2,3,5]; the second batch's row is fully masked.
  const Tensor mask =
      Tensor::from_vector(std::vector<std::uint8_t>{1, 1, 0, 1, 0, 0, 0, 0, 0, 0}, {2, 1, 5});
  EXPECT_TRUE(check_gradients([mask](const auto& in) { return ops::softmax(in[0], -1, mask); },
                              {rand({2, 3, 5})}));
  // log_softmax: excluded outputs are -inf; the checker's weighted sum must not read them.
  EXPECT_TRUE(check_gradients(
      [mask](const auto& in) {
        const Tensor y = ops::log_softmax(in[0], -1, mask);
        return ops::where(mask.expand({2, 3, 5}), y, Tensor::zeros({2, 3, 5}));
      },
      {rand({2, 3, 5})}));
  // A mask along another axis than the last.
  const Tensor col = Tensor::from_vector(std::vector<std::uint8_t>{1, 0, 1, 1}, {4, 1});
  EXPECT_TRUE(check_gradients([col](const auto& in) { return ops::softmax(in[0], 0, col); },
                              {rand({4, 3})}));
}

TEST_F(TensorGradCheck, LayerNorm) {
  EXPECT_TRUE(check_gradients([](const auto& in) { return ops::layer_norm(in[0], in[1], in[2]); },
                              {rand({2, 3, 6}), uniform({6}, 0.5F, 1.5F), rand({6})}, 1e-2, 2e-2,
                              2e-3));
  EXPECT_TRUE(check_gradients([](const auto& in) { return ops::layer_norm(in[0], {}, {}); },
                              {rand({4, 5})}, 1e-2, 2e-2, 2e-3));
  EXPECT_TRUE(check_gradients(
      [](const auto& in) { return ops::layer_norm(in[0].transpose(0, 1), in[1], {}); },
      {rand({5, 3}), uniform({5}, 0.5F, 1.5F)}, 1e-2, 2e-2, 2e-3));
}

// ---- losses
// --------------------------------------------------------------------------------------

TEST_F(TensorGradCheck, MseLossBothInputs) {
  EXPECT_TRUE(check_gradients([](const auto& in) { return ops::mse_loss(in[0], in[1]); },
                              {rand({4, 2}), rand({4, 2})}));
  EXPECT_TRUE(
      check_gradients([](const auto& in) { return ops::mse_loss(in[0].transpose(0, 1), in[1]); },
                      {rand({2, 4}), rand({4, 2})}));
}

TEST_F(TensorGradCheck, CrossEntropy) {
  const Tensor y = labels({0, 3, 2, 4});
  for (float smoothing : {0.0F, 0.1F, 0.5F}) {
    // Larger logits exercise the max-shifted log-sum-exp.
    EXPECT_TRUE(check_gradients(
        [smoothing](const auto& in) {
          return ops::cross_entropy(ops::mul_scalar(in[0], 3.0F), in[1], smoothing);
        },
        {rand({4, 5}), y}))
        << "smoothing " << smoothing;
  }
}

TEST_F(TensorGradCheck, PaddedCrossEntropy) {
  const Tensor y = Tensor::from_vector(std::vector<std::int64_t>{1, 4, 0, 2, 3, 0}, {2, 3});
  const Tensor w = Tensor::from_vector(std::vector<float>{1, 1, 0, 1, 1, 0}, {2, 3});
  for (float smoothing : {0.0F, 0.1F}) {
    EXPECT_TRUE(check_gradients(
        [smoothing, y, w](const auto& in) {
          return ops::padded_cross_entropy(in[0], y, w, smoothing);
        },
        {rand({2, 3, 5})}))
        << "smoothing " << smoothing;
  }
  // Fractional weights, differentiated too.
  EXPECT_TRUE(check_gradients(
      [y](const auto& in) { return ops::padded_cross_entropy(in[0], y, in[1], 0.1F); },
      {rand({2, 3, 5}), uniform({2, 3}, 0.2F, 1.0F)}));
}

// ---- composites and the checker itself ----------------------------------------------------------

TEST_F(TensorGradCheck, Reshape) {
  EXPECT_TRUE(check_gradients(
      [](const auto& in) {
        return ops::tanh(in[0].reshape({3, -1}));
      },
      {rand({2, 6})}));
}

TEST_F(TensorGradCheck, CompositeWithReusedInputs) {
  // x feeds two branches and add(h, h) returns the same gradient twice:
  // accumulation must not alias buffers.
  EXPECT_TRUE(check_gradients(
      [](const auto& in) {
        Tensor h = ops::tanh(ops::add(ops::matmul(in[0], in[1]), in[2]));
        Tensor twice = ops::add(h, h);
        return ops::mul(twice, ops::sigmoid(ops::matmul(in[0], in[1])));
      },
      {rand({3, 4}), rand({4, 2}), rand({2})}));
}

TEST_F(TensorGradCheck, DetectsAWrongGradient) {
  // y = x^2 recorded with the wrong derivative 3x: the checker must object.
  auto bad_square = [](const std::vector<Tensor>& in) {
    Tensor x = in[0];
    Tensor out = ops::mul(x.detach(), x.detach());
    return rig::autograd::record(out, "bad_square", {x}, [x](const Tensor& g) {
      return std::vector<Tensor>{ops::mul(ops::mul_scalar(x.detach(), 3.0F), g)};
    });
  };
  EXPECT_FALSE(check_gradients(bad_square, {rand({5}, 0.2F)}));
  // ... and accept the right one, so the failure above is about the gradient.
  auto good_square = [](const std::vector<Tensor>& in) { return ops::mul(in[0], in[0]); };
  EXPECT_TRUE(check_gradients(good_square, {rand({5}, 0.2F)}));
}

}  // namespace
