// Autograd bookkeeping: accumulation (also into strided views), no-grad, release.
#include <gtest/gtest.h>

#include "rig/autograd.hpp"
#include "rig/ops.hpp"
#include "test_tensor_util.hpp"

namespace {

using rig::Tensor;
using rig_test::contains;
using rig_test::error_of;
namespace ops = rig::ops;

TEST(TensorAutograd, LeafGradientsAccumulateAcrossBackwardCalls) {
  Tensor x = Tensor::from_vector(std::vector<float>{1, 2, 3}, {3});
  x.set_requires_grad(true);
  Tensor y = ops::sum(ops::mul(x, x));  // dy/dx = 2x
  y.backward();
  EXPECT_EQ(x.grad().to_vector(), (std::vector<float>{2, 4, 6}));
  ops::sum(x).backward();  // adds 1
  EXPECT_EQ(x.grad().to_vector(), (std::vector<float>{3, 5, 7}));
  EXPECT_EQ(y.impl()->grad_fn->op, "sum");
  EXPECT_FALSE(y.grad().defined());  // non-leaf gradients are not kept
}

TEST(TensorAutograd, OnlyInputsThatRequireGradGetOne) {
  Tensor a = Tensor::full({2, 2}, 1.0F).set_requires_grad(true);
  Tensor b = Tensor::full({2, 2}, 2.0F);
  ops::sum(ops::matmul(a, b)).backward();
  EXPECT_TRUE(a.grad().defined());
  EXPECT_FALSE(b.grad().defined());
  EXPECT_FALSE(ops::matmul(b, b).requires_grad());
}

TEST(TensorAutograd, NoGradGuardRecordsNothingAndNests) {
  Tensor x = Tensor::full({2}, 1.0F).set_requires_grad(true);
  EXPECT_TRUE(rig::grad_mode_enabled());
  {
    rig::NoGradGuard outer;
    {
      rig::NoGradGuard inner;
      EXPECT_FALSE(rig::grad_mode_enabled());
    }
    EXPECT_FALSE(rig::grad_mode_enabled());
    Tensor y = ops::sum(ops::tanh(x));
    EXPECT_FALSE(y.requires_grad());
    EXPECT_EQ(y.impl()->grad_fn, nullptr);
    EXPECT_TRUE(contains(error_of([&] { y.backward(); }), "does not require a gradient"));
  }
  EXPECT_TRUE(rig::grad_mode_enabled());
  EXPECT_TRUE(ops::sum(ops::tanh(x)).requires_grad());
}

TEST(TensorAutograd, BackwardNeedsOneElement) {
  Tensor x = Tensor::full({2}, 1.0F).set_requires_grad(true);
  EXPECT_TRUE(contains(error_of([&] { ops::tanh(x).backward(); }), "needs one floating element"));
}

TEST(TensorAutograd, BackwardReleasesTheGraph) {
  Tensor x = Tensor::full({2}, 1.0F).set_requires_grad(true);
  Tensor y = ops::sum(ops::tanh(x));
  y.backward();
  EXPECT_TRUE(y.impl()->grad_fn->edges.empty());
  EXPECT_TRUE(contains(error_of<std::logic_error>([&] { y.backward(); }),
                       "graph through 'sum' was already released"));
}

// The graph keeps edges, not the input tensors: an activation that no
// backward function saved is freed once the forward pass drops it.
TEST(TensorAutograd, AnInputNoBackwardSavedIsFreedDuringForward) {
  Tensor x = Tensor::full({4}, -1.0F).set_requires_grad(true);
  x.data<float>()[1] = 2.0F;
  std::weak_ptr<rig::Storage> sum_storage;
  Tensor y;
  {
    const Tensor h = ops::add(x, x);  // add saves nothing; relu saves its output
    sum_storage = h.impl()->storage;
    y = ops::sum(ops::relu(h));
  }
  EXPECT_TRUE(sum_storage.expired());
  y.backward();
  const std::vector<float> expected{0.0F, 2.0F, 0.0F, 0.0F};
  EXPECT_EQ(x.grad().to_vector(), expected);
}

// Each node's backward function, and the tensors it saved, goes as soon as it
// has run (as PyTorch frees saved variables): when the first layer's backward
// runs, what the second layer saved is already freed.
TEST(TensorAutograd, ANodesSavedTensorsAreFreedOnceItsBackwardHasRun) {
  Tensor x = Tensor::full({4}, 1.0F).set_requires_grad(true);
  std::weak_ptr<rig::Storage> saved_by_second;
  bool freed_when_first_ran = false;
  Tensor y;
  {
    const Tensor saved = Tensor::full({1024}, 2.0F);
    saved_by_second = saved.impl()->storage;
    const Tensor first =
        rig::autograd::record(x.detach().clone(), "first", {x},
                              [&saved_by_second, &freed_when_first_ran](const Tensor& g) {
                                freed_when_first_ran = saved_by_second.expired();
                                return rig::TensorList{g};
                              });
    const Tensor second =
        rig::autograd::record(first.detach().clone(), "second", {first}, [saved](const Tensor& g) {
          EXPECT_EQ(saved.numel(), 1024);
          return rig::TensorList{g};
        });
    y = ops::sum(second);
  }
  EXPECT_FALSE(saved_by_second.expired());  // the graph holds it until backward
  y.backward();
  EXPECT_TRUE(freed_when_first_ran);
  EXPECT_EQ(x.grad().to_vector(), (std::vector<float>{1, 1, 1, 1}));
  EXPECT_TRUE(contains(error_of<std::logic_error>([&] { y.backward(); }),
                       "graph through 'sum' was already released"));
}

TEST(TensorAutograd, DeepChainIsTraversedAndFreedIteratively) {
  Tensor x = Tensor::full({1}, 0.5F).set_requires_grad(true);
  Tensor y = x;
  for (int i = 0; i < 20000; ++i) y = ops::mul_scalar(y, 1.0F);
  ops::sum(y).backward();
  EXPECT_FLOAT_EQ(x.grad().item(), 1.0F);
}

TEST(TensorAutograd, LeafGradMayBeAStridedView) {
  Tensor x = Tensor::from_vector(std::vector<float>{1, 2, 3, 4, 5, 6}, {2, 3});
  x.set_requires_grad(true);
  Tensor buffer = Tensor::zeros({3, 2});
  x.set_grad(buffer.transpose(0, 1));  // a non-contiguous view
  ops::sum(ops::mul(x, x)).backward();
  EXPECT_EQ(buffer.to_vector(), (std::vector<float>{2, 8, 4, 10, 6, 12}));
  ops::sum(x).backward();
  EXPECT_EQ(buffer.to_vector(), (std::vector<float>{3, 9, 5, 11, 7, 13}));
  EXPECT_EQ(x.grad().impl()->storage, buffer.impl()->storage);
}

TEST(TensorAutograd, GradientsThroughViewsAccumulate) {
  Tensor x = Tensor::arange(6, rig::DType::f32).reshape({2, 3}).detach();
  x.set_requires_grad(true);
  // Transposed, flattened (a copy) and sliced with a step: elements 3, 4, 5.
  Tensor y = x.transpose(0, 1).reshape({6}).slice(0, 1, 6, 2);
  EXPECT_EQ(y.to_vector(), (std::vector<float>{3, 4, 5}));
  Tensor w = Tensor::from_vector(std::vector<float>{1, 2, 3}, {3});
  // x used twice: once through the views, once directly.
  ops::add(ops::sum(ops::mul(y, w)), ops::sum(x)).backward();
  EXPECT_EQ(x.grad().to_vector(), (std::vector<float>{1, 1, 1, 2, 3, 4}));
  // expand: the gradient sums over the broadcast axis.
  Tensor b = Tensor::from_vector(std::vector<float>{1, 2}, {2, 1}).set_requires_grad(true);
  ops::sum(ops::mul(b.expand({2, 4}), Tensor::full({2, 4}, 0.5F))).backward();
  EXPECT_EQ(b.grad().to_vector(), (std::vector<float>{2, 2}));
}

// An identity op whose backward returns `held`, a tensor its caller keeps.
Tensor passing_on(const Tensor& a, const Tensor& held) {
  return rig::autograd::record(a.detach().clone(), "pass_on", {a},
                               [held](const Tensor&) { return rig::TensorList{held}; });
}

TEST(TensorAutograd, GradientsOthersHoldAreNotAddedIntoInPlace) {
  // A pending gradient that nothing else holds (the residual stream's) is
  // added into in place; one that a backward function returned while also
  // keeping it, or that the caller holds, must stay as it is. `pass_on` is
  // an identity op whose backward returns the caller's tensor `held`.
  const Tensor held = Tensor::full({3}, 1.0F);
  const auto pass_on = [&held](const Tensor& a) { return passing_on(a, held); };
  for (bool held_first : {true, false}) {
    SCOPED_TRACE(held_first);
    Tensor x = Tensor::from_vector(std::vector<float>{1, -2, 3}, {3}).set_requires_grad(true);
    const Tensor a = ops::mul_scalar(x, 2.0F);
    const Tensor other = ops::mul(a, a);  // gradient 2a
    const Tensor y = held_first ? ops::add(pass_on(a), other) : ops::add(other, pass_on(a));
    ops::sum(y).backward();
    EXPECT_EQ(held.to_vector(), (std::vector<float>{1, 1, 1}));
    EXPECT_EQ(x.grad().to_vector(), (std::vector<float>{10, -14, 26}));  // 2 (1 + 2a)
  }
  // The same tensor to both inputs of one add (a + a), then a third gradient.
  Tensor z = Tensor::from_vector(std::vector<float>{1, 2}, {2}).set_requires_grad(true);
  const Tensor c = ops::mul_scalar(z, 2.0F);
  ops::sum(ops::add(ops::add(c, c), ops::mul(c, c))).backward();  // 2c + c^2
  EXPECT_EQ(z.grad().to_vector(), (std::vector<float>{12, 20}));  // 2 (2 + 2c)
}

// scale(a, k) = k a, whose backward adds k g into the gradient a already has
// where autograd offers one (accumulation_target), as a product with beta 1
// does; `offers` counts the targets it was given.
Tensor accumulating_scale(const Tensor& a, float k, int& offers) {
  return rig::autograd::record(ops::mul_scalar(a.detach(), k), "accumulating_scale", {a},
                               [k, &offers](const Tensor& g) {
                                 Tensor into = rig::autograd::accumulation_target(0);
                                 if (!into.defined()) return rig::TensorList{ops::mul_scalar(g, k)};
                                 ++offers;
                                 into.copy_from(ops::add(into, ops::mul_scalar(g, k)));
                                 return rig::TensorList{into};
                               });
}

class CountingListener : public rig::autograd::LeafGradListener {
 public:
  void leaf_grad_ready(const rig::TensorImpl&) override { ++calls; }
  int calls = 0;
};

TEST(TensorAutograd, ABackwardFunctionMayAddIntoTheGradientAlreadyThere) {
  // A non-leaf used twice: the second use's backward gets the first's gradient.
  int offers = 0;
  Tensor x = Tensor::from_vector(std::vector<float>{1, -2}, {2}).set_requires_grad(true);
  const Tensor h = ops::mul_scalar(x, 1.0F);
  ops::sum(ops::add(accumulating_scale(h, 2.0F, offers), accumulating_scale(h, 3.0F, offers)))
      .backward();
  EXPECT_EQ(offers, 1);
  EXPECT_EQ(x.grad().to_vector(), (std::vector<float>{5, 5}));

  // A leaf with a .grad (a view of a flat gradient buffer, as zero_grad
  // leaves it): every use adds into the buffer itself, and the leaf is
  // reported ready once.
  offers = 0;
  Tensor buffer = Tensor::full({4}, 0.5F);
  Tensor w = Tensor::from_vector(std::vector<float>{1, 2}, {2}).set_requires_grad(true);
  w.set_grad(buffer.slice(0, 1, 3));
  CountingListener listener;
  {
    const rig::autograd::ScopedLeafGradListener scope(listener);
    ops::sum(ops::add(accumulating_scale(w, 2.0F, offers), accumulating_scale(w, 3.0F, offers)))
        .backward();
  }
  EXPECT_EQ(offers, 2);
  EXPECT_EQ(listener.calls, 1);
  EXPECT_EQ(buffer.to_vector(), (std::vector<float>{0.5F, 5.5F, 5.5F, 0.5F}));

  // No .grad yet: the first gradient is the leaf's own copy, as without targets.
  offers = 0;
  Tensor v = Tensor::from_vector(std::vector<float>{1, 2}, {2}).set_requires_grad(true);
  ops::sum(accumulating_scale(v, 2.0F, offers)).backward();
  EXPECT_EQ(offers, 0);
  EXPECT_EQ(v.grad().to_vector(), (std::vector<float>{2, 2}));
}

TEST(TensorAutograd, AGradientOthersHoldIsNoAccumulationTarget) {
  // The pending gradient is a tensor a backward function also keeps: it is
  // not offered, and stays as it was.
  const Tensor held = Tensor::full({2}, 1.0F);
  const auto pass_on = [&held](const Tensor& a) { return passing_on(a, held); };
  int offers = 0;
  Tensor x = Tensor::from_vector(std::vector<float>{1, -2}, {2}).set_requires_grad(true);
  const Tensor h = ops::mul_scalar(x, 1.0F);
  // pass_on's node comes later in the graph, so its backward runs first.
  ops::sum(ops::add(accumulating_scale(h, 2.0F, offers), pass_on(h))).backward();
  EXPECT_EQ(offers, 0);
  EXPECT_EQ(held.to_vector(), (std::vector<float>{1, 1}));
  EXPECT_EQ(x.grad().to_vector(), (std::vector<float>{3, 3}));
}

}  // namespace
