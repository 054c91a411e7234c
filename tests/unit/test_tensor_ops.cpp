// Forward values, edge cases and error messages of the core math ops.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "rig/ops.hpp"
#include "test_tensor_util.hpp"

namespace {

using rig::Tensor;
namespace ops = rig::ops;

Tensor f32(std::vector<float> v, rig::Shape shape) {
  return Tensor::from_vector(v, shape);
}
Tensor i64(std::vector<std::int64_t> v, rig::Shape shape) {
  return Tensor::from_vector(v, shape);
}
Tensor u8(std::vector<std::uint8_t> v, rig::Shape shape) {
  return Tensor::from_vector(v, shape);
}

void expect_values(const Tensor& t, const std::vector<float>& expected, float tol = 1e-6F) {
  const auto got = t.to_vector();
  ASSERT_EQ(got.size(), expected.size());
  for (std::size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], expected[i], tol) << "at " << i;
}

using rig_test::contains;
using rig_test::error_of;

TEST(TensorOps, MatmulAllTransposeFlags) {
  Tensor a = f32({1, 2, 3, 4, 5, 6}, {2, 3});  // [[1,2,3],[4,5,6]]
  Tensor b = f32({1, 0, 0, 1, 1, 1}, {3, 2});  // [[1,0],[0,1],[1,1]]
  Tensor c = ops::matmul(a, b);
  EXPECT_EQ(c.shape(), (rig::Shape{2, 2}));
  expect_values(c, {4, 5, 10, 11});
  // a^T [3,2] x a [2,3] -> [3,3]
  expect_values(ops::matmul(a, a, true, false), {17, 22, 27, 22, 29, 36, 27, 36, 45});
  // a [2,3] x a^T [3,2] -> [2,2]
  expect_values(ops::matmul(a, a, false, true), {14, 32, 32, 77});
  // b^T [2,3] x a^T [3,2] = (a b)^T
  expect_values(ops::matmul(b, a, true, true), {4, 10, 5, 11});
  // A transposed view is the same as the flag.
  expect_values(ops::matmul(a.transpose(0, 1), a), {17, 22, 27, 22, 29, 36, 27, 36, 45});
}

TEST(TensorOps, MatmulBatchShapes) {
  EXPECT_EQ(ops::matmul(Tensor::zeros({2, 1, 3, 4}), Tensor::zeros({5, 4, 6})).shape(),
            (rig::Shape{2, 5, 3, 6}));
  EXPECT_EQ(ops::matmul(Tensor::zeros({3, 4}), Tensor::zeros({7, 4, 2})).shape(),
            (rig::Shape{7, 3, 2}));
  EXPECT_EQ(ops::matmul(Tensor::zeros({2, 3, 4}), Tensor::zeros({4, 5})).shape(),
            (rig::Shape{2, 3, 5}));
}

TEST(TensorOps, MatmulEmptyInnerDimensionGivesZeros) {
  Tensor c = ops::matmul(Tensor::zeros({2, 0}), Tensor::zeros({0, 3}));
  expect_values(c, {0, 0, 0, 0, 0, 0});
  EXPECT_EQ(ops::matmul(Tensor::zeros({0, 3}), Tensor::zeros({3, 2})).shape(), (rig::Shape{0, 2}));
}

TEST(TensorOps, LinearMatchesMatmulPlusBias) {
  Tensor x = f32({1, 2, 3, -1, 0, 1}, {2, 3});
  Tensor w = f32({1, 0, 1, 0, 1, -1}, {2, 3});
  Tensor b = f32({0.5, -5}, {2});
  expect_values(ops::linear(x, w, b), {4.5, -6, 0.5, -6});
  expect_values(ops::linear(x, w, b, ops::Activation::relu), {4.5, 0, 0.5, 0});
  expect_values(ops::linear(x, w), {4, -1, 0, -1});
}

TEST(TensorOps, ElementwiseAndBroadcasting) {
  Tensor a = f32({1, -2, 3, -4}, {2, 2});
  Tensor b = f32({0.5, 0.5, 2, -1}, {2, 2});
  expect_values(ops::add(a, b), {1.5, -1.5, 5, -5});
  expect_values(ops::add(a, f32({10, 20}, {2})), {11, 18, 13, 16});
  expect_values(ops::add(a, f32({10, 20}, {2, 1})), {11, 8, 23, 16});
  expect_values(ops::sub(f32({1, 2}, {2, 1}), f32({1, 2, 3}, {3})), {0, -1, -2, 1, 0, -1});
  expect_values(ops::mul(a, Tensor::scalar(2.0F)), {2, -4, 6, -8});
  expect_values(ops::div(a, b), {2, -4, 1.5, 4});
  expect_values(ops::sub(a, b), {0.5, -2.5, 1, -3});
  expect_values(ops::mul(a, b), {0.5, -1, 6, 4});
  expect_values(ops::mul_scalar(a, -2), {-2, 4, -6, 8});
  expect_values(ops::add_scalar(a, 1), {2, -1, 4, -3});
  expect_values(ops::pow_scalar(a, 2), {1, 4, 9, 16});
  expect_values(ops::neg(a), {-1, 2, -3, 4});
  expect_values(ops::relu(a), {1, 0, 3, 0});
  expect_values(ops::tanh(a),
                {std::tanh(1.0F), std::tanh(-2.0F), std::tanh(3.0F), std::tanh(-4.0F)});
  expect_values(ops::sigmoid(f32({0, 2, -2, -100, 100}, {5})),
                {0.5F, 1 / (1 + std::exp(-2.0F)), 1 / (1 + std::exp(2.0F)), 0.0F, 1.0F});
  expect_values(ops::sqrt(f32({4, 9}, {2})), {2, 3});
  expect_values(ops::rsqrt(f32({4, 0.25}, {2})), {0.5, 2});
  expect_values(ops::exp(f32({0, 1}, {2})), {1, std::exp(1.0F)});
  expect_values(ops::log(f32({1, 2}, {2})), {0, std::log(2.0F)});
}

TEST(TensorOps, SpecialValuesSurviveTheVectorisedMath) {
  const float inf = std::numeric_limits<float>::infinity();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const auto e = ops::exp(f32({-inf, inf, -200, 200}, {4})).to_vector();
  EXPECT_EQ(e[0], 0.0F);
  EXPECT_EQ(e[1], inf);
  EXPECT_EQ(e[2], 0.0F);
  EXPECT_EQ(e[3], inf);
  EXPECT_TRUE(std::isnan(ops::exp(f32({nan}, {1})).item()));
  expect_values(ops::tanh(f32({-inf, inf, -30, 30}, {4})), {-1, 1, -1, 1});
  expect_values(ops::sigmoid(f32({-inf, inf}, {2})), {0, 1});
  expect_values(ops::gelu(f32({-30, 30}, {2})), {0, 30});
  EXPECT_TRUE(std::isnan(ops::relu(f32({nan}, {1})).item()));
}

TEST(TensorOps, Reductions) {
  Tensor a = f32({1, 2, 3, 4, 5, 6}, {2, 3});
  Tensor s = ops::sum(a);
  EXPECT_EQ(s.dim(), 0);
  EXPECT_FLOAT_EQ(s.item(), 21.0F);
  EXPECT_FLOAT_EQ(ops::mean(a).item(), 3.5F);
  EXPECT_FLOAT_EQ(ops::sum(Tensor::zeros({0})).item(), 0.0F);
  expect_values(ops::sum(a, {0}), {5, 7, 9});
  expect_values(ops::sum(a, {1}), {6, 15});
  EXPECT_EQ(ops::sum(a, {1}, true).shape(), (rig::Shape{2, 1}));
  expect_values(ops::mean(a, {-1}), {2, 5});
  expect_values(ops::sum(a, {0, 1}), {21});
  EXPECT_EQ(ops::sum(a, {0, 1}).dim(), 0);
  // No axes: nothing reduced (NumPy's convention).
  expect_values(ops::sum(a, {}), {1, 2, 3, 4, 5, 6});
  expect_values(ops::max(f32({1, 5, 5, 2, -1, 0}, {2, 3}), 1), {5, 2});
  expect_values(ops::max(f32({1, 5, 5, 2, -1, 0}, {2, 3}), 0), {2, 5, 5});
}

TEST(TensorOps, SoftmaxMaskedRowsGiveZerosAndNoNaN) {
  Tensor x = f32({1, 2, 3, 4, 5, 6}, {2, 3});
  Tensor mask = u8({1, 0, 1, 0, 0, 0}, {2, 3});
  Tensor p = ops::softmax(x, -1, mask);
  const double z = std::exp(1.0) + std::exp(3.0);
  expect_values(p, {static_cast<float>(std::exp(1.0) / z), 0, static_cast<float>(std::exp(3.0) / z),
                    0, 0, 0});
  const auto lp = ops::log_softmax(x, -1, mask).to_vector();
  EXPECT_NEAR(lp[0], 1.0 - std::log(z), 1e-6);
  EXPECT_TRUE(std::isinf(lp[1]) && lp[1] < 0);
  for (int i = 3; i < 6; ++i) EXPECT_TRUE(std::isinf(lp[i]) && lp[i] < 0);
  // Gradients through a fully masked row are zero, not NaN.
  Tensor xg = x.clone();
  xg.set_requires_grad(true);
  ops::sum(ops::mul(ops::softmax(xg, -1, mask), f32({1, 2, 3, 4, 5, 6}, {2, 3}))).backward();
  for (float g : xg.grad().to_vector()) EXPECT_TRUE(std::isfinite(g));
  expect_values(xg.grad().slice(0, 1, 2), {0, 0, 0});
}

TEST(TensorOps, SoftmaxBroadcastMask) {
  // A key mask [1,3] applies to every row.
  Tensor x = f32({0, 0, 0, 1, 1, 1}, {2, 3});
  expect_values(ops::softmax(x, -1, u8({1, 1, 0}, {1, 3})), {0.5, 0.5, 0, 0.5, 0.5, 0});
  // A row mask [2,1] keeps or drops whole rows.
  expect_values(ops::softmax(x, -1, u8({0, 1}, {2, 1})), {0, 0, 0, 1.0F / 3, 1.0F / 3, 1.0F / 3});
}

TEST(TensorOps, LayerNormNormalisesRows) {
  Tensor x = f32({1, 2, 3, 4, 10, 10, 10, 10}, {2, 4});
  const auto y = ops::layer_norm(x, Tensor::ones({4}), Tensor::zeros({4})).to_vector();
  const double sd = std::sqrt(1.25 + 1e-5);
  EXPECT_NEAR(y[0], -1.5 / sd, 1e-5);
  EXPECT_NEAR(y[3], 1.5 / sd, 1e-5);
  for (int i = 4; i < 8; ++i) EXPECT_NEAR(y[i], 0.0F, 1e-6);  // constant row
}

TEST(TensorOps, MseLoss) {
  Tensor p = f32({1, 2, 3, 4}, {2, 2});
  Tensor t = f32({1, 0, 3, 1}, {2, 2});
  EXPECT_FLOAT_EQ(ops::mse_loss(p, t).item(), (0 + 4 + 0 + 9) / 4.0F);
}

TEST(TensorOps, CrossEntropyMatchesLogSoftmax) {
  Tensor logits = f32({1, 2, 3, 0, 0, 0}, {2, 3});
  Tensor labels = i64({2, 1}, {2});
  const double lse0 = std::log(std::exp(1.0) + std::exp(2.0) + std::exp(3.0));
  const double expected = ((lse0 - 3.0) + std::log(3.0)) / 2.0;
  EXPECT_NEAR(ops::cross_entropy(logits, labels).item(), expected, 1e-6);
  // i32 labels work too.
  EXPECT_NEAR(ops::cross_entropy(logits, labels.to(rig::DType::i32)).item(), expected, 1e-6);
}

TEST(TensorOps, CrossEntropyIsStableForHugeLogits) {
  Tensor logits = f32({1000, 0, -1000, 1000}, {2, 2});
  Tensor labels = i64({0, 0}, {2});
  const float loss = ops::cross_entropy(logits, labels).item();
  EXPECT_TRUE(std::isfinite(loss));
  EXPECT_NEAR(loss, 1000.0F, 1e-3F);  // (0 + 2000) / 2
}

TEST(TensorOps, PaddedCrossEntropyOfAPerfectModelIsZero) {
  // With smoothing s, the best logits give exactly the target distribution:
  // confidence 1 - s on the label, s / (V - 1) elsewhere; the normalising
  // constant makes that loss 0.
  const float s = 0.1F;
  const std::int64_t v = 4;
  const float on = std::log(1.0F - s);
  const float off = std::log(s / static_cast<float>(v - 1));
  Tensor logits = f32({on, off, off, off, off, off, on, off}, {1, 2, v});
  Tensor labels = i64({0, 2}, {1, 2});
  Tensor weights = f32({1, 1}, {1, 2});
  EXPECT_NEAR(ops::padded_cross_entropy(logits, labels, weights, s).item(), 0.0F, 1e-6F);
  // Padding is ignored: a bad prediction at a weight-0 position changes nothing.
  Tensor bad = f32({on, off, off, off, 9, 0, 0, 0}, {1, 2, v});
  EXPECT_NEAR(ops::padded_cross_entropy(bad, labels, f32({1, 0}, {1, 2}), s).item(), 0.0F, 1e-6F);
  // All padding: 0, not NaN.
  EXPECT_EQ(ops::padded_cross_entropy(bad, labels, f32({0, 0}, {1, 2}), s).item(), 0.0F);
}

// The logits' gradient is written over the logits when nothing but the loss
// holds them: backward then allocates one tensor fewer, and the gradients are
// the same bits as when another handle keeps the logits alive.
TEST(TensorOps, CrossEntropysGradientTakesTheLogitsMemoryWhenNothingElseHoldsThem) {
  std::vector<float> hv(6 * 3), wv(3 * 50);
  for (std::size_t i = 0; i < hv.size(); ++i) hv[i] = std::sin(0.7F * static_cast<float>(i));
  for (std::size_t i = 0; i < wv.size(); ++i) wv[i] = std::cos(0.3F * static_cast<float>(i));
  for (const bool padded : {false, true}) {
    SCOPED_TRACE(padded ? "padded_cross_entropy" : "cross_entropy");
    std::vector<float> grads[2];
    std::size_t requests[2] = {0, 0};
    for (const bool keep : {false, true}) {
      Tensor h = f32(hv, {6, 3}), w = f32(wv, {3, 50});
      h.set_requires_grad(true);
      w.set_requires_grad(true);
      Tensor logits = ops::matmul(h, w);  // [6, 50]: its backward makes no tensor of that size
      const Tensor kept = keep ? logits : Tensor();
      const Tensor loss = padded ? ops::padded_cross_entropy(logits.reshape({2, 3, 50}),
                                                             i64({1, 2, 3, 4, 5, 0}, {2, 3}),
                                                             f32({1, 1, 1, 1, 0, 1}, {2, 3}), 0.1F)
                                 : ops::cross_entropy(logits, i64({1, 2, 3, 4, 5, 0}, {6}), 0.1F);
      logits = Tensor();
      const std::size_t before = rig::allocator_stats().requests;
      loss.backward();
      requests[keep ? 1 : 0] = rig::allocator_stats().requests - before;
      grads[keep ? 1 : 0] = h.grad().to_vector();
      const std::vector<float> dw = w.grad().to_vector();
      grads[keep ? 1 : 0].insert(grads[keep ? 1 : 0].end(), dw.begin(), dw.end());
    }
    EXPECT_EQ(grads[0], grads[1]);
    EXPECT_EQ(requests[0] + 1, requests[1]);
  }
}

// In place, the bits of the ops that make a new tensor (a parameter server
// sums its workers' gradients in its gradient buffer with them).
TEST(TensorOps, AddAndScaleInPlaceGiveTheBitsOfAddAndMulScalar) {
  std::vector<float> av(1001), bv(1001);
  for (std::size_t i = 0; i < av.size(); ++i) {
    av[i] = std::sin(1.3F * static_cast<float>(i)) * 1e3F;
    bv[i] = std::cos(0.7F * static_cast<float>(i)) * 1e-3F;
  }
  const Tensor a = f32(av, {1001}), b = f32(bv, {1001});
  Tensor t = a.clone();
  ops::add_(t, b);
  EXPECT_EQ(t.to_vector(), ops::add(a, b).to_vector());
  ops::scale_(t, 1.0F / 3.0F);
  EXPECT_EQ(t.to_vector(), ops::mul_scalar(ops::add(a, b), 1.0F / 3.0F).to_vector());
  EXPECT_TRUE(contains(error_of([&] {
                         ops::add_(t, f32({1, 2}, {2}));
                       }),
                       "add_: other must be contiguous with 1001 elements, got [2]"));
  Tensor strided = f32({1, 2, 3, 4}, {2, 2}).transpose(0, 1);
  EXPECT_TRUE(contains(error_of([&] {
                         ops::add_(strided, f32({1, 2, 3, 4}, {2, 2}));
                       }),
                       "(strided)"));
}

TEST(TensorOps, Comparisons) {
  Tensor a = i64({1, 2, 3, 4}, {2, 2});
  Tensor eq = ops::equal(a, i64({1, 4}, {2}));
  EXPECT_EQ(eq.dtype(), rig::DType::u8);
  EXPECT_EQ(eq.to_int_vector(), (std::vector<std::int64_t>{1, 0, 0, 1}));
  EXPECT_EQ(ops::not_equal_scalar(a, 2).to_int_vector(), (std::vector<std::int64_t>{1, 0, 1, 1}));
  EXPECT_EQ(ops::not_equal_scalar(f32({0, 0.5}, {2}), 0).to_int_vector(),
            (std::vector<std::int64_t>{0, 1}));
  // Mixed dtypes compare by value.
  EXPECT_EQ(ops::equal(f32({1, 2.5}, {2}), i64({1, 2}, {2})).to_int_vector(),
            (std::vector<std::int64_t>{1, 0}));
}

TEST(TensorOps, LowPrecisionInputsComputeInF32AndRoundBack) {
  Tensor a = f32({1, 2, 3, 4}, {2, 2});
  for (auto dtype : {rig::DType::f16, rig::DType::bf16}) {
    Tensor h = a.to(dtype);
    Tensor y = ops::add(h, h);
    EXPECT_EQ(y.dtype(), dtype);
    expect_values(y.to(rig::DType::f32), {2, 4, 6, 8});
    EXPECT_EQ(ops::matmul(h, h).dtype(), dtype);
    expect_values(ops::matmul(h, h).to(rig::DType::f32), {7, 10, 15, 22});
    EXPECT_EQ(ops::softmax(h).dtype(), dtype);
    EXPECT_EQ(ops::layer_norm(h, {}, {}).dtype(), dtype);
    // Mixed with f32: the result is f32.
    EXPECT_EQ(ops::mul(h, a).dtype(), rig::DType::f32);
    // Losses are f32.
    EXPECT_EQ(ops::cross_entropy(h, i64({0, 1}, {2})).dtype(), rig::DType::f32);
  }
}

TEST(TensorOps, ErrorsNameTheOpAndBothShapes) {
  EXPECT_EQ(error_of([] {
              ops::matmul(Tensor::zeros({32, 64}), Tensor::zeros({32, 64}));
            }),
            "matmul: [32,64] x [32,64]: inner dimensions 64 and 32 differ");
  EXPECT_EQ(error_of([] {
              ops::matmul(Tensor::zeros({32, 64}), Tensor::zeros({32, 64}), true, true);
            }),
            "matmul: [32,64]^T x [32,64]^T: inner dimensions 32 and 64 differ");
  EXPECT_EQ(error_of([] {
              ops::matmul(Tensor::zeros({2}), Tensor::zeros({2, 2}));
            }),
            "matmul: [2] x [2,2]: both operands need at least 2 dimensions");
  EXPECT_EQ(error_of([] {
              ops::matmul(Tensor::zeros({2, 3, 4}), Tensor::zeros({3, 4, 5}));
            }),
            "matmul: [2,3,4] x [3,4,5]: batch dimensions [2] and [3] cannot be broadcast");
  EXPECT_EQ(error_of([] {
              ops::linear(Tensor::zeros({2, 3}), Tensor::zeros({4, 5}));
            }),
            "linear: x [2,3] and weight [4,5]: in_features 3 and 5 differ");
  EXPECT_TRUE(
      contains(error_of([] {
                 ops::linear(Tensor::zeros({2, 5}), Tensor::zeros({4, 5}), Tensor::zeros({5}));
               }),
               "linear: weight [4,5] and bias [5]: bias must be [4]"));
  EXPECT_TRUE(contains(error_of([] {
                         ops::add(Tensor::zeros({2, 3}), Tensor::zeros({2}));
                       }),
                       "add: shapes [2,3] and [2] cannot be broadcast"));
  EXPECT_TRUE(contains(error_of([] { ops::mul(Tensor::zeros({2}), Tensor::zeros({3})); }),
                       "mul: shapes [2] and [3] cannot be broadcast"));
  EXPECT_EQ(error_of([] {
              ops::mse_loss(Tensor::zeros({4, 1}), Tensor::zeros({4}));
            }),
            "mse_loss: prediction [4,1] vs target [4]: shapes differ");
  EXPECT_EQ(error_of([] {
              ops::cross_entropy(Tensor::zeros({2, 3}), i64({0, 3}, {2}));
            }),
            "cross_entropy: label 3 at position 1 of labels [2] is out of range [0,3)");
  EXPECT_EQ(error_of([] {
              ops::cross_entropy(Tensor::zeros({2, 3}), i64({0, 1, 2}, {3}));
            }),
            "cross_entropy: logits [2,3] and labels [3]: expected [N,C] logits and [N] labels");
  EXPECT_EQ(error_of([] {
              ops::cross_entropy(Tensor::zeros({2, 3}), Tensor::zeros({2}));
            }),
            "cross_entropy: labels must be i64 or i32, got f32 [2]");
  EXPECT_EQ(error_of([] { ops::relu(i64({1}, {1})); }),
            "relu: x must be f32 or f16 or bf16, got i64 [1]");
  EXPECT_EQ(error_of([] { ops::mean(Tensor::zeros({0})); }), "mean: empty tensor [0]");
  EXPECT_EQ(error_of([] {
              ops::softmax(Tensor::zeros({2, 3}), 2);
            }),
            "softmax: axis 2 out of range for [2,3]");
  EXPECT_EQ(error_of([] {
              ops::sum(Tensor::zeros({2, 3}), {0, -2});
            }),
            "sum: axes [0,-2] repeat an axis of [2,3]");
  EXPECT_EQ(error_of([] {
              ops::softmax(Tensor::zeros({2, 3}), -1,
                           Tensor::zeros({2, 3}, rig::DType::u8).slice(1, 0, 2));
            }),
            "softmax: mask [2,2] does not broadcast to x [2,3]");
  EXPECT_EQ(error_of([] {
              ops::softmax(Tensor::zeros({2, 3}), -1, Tensor::zeros({2, 3}));
            }),
            "softmax: mask must be u8, got f32 [2,3]");
  EXPECT_EQ(error_of([] {
              ops::layer_norm(Tensor::zeros({2, 3}), Tensor::ones({4}), {});
            }),
            "layer_norm: x [2,3] and gamma [4]: expected [3]");
  EXPECT_EQ(error_of([] { ops::max(Tensor::zeros({2, 0}), 1); }), "max: axis 1 of [2,0] is empty");
  EXPECT_EQ(
      error_of([] {
        ops::padded_cross_entropy(Tensor::zeros({2, 3, 4}), i64({0, 1}, {2}), Tensor::zeros({2}));
      }),
      "padded_cross_entropy: logits [2,3,4], labels [2] and weights [2]: expected [B,T,V] "
      "logits and [B,T] labels and weights");
}

}  // namespace
