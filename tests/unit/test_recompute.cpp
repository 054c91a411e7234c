// nn::recompute: a segment run again in the backward pass gives the outputs
// and gradients of the segment run plainly, bit for bit (inputs, parameters,
// an input that needs none, keyed dropout), keeps only its inputs after the
// forward pass, tells a leaf-gradient listener of each parameter once, and
// passes finite differences; autograd::backward with a seed gradient.
#include <gtest/gtest.h>

#include <map>
#include <random>
#include <vector>

#include "gradcheck.hpp"
#include "rig/autograd.hpp"
#include "rig/nn.hpp"
#include "rig/ops.hpp"

namespace {

using rig::Tensor;
using rig::TensorList;
namespace ops = rig::ops;

// linear, relu, keyed dropout, linear, then residual + the segment, scaled by
// a second input that needs no gradient (a mask).
struct Segment {
  Tensor w1, b1, w2, b2;
  rig::RandomKey key{7, 3, 0, 0};
  Tensor operator()(const TensorList& in) const {
    Tensor h = ops::relu(ops::linear(in[0], w1, b1));
    h = ops::dropout(h, 0.25F, key.derive("segment.dropout"));
    return ops::add(in[0], ops::mul(ops::linear(h, w2, b2), in[1]));
  }
};

Segment make_segment(std::int64_t d, std::int64_t hidden) {
  return {rig_test::leaf(rig_test::random_tensor({hidden, d}, 1U)),
          rig_test::leaf(rig_test::random_tensor({hidden}, 2U)),
          rig_test::leaf(rig_test::random_tensor({d, hidden}, 3U)),
          rig_test::leaf(rig_test::random_tensor({d}, 4U))};
}

// Two segments in a row, each recomputed or not; the loss and every gradient.
struct Outcome {
  std::vector<float> loss, dx, dw1, db1, dw2, db2;
};

Outcome run(bool recomputed) {
  const Segment a = make_segment(8, 32);
  Segment second = make_segment(8, 32);
  second.key = {7, 3, 0, 1};
  const Segment& b = second;
  Tensor x = rig_test::leaf(rig_test::random_tensor({6, 8}, 5U));
  const Tensor mask = rig_test::random_tensor({6, 8}, 6U, 0.0F, 1.0F);
  Tensor y = x;
  for (const Segment* s : {&a, &b}) {
    y = recomputed ? rig::nn::recompute(*s, {y, mask}) : (*s)({y, mask});
  }
  const Tensor loss = ops::sum(ops::mul(y, y));
  loss.backward();
  return {loss.to_vector(),        x.grad().to_vector(),    a.w1.grad().to_vector(),
          a.b1.grad().to_vector(), b.w2.grad().to_vector(), b.b2.grad().to_vector()};
}

TEST(Recompute, GivesTheSameBitsAsTheSegmentRunPlainly) {
  const Outcome plain = run(false);
  const Outcome again = run(true);
  EXPECT_EQ(again.loss, plain.loss);
  EXPECT_EQ(again.dx, plain.dx);
  EXPECT_EQ(again.dw1, plain.dw1);
  EXPECT_EQ(again.db1, plain.db1);
  EXPECT_EQ(again.dw2, plain.dw2);
  EXPECT_EQ(again.db2, plain.db2);
}

TEST(Recompute, KeepsOnlyItsInputsAfterTheForwardPass) {
  // A wide hidden layer: its activations are most of what the plain forward keeps.
  const Segment s = make_segment(16, 4096);
  const Tensor mask = Tensor::ones({64, 16});
  const auto kept_after_forward = [&](bool recomputed) {
    const Tensor x = rig_test::leaf(rig_test::random_tensor({64, 16}, 9U));
    const std::size_t before = rig::allocator_stats().current_bytes;
    const Tensor y = recomputed ? rig::nn::recompute(s, {x, mask}) : s({x, mask});
    return rig::allocator_stats().current_bytes - before;
  };
  const std::size_t plain = kept_after_forward(false);
  const std::size_t recomputed = kept_after_forward(true);
  const std::size_t hidden_bytes = 64 * 4096 * sizeof(float);
  EXPECT_GE(plain, 2 * hidden_bytes) << "the plain forward keeps the hidden activations";
  EXPECT_LT(recomputed, hidden_bytes / 4) << "the recomputed one keeps its output (and inputs)";
}

TEST(Recompute, WithoutGradModeOrGradientsItIsThePlainCall) {
  const Segment s = make_segment(8, 16);
  const Tensor x = rig_test::random_tensor({2, 8}, 11U);  // needs no gradient
  const Tensor mask = Tensor::ones({2, 8});
  const Tensor y = rig::nn::recompute(s, {x, mask});
  EXPECT_TRUE(rig_test::same_values(y, s({x, mask})));
  EXPECT_TRUE(y.requires_grad()) << "the parameters' graph is recorded as usual";
  const rig::NoGradGuard no_grad;
  EXPECT_FALSE(rig::nn::recompute(s, {rig_test::leaf(x), mask}).requires_grad());
}

// Counts leaf_grad_ready calls per leaf.
struct CountingListener final : rig::autograd::LeafGradListener {
  std::map<const rig::TensorImpl*, int> calls;
  void leaf_grad_ready(const rig::TensorImpl& leaf) override { ++calls[&leaf]; }
};

TEST(Recompute, TellsTheListenerOfEachParameterOnce) {
  const Segment s = make_segment(8, 16);
  const Tensor x = rig_test::leaf(rig_test::random_tensor({3, 8}, 12U));
  const Tensor loss = ops::sum(rig::nn::recompute(s, {x, Tensor::ones({3, 8})}));
  CountingListener listener;
  {
    const rig::autograd::ScopedLeafGradListener listening(listener);
    loss.backward();
  }
  for (const Tensor* p : {&s.w1, &s.b1, &s.w2, &s.b2, &x}) {
    EXPECT_EQ(listener.calls[p->impl()], 1);
  }
}

TEST(Recompute, FiniteDifferences) {
  const Segment s = make_segment(4, 8);
  const Tensor mask = rig_test::random_tensor({3, 4}, 13U, 0.5F, 1.5F);
  std::mt19937 rng(14);
  EXPECT_TRUE(rig_test::check_gradients(
      [&](const std::vector<Tensor>& in) {
        const Segment with{in[1], in[2], in[3], in[4], s.key};
        return rig::nn::recompute(with, {in[0], mask});
      },
      {rig_test::leaf(rig_test::random_tensor({3, 4}, 15U)), s.w1, s.b1, s.w2, s.b2}));
}

TEST(AutogradBackward, ASeedGradientOfTheRootsShape) {
  const Tensor x = rig_test::leaf(rig_test::random_tensor({2, 3}, 16U));
  const Tensor y = ops::mul(x, x);
  const Tensor seed = rig_test::random_tensor({2, 3}, 17U);
  rig::autograd::backward(y, seed);
  const std::vector<float> xs = x.to_vector(), gs = seed.to_vector();
  const std::vector<float> got = x.grad().to_vector();
  for (std::size_t i = 0; i < xs.size(); ++i) EXPECT_FLOAT_EQ(got[i], 2 * xs[i] * gs[i]);
  const Tensor z = ops::mul(x, x);
  EXPECT_THROW(rig::autograd::backward(z, Tensor::ones({3, 2})), std::invalid_argument);
}

}  // namespace
