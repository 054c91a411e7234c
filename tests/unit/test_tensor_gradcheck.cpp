// Finite-difference gradient checks for every differentiable op.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <random>

#include "rig/autograd.hpp"
#include "rig/ops.hpp"

namespace {

using rig::Shape;
using rig::Tensor;
namespace ops = rig::ops;

using Op = std::function<Tensor(const std::vector<Tensor>&)>;

Tensor random_tensor(Shape shape, std::mt19937& rng, float min_magnitude = 0.0F) {
  std::uniform_real_distribution<float> u(-1.0F, 1.0F);
  std::vector<float> v(static_cast<std::size_t>(rig::shape_numel(shape)));
  for (auto& x : v) {
    const float r = u(rng);
    // Keep away from kinks (relu at 0) when asked: |x| in [min, 1].
    x = std::copysign(min_magnitude + (1.0F - min_magnitude) * std::abs(r), r);
  }
  return Tensor::from_vector(v, std::move(shape));
}

// sum(out * weight) in double, so the upstream gradient is not all ones.
double weighted_sum(const Tensor& out, const std::vector<float>& weight) {
  const float* y = out.data<float>();
  double total = 0.0;
  for (std::size_t i = 0; i < weight.size(); ++i) total += static_cast<double>(y[i]) * weight[i];
  return total;
}

// Compares the autograd gradient of L = sum(op(inputs) * w) for each f32 input
// with central differences (double accumulation, float perturbation).
::testing::AssertionResult check_gradients(const Op& op, std::vector<Tensor> inputs,
                                           double eps = 1e-2, double rtol = 1e-2,
                                           double atol = 1e-3) {
  std::mt19937 rng(1234);
  for (auto& t : inputs) {
    if (t.dtype() == rig::DType::f32) t.set_requires_grad(true);
  }
  Tensor out = op(inputs);
  std::uniform_real_distribution<float> u(0.5F, 1.5F);
  std::vector<float> weight(static_cast<std::size_t>(out.numel()));
  for (auto& w : weight) w = u(rng);
  Tensor loss = ops::sum(ops::mul(out, Tensor::from_vector(weight, out.shape())));
  loss.backward();

  rig::NoGradGuard no_grad;
  for (std::size_t k = 0; k < inputs.size(); ++k) {
    Tensor& x = inputs[k];
    if (x.dtype() != rig::DType::f32) continue;
    if (!x.grad().defined()) return ::testing::AssertionFailure() << "input " << k << ": no grad";
    const std::vector<float> analytic = x.grad().to_vector();
    float* data = x.data<float>();
    for (std::int64_t i = 0; i < x.numel(); ++i) {
      const float saved = data[i];
      data[i] = static_cast<float>(saved + eps);
      const double plus = weighted_sum(op(inputs), weight);
      data[i] = static_cast<float>(saved - eps);
      const double minus = weighted_sum(op(inputs), weight);
      data[i] = saved;
      const double numeric = (plus - minus) / (2.0 * eps);
      const double a = analytic[static_cast<std::size_t>(i)];
      if (std::abs(a - numeric) > atol + rtol * std::max(std::abs(a), std::abs(numeric))) {
        return ::testing::AssertionFailure() << "input " << k << " element " << i << ": autograd "
                                             << a << " vs numeric " << numeric;
      }
    }
  }
  return ::testing::AssertionSuccess();
}

class TensorGradCheck : public ::testing::Test {
 protected:
  std::mt19937 rng{42};
  Tensor rand(Shape shape, float min_magnitude = 0.0F) {
    return random_tensor(std::move(shape), rng, min_magnitude);
  }
};

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

TEST_F(TensorGradCheck, AddSameShape) {
  EXPECT_TRUE(check_gradients([](const auto& in) { return ops::add(in[0], in[1]); },
                              {rand({3, 4}), rand({3, 4})}));
}

TEST_F(TensorGradCheck, AddBiasBroadcast) {
  EXPECT_TRUE(check_gradients([](const auto& in) { return ops::add(in[0], in[1]); },
                              {rand({5, 3}), rand({3})}));
}

TEST_F(TensorGradCheck, Sub) {
  EXPECT_TRUE(check_gradients([](const auto& in) { return ops::sub(in[0], in[1]); },
                              {rand({2, 3}), rand({2, 3})}));
}

TEST_F(TensorGradCheck, Mul) {
  EXPECT_TRUE(check_gradients([](const auto& in) { return ops::mul(in[0], in[1]); },
                              {rand({2, 3}), rand({2, 3})}));
}

TEST_F(TensorGradCheck, MulScalar) {
  EXPECT_TRUE(
      check_gradients([](const auto& in) { return ops::mul_scalar(in[0], -2.5F); }, {rand({7})}));
}

TEST_F(TensorGradCheck, Relu) {
  EXPECT_TRUE(
      check_gradients([](const auto& in) { return ops::relu(in[0]); }, {rand({3, 4}, 0.1F)}));
}

TEST_F(TensorGradCheck, Tanh) {
  EXPECT_TRUE(check_gradients([](const auto& in) { return ops::tanh(in[0]); }, {rand({3, 4})}));
}

TEST_F(TensorGradCheck, Sigmoid) {
  EXPECT_TRUE(check_gradients([](const auto& in) { return ops::sigmoid(in[0]); }, {rand({3, 4})}));
}

TEST_F(TensorGradCheck, Sum) {
  EXPECT_TRUE(check_gradients([](const auto& in) { return ops::sum(in[0]); }, {rand({3, 4})}));
}

TEST_F(TensorGradCheck, Mean) {
  EXPECT_TRUE(check_gradients([](const auto& in) { return ops::mean(in[0]); }, {rand({3, 4})}));
}

TEST_F(TensorGradCheck, MseLossBothInputs) {
  EXPECT_TRUE(check_gradients([](const auto& in) { return ops::mse_loss(in[0], in[1]); },
                              {rand({4, 2}), rand({4, 2})}));
}

TEST_F(TensorGradCheck, CrossEntropyLogits) {
  Tensor labels = Tensor::from_vector(std::vector<std::int64_t>{0, 3, 2, 4}, {4});
  // Larger logits exercise the max-shifted log-sum-exp.
  EXPECT_TRUE(check_gradients(
      [](const auto& in) { return ops::cross_entropy(ops::mul_scalar(in[0], 3.0F), in[1]); },
      {rand({4, 5}), labels}));
}

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
