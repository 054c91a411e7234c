// Views (reshape, view, transpose, permute, slice, expand, unsqueeze,
// squeeze, flatten), contiguous / clone / copy_from / fill_ on strided
// tensors, and the gradients of views.
#include <gtest/gtest.h>

#include <numeric>

#include "golden.hpp"
#include "rig/autograd.hpp"
#include "rig/tensor.hpp"
#include "test_tensor_util.hpp"

namespace {

using rig::DType;
using rig::Shape;
using rig::Strides;
using rig::Tensor;
using rig_test::contains;
using rig_test::error_of;

Tensor iota(Shape shape) {
  std::vector<float> v(static_cast<std::size_t>(rig::shape_numel(shape)));
  std::iota(v.begin(), v.end(), 0.0F);
  return Tensor::from_vector(v, std::move(shape));
}

// d(sum(f(x) * upstream))/dx, with a hand-made node for the weighted sum so
// that only the views themselves are under test (no rig::ops).
std::vector<float> grad_of(const Tensor& input, const std::function<Tensor(const Tensor&)>& f,
                           const Tensor& upstream) {
  Tensor x = input.detach().clone();
  x.set_requires_grad(true);
  Tensor y = f(x);
  EXPECT_EQ(y.shape(), upstream.shape());
  Tensor loss =
      rig::autograd::record(Tensor::scalar(0.0F), "weighted_sum", {y}, [upstream](const Tensor& g) {
        EXPECT_EQ(g.item(), 1.0F);
        return std::vector<Tensor>{upstream.clone()};
      });
  loss.backward();
  return x.grad().to_vector();
}

TEST(TensorViews, ContiguousStridesAndIsContiguous) {
  EXPECT_EQ(rig::contiguous_strides({2, 3, 4}), (Strides{12, 4, 1}));
  EXPECT_EQ(rig::contiguous_strides({}), (Strides{}));
  EXPECT_EQ(rig::contiguous_strides({2, 0, 3}), (Strides{3, 3, 1}));
  Tensor x = iota({2, 3, 4});
  EXPECT_TRUE(x.is_contiguous());
  EXPECT_EQ(x.strides(), (Strides{12, 4, 1}));
  EXPECT_EQ(x.offset(), 0);
  EXPECT_FALSE(x.transpose(0, 1).is_contiguous());
  EXPECT_TRUE(x.slice(0, 1, 2).is_contiguous());  // one outer row
  EXPECT_FALSE(x.slice(2, 0, 2).is_contiguous());
  EXPECT_TRUE(x.unsqueeze(1).is_contiguous());
  EXPECT_TRUE(x.slice(1, 0, 0).is_contiguous());  // empty
  EXPECT_FALSE(x.slice(0, 0, 1).expand({3, 3, 4}).is_contiguous());
  EXPECT_TRUE(x.slice(0, 0, 1).expand({1, 3, 4}).is_contiguous());
}

TEST(TensorViews, BroadcastShapes) {
  EXPECT_EQ(rig::broadcast_shapes({2, 1, 4}, {3, 1}, "add"), (Shape{2, 3, 4}));
  EXPECT_EQ(rig::broadcast_shapes({}, {5}, "add"), (Shape{5}));
  EXPECT_EQ(rig::broadcast_shapes({0, 1}, {1, 3}, "add"), (Shape{0, 3}));
  EXPECT_TRUE(contains(error_of([] {
                         rig::broadcast_shapes({2, 3}, {4, 3}, "mul");
                       }),
                       "mul: shapes [2,3] and [4,3] cannot be broadcast"));
}

TEST(TensorViews, TransposeAndPermuteShareStorage) {
  Tensor x = iota({2, 3});
  Tensor t = x.transpose(0, 1);
  EXPECT_EQ(t.shape(), (Shape{3, 2}));
  EXPECT_EQ(t.strides(), (Strides{1, 3}));
  EXPECT_TRUE(t.shares_storage(x));
  EXPECT_EQ(t.to_vector(), (std::vector<float>{0, 3, 1, 4, 2, 5}));
  Tensor p = iota({2, 3, 4}).permute({2, 0, 1});
  EXPECT_EQ(p.shape(), (Shape{4, 2, 3}));
  EXPECT_EQ(p.strides(), (Strides{1, 12, 4}));
  EXPECT_EQ(p.permute({-2, -1, -3}).strides(), (Strides{12, 4, 1}));
  EXPECT_TRUE(contains(error_of([&] {
                         x.permute({0, 0});
                       }),
                       "[0,0] is not a permutation of the axes of [2,3]"));
  EXPECT_TRUE(contains(error_of([&] { x.transpose(0, 2); }), "axis 2 out of range for [2,3]"));
  // Writes through a view land in the base.
  t.slice(0, 2, 3).fill_(-1.0F);
  EXPECT_EQ(x.to_vector(), (std::vector<float>{0, 1, -1, 3, 4, -1}));
}

TEST(TensorViews, ReshapeViewsWhenItCanAndCopiesWhenItMust) {
  Tensor x = iota({2, 3, 4});
  Tensor r = x.reshape({6, 4});
  EXPECT_TRUE(r.shares_storage(x));
  // [4,3,2] -> permute to [3,4,2] whose last two axes are contiguous together: a view.
  Tensor p = iota({4, 3, 2}).permute({1, 0, 2});
  EXPECT_FALSE(p.is_contiguous());
  Tensor merged = p.reshape({3, 8});
  EXPECT_FALSE(merged.shares_storage(p));  // axes 0,1 of p are not mergeable: a copy
  Tensor split = p.reshape({3, 2, 2, 2});  // splitting an axis is always a view
  EXPECT_TRUE(split.shares_storage(p));
  EXPECT_EQ(split.to_vector(), p.to_vector());
  EXPECT_EQ(p.view({3, 4, 2, 1}).strides(), (Strides{2, 6, 1, 1}));
  // Transposed: flattening needs a copy; view() refuses.
  Tensor t = x.transpose(1, 2);
  Tensor flat = t.reshape({-1});
  EXPECT_FALSE(flat.shares_storage(x));
  EXPECT_EQ(flat.to_vector()[1], 4.0F);
  EXPECT_TRUE(contains(error_of([&] { t.view({24}); }),
                       "[2,4,3] with strides [12,1,4] cannot be viewed as [24] without a copy"));
  EXPECT_TRUE(contains(error_of([&] { x.reshape({5, -1}); }), "[2,3,4] (24 elements) to [5,-1]"));
  EXPECT_THROW(x.reshape({-1, -1}), std::invalid_argument);
  EXPECT_THROW(x.view({-2, 12}), std::invalid_argument);
  // Scalars and empties.
  EXPECT_EQ(Tensor::scalar(3.0F).reshape({1, 1}).shape(), (Shape{1, 1}));
  EXPECT_EQ(Tensor::scalar(3.0F).flatten().shape(), (Shape{1}));
  EXPECT_EQ(Tensor::zeros({0, 3}).reshape({3, 0, 5}).shape(), (Shape{3, 0, 5}));
  EXPECT_THROW(Tensor::zeros({0, 3}).reshape({3, 0, -1}), std::invalid_argument);  // ambiguous
  // A view of a slice keeps its offset.
  Tensor s = x.slice(0, 1, 2).reshape({12});
  EXPECT_EQ(s.offset(), 12);
  EXPECT_EQ(s.to_vector()[0], 12.0F);
}

TEST(TensorViews, SliceWithStepAndNegativeBounds) {
  Tensor x = iota({10});
  EXPECT_EQ(x.slice(0, 1, 8, 3).to_vector(), (std::vector<float>{1, 4, 7}));
  EXPECT_EQ(x.slice(0, -3, 10).to_vector(), (std::vector<float>{7, 8, 9}));
  EXPECT_EQ(x.slice(0, -100, 2).to_vector(), (std::vector<float>{0, 1}));
  EXPECT_EQ(x.slice(0, 8, 100, 5).to_vector(), (std::vector<float>{8}));
  EXPECT_EQ(x.slice(0, 5, 2).numel(), 0);
  EXPECT_EQ(x.slice(0, 2, -2, 2).offset(), 2);
  EXPECT_EQ(x.slice(0, 2, -2, 2).strides(), (Strides{2}));
  EXPECT_TRUE(contains(error_of([&] { x.slice(0, 0, 5, 0); }), "step 0 of [10] must be positive"));
  Tensor m = iota({3, 4});
  EXPECT_EQ(m.slice(-1, 1, 3).to_vector(), (std::vector<float>{1, 2, 5, 6, 9, 10}));
  Tensor a = m.slice(1, 0, 2), b = m.slice(1, 2, 4);
  EXPECT_FALSE(a.slice(0, 0, 1).shares_storage(b.slice(0, 1, 2)));  // disjoint bytes
  EXPECT_TRUE(a.shares_storage(b));  // interleaved rows: the byte ranges overlap
}

TEST(TensorViews, ExpandUnsqueezeSqueezeFlatten) {
  Tensor x = iota({3, 1});
  Tensor e = x.expand({2, 3, 4});
  EXPECT_EQ(e.strides(), (Strides{0, 1, 0}));
  EXPECT_EQ(e.to_vector(), (std::vector<float>{0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2,
                                               0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2}));
  EXPECT_EQ(x.expand({-1, 2}).shape(), (Shape{3, 2}));
  EXPECT_TRUE(contains(error_of([&] {
                         x.expand({4, 2});
                       }),
                       "Tensor::expand: [3,1] to [4,2]: axis 0 has size 3, not 1 or 4"));
  EXPECT_THROW(x.expand({2}), std::invalid_argument);
  EXPECT_THROW(x.expand({-1, 3, 1}), std::invalid_argument);
  EXPECT_EQ(x.unsqueeze(0).shape(), (Shape{1, 3, 1}));
  EXPECT_EQ(x.unsqueeze(-1).shape(), (Shape{3, 1, 1}));
  EXPECT_EQ(x.unsqueeze(2).strides(), (Strides{1, 1, 1}));
  EXPECT_EQ(x.squeeze(1).shape(), (Shape{3}));
  EXPECT_TRUE(contains(error_of([&] { x.squeeze(0); }), "axis 0 of [3,1] has size 3, not 1"));
  Tensor y = iota({2, 3, 4, 5});
  EXPECT_EQ(y.flatten().shape(), (Shape{120}));
  EXPECT_EQ(y.flatten(1).shape(), (Shape{2, 60}));
  EXPECT_EQ(y.flatten(1, 2).shape(), (Shape{2, 12, 5}));
  EXPECT_EQ(y.flatten(-2, -1).shape(), (Shape{2, 3, 20}));
  EXPECT_THROW(y.flatten(2, 1), std::invalid_argument);
}

TEST(TensorViews, ContiguousCloneCopyFromAndFill) {
  Tensor x = iota({3, 4});
  EXPECT_EQ(x.contiguous().impl(), x.impl());
  Tensor t = x.transpose(0, 1);
  Tensor c = t.contiguous();
  EXPECT_TRUE(c.is_contiguous());
  EXPECT_FALSE(c.shares_storage(x));
  EXPECT_EQ(c.to_vector(), t.to_vector());
  Tensor k = x.clone();
  k.fill_(0.0F);
  EXPECT_EQ(x.to_vector()[5], 5.0F);
  // copy_from: into a strided view, from a strided source of another dtype.
  Tensor dst = Tensor::zeros({4, 6}, DType::f16);
  dst.slice(1, 0, 6, 2).copy_from(t);
  EXPECT_EQ(dst.slice(0, 1, 2).to_vector(), (std::vector<float>{1, 0, 5, 0, 9, 0}));
  // Overlapping source and destination behave like a copy through a temporary.
  Tensor v = iota({6});
  v.slice(0, 1, 6).copy_from(v.slice(0, 0, 5));
  EXPECT_EQ(v.to_vector(), (std::vector<float>{0, 0, 1, 2, 3, 4}));
  EXPECT_TRUE(contains(error_of([&] { v.copy_from(iota({5})); }),
                       "Tensor::copy_from: f32 [6] from f32 [5]: shapes differ"));
  EXPECT_TRUE(contains(error_of([&] {
                         iota({1, 3}).expand({2, 3}).copy_from(iota({2, 3}));
                       }),
                       "repeats elements (an expanded view)"));
  // fill_ on a strided view.
  Tensor m = Tensor::zeros({3, 3}, DType::i32);
  m.transpose(0, 1).slice(0, 1, 2).fill_(7.0F);
  EXPECT_EQ(m.to_int_vector(), (std::vector<std::int64_t>{0, 7, 0, 0, 7, 0, 0, 7, 0}));
  // Devices: no GPU back end was loaded (the engine's device choice probes
  // first), unless the emulated-device tests ran earlier in this process
  // (outside ctest): they make cuda:0 the emulator for the process's life.
  EXPECT_EQ(x.to(rig::Device::cpu()).impl(), x.impl());
  if (!rig::cuda_emulator_requested()) {
    EXPECT_TRUE(contains(error_of([&] { x.to(rig::Device::cuda(0)); }),
                         "device cuda:0: the CUDA back end (librig_cuda.so) is not loaded"));
  }
}

TEST(TensorViews, LargeStridedCopiesMatchElementwise) {
  // Big enough for the threaded path, with odd sizes.
  Tensor x = iota({67, 129, 33});
  Tensor p = x.permute({2, 0, 1});
  Tensor c = p.contiguous();
  const float* src = x.data<float>();
  const float* out = c.data<float>();
  for (std::int64_t a = 0; a < 33; ++a) {
    for (std::int64_t b = 0; b < 67; ++b) {
      for (std::int64_t d = 0; d < 129; ++d) {
        ASSERT_EQ(out[(a * 67 + b) * 129 + d], src[(b * 129 + d) * 33 + a]);
      }
    }
  }
  Tensor h = p.to(DType::bf16).to(DType::f32);
  EXPECT_EQ(h.to_vector()[1000],
            rig::bfloat16_to_float(rig::float_to_bfloat16(c.to_vector()[1000])));
}

TEST(TensorViews, GradientsOfViews) {
  Tensor x = iota({2, 3});
  auto upstream = [](Shape s) {
    std::vector<float> v(static_cast<std::size_t>(rig::shape_numel(s)));
    for (std::size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(i % 5) - 1.5F;
    return Tensor::from_vector(v, s);
  };
  // transpose: the gradient is the upstream transposed back.
  EXPECT_EQ(grad_of(
                x, [](const Tensor& t) { return t.transpose(0, 1); }, upstream({3, 2})),
            upstream({3, 2}).transpose(0, 1).to_vector());
  // expand: summed over the broadcast axes.
  Tensor col = iota({3, 1});
  EXPECT_EQ(grad_of(
                col,
                [](const Tensor& t) {
                  return t.expand({2, 3, 2});
                },
                Tensor::ones({2, 3, 2})),
            (std::vector<float>{4, 4, 4}));
  // slice with a step: scattered into zeros.
  EXPECT_EQ(grad_of(
                iota({7}), [](const Tensor& t) { return t.slice(0, 1, 7, 3); },
                Tensor::from_vector(std::vector<float>{2, 5}, {2})),
            (std::vector<float>{0, 2, 0, 0, 5, 0, 0}));
  // reshape of a non-contiguous tensor (a copy) still reaches the input.
  EXPECT_EQ(grad_of(
                x, [](const Tensor& t) { return t.transpose(0, 1).reshape({6}); }, iota({6})),
            (std::vector<float>{0, 2, 4, 1, 3, 5}));
}

TEST(TensorViews, ExpandBackwardReducesWithoutOps) {
  // Through the engine directly: two paths into one leaf accumulate.
  Tensor x = Tensor::from_vector(std::vector<float>{1, 2}, {2, 1}).set_requires_grad(true);
  Tensor e = x.expand({2, 3});
  e.slice(1, 2, 3).slice(0, 1, 2).reshape({}).backward();
  EXPECT_EQ(x.grad().to_vector(), (std::vector<float>{0, 1}));
  x.unsqueeze(0).squeeze(0).slice(0, 0, 1).reshape({}).backward();
  EXPECT_EQ(x.grad().to_vector(), (std::vector<float>{1, 1}));
}

// Applies params["ops"] of a golden case to x.
Tensor apply_ops(Tensor x, const nlohmann::json& ops) {
  for (const auto& op : ops) {
    const std::string name = op.at(0).get<std::string>();
    if (name == "transpose") {
      x = x.transpose(op.at(1).get<std::int64_t>(), op.at(2).get<std::int64_t>());
    } else if (name == "permute") {
      x = x.permute(op.at(1).get<std::vector<std::int64_t>>());
    } else if (name == "slice") {
      x = x.slice(op.at(1).get<std::int64_t>(), op.at(2).get<std::int64_t>(),
                  op.at(3).get<std::int64_t>(), op.at(4).get<std::int64_t>());
    } else if (name == "expand") {
      x = x.expand(op.at(1).get<Shape>());
    } else if (name == "reshape") {
      x = x.reshape(op.at(1).get<Shape>());
    } else if (name == "unsqueeze") {
      x = x.unsqueeze(op.at(1).get<std::int64_t>());
    } else if (name == "squeeze") {
      x = x.squeeze(op.at(1).get<std::int64_t>());
    } else if (name == "flatten") {
      x = x.flatten(op.at(1).get<std::int64_t>(), op.at(2).get<std::int64_t>());
    } else if (name == "contiguous") {
      x = x.contiguous();
    } else {
      ADD_FAILURE() << "unknown op " << name;
    }
  }
  return x;
}

TEST(TensorViews, GoldenViewsAndGradientsFromTorch) {
  int checked = 0;
  for (const auto& c : rig_test::load_golden("tensor")) {
    if (c.name.rfind("view_", 0) != 0) continue;
    SCOPED_TRACE(c.name);
    const auto& ops = c.params.at("ops");
    Tensor y = apply_ops(c.input("x"), ops);
    EXPECT_TRUE(rig_test::tensors_close(y, c.output("y"), 0, 0));
    EXPECT_TRUE(rig_test::tensors_close(
        Tensor::from_vector(grad_of(
                                c.input("x"), [&](const Tensor& t) { return apply_ops(t, ops); },
                                c.input("upstream")),
                            c.input("x").shape()),
        c.grad("x"), 1e-5, 1e-5));
    ++checked;
  }
  EXPECT_GE(checked, 10);
}

}  // namespace
