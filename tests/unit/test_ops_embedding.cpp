// embedding: PyTorch golden values, finite differences, id checks, and a
// gradient that does not depend on the number of threads.
#include <gtest/gtest.h>

#include <random>

#include "cpu/parallel.hpp"
#include "golden.hpp"
#include "gradcheck.hpp"
#include "rig/ops.hpp"
#include "test_tensor_util.hpp"

namespace {

using rig::Tensor;
using namespace rig_test;
namespace ops = rig::ops;

TEST(OpsEmbeddingGolden, ForwardAndBackward) {
  for (const char* name : {"embedding_2d_ids", "embedding_1d_ids"}) {
    SCOPED_TRACE(name);
    const auto c = golden_case("ops_index", name);
    for (auto dtype : {rig::DType::i64, rig::DType::i32}) {
      Tensor w = leaf(c.input("weight"));
      Tensor out = ops::embedding(w, c.input("ids").to(dtype));
      EXPECT_TRUE(tensors_close(out, c.output("out"), 0, 0));
      backward_with(out, c.input("upstream"));
      EXPECT_TRUE(tensors_close(w.grad(), c.grad("weight"), 1e-6, 1e-6));
    }
  }
}

TEST(OpsEmbeddingGradCheck, RepeatedIds) {
  const Tensor ids = int_tensor({2, 0, 2, 2, 4, 0}, {2, 3});
  EXPECT_TRUE(
      check_gradients([&](const std::vector<Tensor>& in) { return ops::embedding(in[0], ids); },
                      {random_tensor({5, 3}, 1)}, 1e-2, 2e-3, 2e-3));
}

TEST(OpsEmbedding, OutOfRangeIdsNameTheIdAndVocabulary) {
  const Tensor w = Tensor::zeros({8, 4});
  EXPECT_TRUE(contains(error_of([&] {
                         ops::embedding(w, int_tensor({1, 8, 2}, {3}));
                       }),
                       "embedding: id 8 (position 1 of ids [3]) is out of range for vocabulary "
                       "size 8 (weight [8,4])"));
  EXPECT_TRUE(contains(error_of([&] {
                         ops::embedding(w, int_tensor({-3}, {1, 1}));
                       }),
                       "embedding: id -3"));
  EXPECT_TRUE(contains(error_of([&] { ops::embedding(w, Tensor::zeros({3})); }),
                       "embedding: ids must be i64 or i32, got f32 [3]"));
  EXPECT_TRUE(contains(error_of([&] { ops::embedding(Tensor::zeros({8}), int_tensor({1}, {1})); }),
                       "embedding: weight [8] must be 2-D"));
}

TEST(OpsEmbedding, HalfWeightsAndScalarIds) {
  Tensor w = random_tensor({6, 4}, 2);
  Tensor h = w.to(rig::DType::bf16);
  Tensor out = ops::embedding(h, int_tensor({3}, {}));
  EXPECT_EQ(out.dtype(), rig::DType::bf16);
  EXPECT_EQ(out.shape(), (rig::Shape{4}));
  EXPECT_EQ(out.to_vector(), w.to(rig::DType::bf16).slice(0, 3, 4).reshape({4}).to_vector());
}

// A parameter whose gradient lives in a buffer (the flat gradient buffer's
// view): the rows are added straight into it, the same values as the dense
// path, accumulating across backward passes.
TEST(OpsEmbedding, AccumulatesIntoAPresetGradientBuffer) {
  const Tensor ids = int_tensor({2, 0, 2, 2, 4, 0}, {2, 3});
  const Tensor up = random_tensor({2, 3, 3}, 7);
  Tensor dense = random_tensor({5, 3}, 8);
  dense.set_requires_grad(true);
  backward_with(ops::embedding(dense, ids), up);
  Tensor param = dense.detach().clone();
  param.set_requires_grad(true);
  Tensor buffer = Tensor::full({5, 3}, 0.5F);
  param.set_grad(buffer);
  backward_with(ops::embedding(param, ids), up);
  backward_with(ops::embedding(param, ids), up);
  const auto d = dense.grad().to_vector();
  const auto b = buffer.to_vector();
  for (std::size_t i = 0; i < d.size(); ++i) EXPECT_FLOAT_EQ(b[i], 0.5F + 2 * d[i]) << i;
  // Also when the weight feeds another op too (tied weights).
  Tensor tied = dense.detach().clone();
  tied.set_requires_grad(true);
  Tensor tied_buffer = Tensor::zeros({5, 3});
  tied.set_grad(tied_buffer);
  rig::ops::sum(rig::ops::add(rig::ops::sum(rig::ops::mul(ops::embedding(tied, ids), up)),
                              rig::ops::sum(tied)))
      .backward();
  const auto t = tied_buffer.to_vector();
  for (std::size_t i = 0; i < d.size(); ++i) EXPECT_FLOAT_EQ(t[i], d[i] + 1.0F) << i;
}

// The Transformer's shapes: 32 x 32 tokens from a 32768-word vocabulary, d 256.
TEST(OpsEmbedding, GradientIndependentOfThreads) {
  const std::int64_t vocab = 32768, dim = 256;
  std::mt19937 rng(3);
  std::uniform_int_distribution<std::int64_t> word(0, 99);  // many repeats
  std::vector<std::int64_t> ids(32 * 32);
  for (auto& id : ids) id = word(rng) * 300;
  const Tensor idt = int_tensor(ids, {32, 32});
  const Tensor up = random_tensor({32, 32, dim}, 4);
  const Tensor w0 = random_tensor({vocab, dim}, 5);
  auto grad_with = [&](int threads) {
    rig::cpu::set_num_threads(threads);
    Tensor w = w0.clone();
    w.set_requires_grad(true);
    backward_with(ops::embedding(w, idt), up);
    return w.grad().to_vector();
  };
  const int saved = rig::cpu::num_threads();
  const auto one = grad_with(1);
  EXPECT_EQ(grad_with(2), one);
  EXPECT_EQ(grad_with(5), one);
  rig::cpu::set_num_threads(saved);
  // Spot-check one row against a serial sum.
  const auto upv = up.to_vector();
  const std::int64_t row = ids[0];
  for (std::int64_t d = 0; d < dim; d += 37) {
    float expected = 0.0F;
    for (std::size_t t = 0; t < ids.size(); ++t) {
      if (ids[t] == row) expected += upv[t * dim + static_cast<std::size_t>(d)];
    }
    EXPECT_EQ(one[static_cast<std::size_t>(row * dim + d)], expected);
  }
}

}  // namespace
