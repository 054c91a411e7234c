// Forward values and error messages of the tensor ops.
#include <gtest/gtest.h>

#include <cmath>

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
}

TEST(TensorOps, MatmulEmptyInnerDimensionGivesZeros) {
  Tensor c = ops::matmul(Tensor::zeros({2, 0}), Tensor::zeros({0, 3}));
  expect_values(c, {0, 0, 0, 0, 0, 0});
}

TEST(TensorOps, ElementwiseAndBias) {
  Tensor a = f32({1, -2, 3, -4}, {2, 2});
  Tensor b = f32({0.5, 0.5, 2, -1}, {2, 2});
  expect_values(ops::add(a, b), {1.5, -1.5, 5, -5});
  expect_values(ops::add(a, f32({10, 20}, {2})), {11, 18, 13, 16});
  expect_values(ops::sub(a, b), {0.5, -2.5, 1, -3});
  expect_values(ops::mul(a, b), {0.5, -1, 6, 4});
  expect_values(ops::mul_scalar(a, -2), {-2, 4, -6, 8});
  expect_values(ops::relu(a), {1, 0, 3, 0});
  expect_values(ops::tanh(a),
                {std::tanh(1.0F), std::tanh(-2.0F), std::tanh(3.0F), std::tanh(-4.0F)});
  expect_values(ops::sigmoid(f32({0, 2, -2, -100, 100}, {5})),
                {0.5F, 1 / (1 + std::exp(-2.0F)), 1 / (1 + std::exp(2.0F)), 0.0F, 1.0F});
}

TEST(TensorOps, Reductions) {
  Tensor a = f32({1, 2, 3, 4, 5, 6}, {2, 3});
  Tensor s = ops::sum(a);
  EXPECT_EQ(s.dim(), 0);
  EXPECT_FLOAT_EQ(s.item(), 21.0F);
  EXPECT_FLOAT_EQ(ops::mean(a).item(), 3.5F);
  EXPECT_FLOAT_EQ(ops::sum(Tensor::zeros({0})).item(), 0.0F);
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
}

TEST(TensorOps, CrossEntropyIsStableForHugeLogits) {
  Tensor logits = f32({1000, 0, -1000, 1000}, {2, 2});
  Tensor labels = i64({0, 0}, {2});
  const float loss = ops::cross_entropy(logits, labels).item();
  EXPECT_TRUE(std::isfinite(loss));
  EXPECT_NEAR(loss, 1000.0F, 1e-3F);  // (0 + 2000) / 2
}

TEST(TensorOps, Argmax) {
  Tensor a = f32({0.1F, 0.7F, 0.2F, 5, -1, 4, 0, 0, 1}, {3, 3});
  Tensor idx = ops::argmax(a);
  EXPECT_EQ(idx.dtype(), rig::DType::i64);
  EXPECT_EQ(idx.shape(), (rig::Shape{3}));
  const auto* p = idx.data<std::int64_t>();
  EXPECT_EQ(p[0], 1);
  EXPECT_EQ(p[1], 0);
  EXPECT_EQ(p[2], 2);
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
  EXPECT_TRUE(contains(error_of([] {
                         ops::matmul(Tensor::zeros({2}), Tensor::zeros({2, 2}));
                       }),
                       "must be 2-D"));
  EXPECT_TRUE(contains(error_of([] {
                         ops::add(Tensor::zeros({2, 3}), Tensor::zeros({2}));
                       }),
                       "add: [2,3] + [2]: shapes differ"));
  EXPECT_EQ(error_of([] {
              ops::sub(Tensor::zeros({2, 3}), Tensor::zeros({3, 2}));
            }),
            "sub: [2,3] - [3,2]: shapes differ");
  EXPECT_EQ(error_of([] { ops::mul(Tensor::zeros({2}), Tensor::zeros({3})); }),
            "mul: [2] * [3]: shapes differ");
  EXPECT_EQ(error_of([] {
              ops::mse_loss(Tensor::zeros({4, 1}), Tensor::zeros({4}));
            }),
            "mse_loss: prediction [4,1] vs target [4]: shapes differ");
  EXPECT_TRUE(contains(error_of([] {
                         ops::cross_entropy(Tensor::zeros({2, 3}), i64({0, 3}, {2}));
                       }),
                       "label 3 of sample 1 is out of range [0,3)"));
  EXPECT_TRUE(contains(error_of([] {
                         ops::cross_entropy(Tensor::zeros({2, 3}), Tensor::zeros({2}));
                       }),
                       "i64 [N] labels"));
  EXPECT_TRUE(contains(error_of([] { ops::relu(i64({1}, {1})); }), "relu: a must be f32"));
  EXPECT_TRUE(contains(error_of([] { ops::mean(Tensor::zeros({0})); }), "mean: empty tensor"));
}

}  // namespace
