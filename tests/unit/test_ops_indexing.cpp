// concat, split, gather, index_select: PyTorch golden values (forward and
// backward), finite-difference gradients, error messages, edge cases.
#include <gtest/gtest.h>

#include "cpu/parallel.hpp"
#include "golden.hpp"
#include "gradcheck.hpp"
#include "rig/ops.hpp"
#include "rig/parameter_store.hpp"
#include "test_tensor_util.hpp"

namespace {

using rig::Tensor;
using namespace rig_test;
namespace ops = rig::ops;

const char* kArea = "ops_index";

// "x0", "upstream2", ... (appending avoids GCC 12's false -Wrestrict on "x" + string).
std::string numbered(const char* prefix, std::size_t i) {
  std::string s(prefix);
  s += std::to_string(i);
  return s;
}

// ---- golden ---------------------------------------------------------------------

TEST(OpsIndexingGolden, Concat) {
  for (const char* name : {"concat_axis0", "concat_axis1", "concat_last", "concat_one"}) {
    SCOPED_TRACE(name);
    const auto c = golden_case(kArea, name);
    std::vector<Tensor> xs;
    for (int i = 0; c.inputs.count(numbered("x", static_cast<std::size_t>(i))) != 0; ++i) {
      xs.push_back(leaf(c.input(numbered("x", static_cast<std::size_t>(i)))));
    }
    Tensor out = ops::concat(xs, c.params.at("axis").get<std::int64_t>());
    EXPECT_TRUE(tensors_close(out, c.output("out"), 0, 0));
    backward_with(out, c.input("upstream"));
    for (std::size_t i = 0; i < xs.size(); ++i) {
      EXPECT_TRUE(tensors_close(xs[i].grad(), c.grad(numbered("x", i)), 0, 0));
    }
  }
}

TEST(OpsIndexingGolden, SplitUsingSomeOutputs) {
  for (const char* name : {"split_axis1_all", "split_axis0_some", "split_last_gap"}) {
    SCOPED_TRACE(name);
    const auto c = golden_case(kArea, name);
    Tensor x = leaf(c.input("x"));
    const auto sizes = c.params.at("sizes").get<std::vector<std::int64_t>>();
    auto outs = ops::split(x, sizes, c.params.at("axis").get<std::int64_t>());
    ASSERT_EQ(outs.size(), sizes.size());
    for (std::size_t i = 0; i < outs.size(); ++i) {
      EXPECT_TRUE(tensors_close(outs[i], c.output(numbered("out", i)), 0, 0));
    }
    Tensor loss;
    for (auto i : c.params.at("used").get<std::vector<std::size_t>>()) {
      Tensor term = ops::sum(ops::mul(outs[i], c.input(numbered("upstream", i))));
      loss = loss.defined() ? ops::add(loss, term) : term;
    }
    loss.backward();
    EXPECT_TRUE(tensors_close(x.grad(), c.grad("x"), 1e-6, 1e-6));
  }
}

TEST(OpsIndexingGolden, Gather) {
  for (const char* name : {"gather_axis0", "gather_axis1_small", "gather_last"}) {
    SCOPED_TRACE(name);
    const auto c = golden_case(kArea, name);
    Tensor x = leaf(c.input("x"));
    Tensor out = ops::gather(x, c.params.at("axis").get<std::int64_t>(), c.input("index"));
    EXPECT_TRUE(tensors_close(out, c.output("out"), 0, 0));
    backward_with(out, c.input("upstream"));
    EXPECT_TRUE(tensors_close(x.grad(), c.grad("x"), 1e-6, 1e-6));
  }
}

TEST(OpsIndexingGolden, IndexSelect) {
  for (const char* name :
       {"index_select_axis0_repeats", "index_select_axis1", "index_select_last"}) {
    SCOPED_TRACE(name);
    const auto c = golden_case(kArea, name);
    Tensor x = leaf(c.input("x"));
    Tensor out = ops::index_select(x, c.params.at("axis").get<std::int64_t>(), c.input("index"));
    EXPECT_TRUE(tensors_close(out, c.output("out"), 0, 0));
    backward_with(out, c.input("upstream"));
    EXPECT_TRUE(tensors_close(x.grad(), c.grad("x"), 1e-6, 1e-6));
  }
}

// ---- finite differences ------------------------------------------------------------

TEST(OpsIndexingGradCheck, Concat) {
  EXPECT_TRUE(check_gradients(
      [](const std::vector<Tensor>& in) {
        return ops::concat({in[0], in[1], in[2]}, 1);
      },
      {random_tensor({2, 3, 2}, 1), random_tensor({2, 1, 2}, 2), random_tensor({2, 2, 2}, 3)}, 1e-2,
      2e-3, 2e-3));
  EXPECT_TRUE(check_gradients(
      [](const std::vector<Tensor>& in) {
        return ops::concat({in[0], in[1]}, 0);
      },
      {random_tensor({2, 3}, 4), random_tensor({1, 3}, 5)}, 1e-2, 2e-3, 2e-3));
}

TEST(OpsIndexingGradCheck, SplitOutputsRecombined) {
  // out0 * 2 + out2 (out1 unused): exercises the shared buffer and a gap.
  EXPECT_TRUE(check_gradients(
      [](const std::vector<Tensor>& in) {
        auto parts = ops::split(in[0], {2, 1, 2}, -1);
        return ops::add(ops::mul_scalar(parts[0], 2.0F), parts[2]);
      },
      {random_tensor({3, 5}, 6)}, 1e-2, 2e-3, 2e-3));
}

TEST(OpsIndexingGradCheck, GatherAndIndexSelect) {
  const Tensor index = int_tensor({0, 2, 2, 1, 0, 0}, {2, 3});
  EXPECT_TRUE(
      check_gradients([&](const std::vector<Tensor>& in) { return ops::gather(in[0], 1, index); },
                      {random_tensor({2, 4}, 7)}, 1e-2, 2e-3, 2e-3));
  const Tensor rows = int_tensor({3, 0, 3, 3}, {4});
  EXPECT_TRUE(check_gradients(
      [&](const std::vector<Tensor>& in) { return ops::index_select(in[0], 0, rows); },
      {random_tensor({4, 3}, 8)}, 1e-2, 2e-3, 2e-3));
  EXPECT_TRUE(check_gradients(
      [&](const std::vector<Tensor>& in) { return ops::index_select(in[0], 1, rows); },
      {random_tensor({2, 4, 3}, 9)}, 1e-2, 2e-3, 2e-3));
}

// ---- behaviour -------------------------------------------------------------------

TEST(OpsIndexing, SplitGivesViewsAndTheirOwnHistory) {
  Tensor x = random_tensor({4, 6}, 10);
  x.set_requires_grad(true);
  auto parts = ops::split(x, {1, 3}, 0);
  EXPECT_TRUE(parts[1].shares_storage(x));
  EXPECT_EQ(parts[1].shape(), (rig::Shape{3, 6}));
  // Only the second part feeds the loss; the first part's rows get zeros.
  ops::sum(parts[1]).backward();
  const auto g = x.grad().to_vector();
  for (std::size_t i = 0; i < g.size(); ++i) EXPECT_EQ(g[i], i < 6 ? 0.0F : 1.0F) << i;
}

TEST(OpsIndexing, SplitTwiceInOneGraphAndRepeatedForward) {
  Tensor x = random_tensor({2, 4}, 11);
  x.set_requires_grad(true);
  for (int step = 0; step < 2; ++step) {
    auto a = ops::split(x, {2, 2}, 1);
    auto b = ops::split(x, {1, 3}, 1);
    // x also feeds the loss directly, so its gradient sums four paths.
    Tensor loss =
        ops::add(ops::add(ops::sum(a[1]), ops::sum(ops::mul_scalar(b[0], 3.0F))), ops::sum(x));
    loss.backward();
  }
  std::vector<float> per_step = x.grad().to_vector();
  for (auto& v : per_step) v /= 2.0F;  // two steps accumulated
  std::vector<float> want = {4, 1, 2, 2, 4, 1, 2, 2};
  EXPECT_EQ(per_step, want);
}

TEST(OpsIndexing, ConcatNonContiguousAndIntegerInputs) {
  Tensor a = random_tensor({3, 2}, 12).transpose(0, 1);  // [2, 3], non-contiguous
  Tensor b = random_tensor({2, 1}, 13);
  Tensor out = ops::concat({a, b}, 1);
  const auto ac = a.contiguous().to_vector();
  const auto bv = b.to_vector();
  const auto ov = out.to_vector();
  EXPECT_EQ(ov, (std::vector<float>{ac[0], ac[1], ac[2], bv[0], ac[3], ac[4], ac[5], bv[1]}));
  Tensor i = ops::concat({int_tensor({1, 2}, {2}), int_tensor({3}, {1})}, 0);
  EXPECT_EQ(i.dtype(), rig::DType::i64);
  EXPECT_EQ(i.to_int_vector(), (std::vector<std::int64_t>{1, 2, 3}));
}

// joined_rows: parameters declared one after another join as a view of the
// store's flat buffer (one product for several projections), and the
// gradient reaches each one's .grad (its rows of the joined gradient, exactly);
// parts that are not adjacent are concatenated (concat's own tests).
TEST(OpsIndexing, JoinedRowsViewAdjacentPartsAndSplitTheGradient) {
  rig::ParameterStore store;
  const Tensor a = store.declare("a", {2, 3}, rig::Initializer::uniform(-1.0F, 1.0F));
  const Tensor b = store.declare("b", {1, 3}, rig::Initializer::uniform(-1.0F, 1.0F));
  const Tensor c = store.declare("c", {3, 3}, rig::Initializer::uniform(-1.0F, 1.0F));
  store.allocate(5);
  const Tensor joined = ops::joined_rows({a, b, c});
  EXPECT_EQ(joined.shape(), (rig::Shape{6, 3}));
  EXPECT_TRUE(joined.shares_storage(a)) << "adjacent parameters are viewed, not copied";
  EXPECT_EQ(joined.raw_data(), a.raw_data());
  const Tensor upstream = random_tensor({6, 3}, 6);
  grads_of(joined, upstream, {a, b, c});
  const std::vector<float> u = upstream.to_vector();
  EXPECT_EQ(a.grad().to_vector(), std::vector<float>(u.begin(), u.begin() + 6));
  EXPECT_EQ(b.grad().to_vector(), std::vector<float>(u.begin() + 6, u.begin() + 9));
  EXPECT_EQ(c.grad().to_vector(), std::vector<float>(u.begin() + 9, u.end()));
  // Out of order (or from other storage): concatenated.
  const Tensor swapped = ops::joined_rows({c, a});
  EXPECT_FALSE(swapped.shares_storage(a));
  EXPECT_TRUE(same_values(swapped, ops::concat({c, a}, 0)));
}

TEST(OpsIndexing, Int32IndicesAndGatherAlongAxis0) {
  Tensor x = random_tensor({3, 2}, 14);
  Tensor idx64 = int_tensor({2, 0, 1, 1}, {2, 2});
  Tensor idx32 = idx64.to(rig::DType::i32);
  EXPECT_TRUE(same_values(ops::gather(x, 0, idx64), ops::gather(x, 0, idx32)));
  Tensor rows = int_tensor({2, 2, 0}, {3});
  EXPECT_TRUE(same_values(ops::index_select(x, 0, rows),
                          ops::index_select(x, 0, rows.to(rig::DType::i32))));
}

TEST(OpsIndexing, IndexSelectGradientIndependentOfThreads) {
  // Many repeats of few rows: sums whose order would show up in the bits.
  std::vector<std::int64_t> ids;
  for (int i = 0; i < 4000; ++i) ids.push_back((i * 7919) % 13);
  const Tensor index = int_tensor(ids, {static_cast<std::int64_t>(ids.size())});
  const Tensor up = random_tensor({4000, 96}, 15);
  auto grad_with = [&](int threads) {
    rig::cpu::set_num_threads(threads);
    Tensor w = random_tensor({13, 96}, 16);
    w.set_requires_grad(true);
    backward_with(ops::index_select(w, 0, index), up);
    return w.grad().to_vector();
  };
  const int saved = rig::cpu::num_threads();
  const auto one = grad_with(1);
  EXPECT_EQ(grad_with(2), one);
  EXPECT_EQ(grad_with(3), one);
  rig::cpu::set_num_threads(saved);
}

TEST(OpsIndexing, Errors) {
  const Tensor a = Tensor::zeros({2, 3});
  EXPECT_TRUE(contains(error_of([&] {
                         ops::concat({a, Tensor::zeros({3, 3})}, 1);
                       }),
                       "concat: [2,3], [3,3]: shapes differ outside axis 1"));
  EXPECT_TRUE(contains(error_of([&] {
                         ops::concat({a, Tensor::zeros({2, 3, 1})}, 0);
                       }),
                       "concat: [2,3], [2,3,1]"));
  EXPECT_TRUE(contains(error_of([&] {
                         ops::concat({a, a.to(rig::DType::i64)}, 0);
                       }),
                       "concat: dtypes differ: f32 [2,3] and i64 [2,3]"));
  EXPECT_TRUE(contains(error_of([&] { ops::concat({}, 0); }), "concat: no tensors"));
  EXPECT_TRUE(contains(error_of([&] { ops::concat({a}, 2); }), "concat: axis 2 out of range"));
  EXPECT_TRUE(contains(error_of([&] {
                         ops::split(a, {1, 1}, 1);
                       }),
                       "split: sizes [1,1] add up to 2, not 3 ([2,3] axis 1)"));
  EXPECT_TRUE(contains(error_of([&] { ops::split(a, {-1, 4}, 1); }), "split: negative size -1"));
  EXPECT_TRUE(contains(error_of([&] {
                         ops::gather(a, 1, int_tensor({0, 3}, {1, 2}));
                       }),
                       "gather: index 3 at position 1 is out of range for size 3 of x [2,3]"));
  EXPECT_TRUE(contains(error_of([&] {
                         ops::gather(a, 1, int_tensor({0, 1}, {2}));
                       }),
                       "gather: index [2] does not fit x [2,3]"));
  EXPECT_TRUE(contains(error_of([&] {
                         ops::gather(a, 1, int_tensor({0, 0, 0}, {3, 1}));
                       }),
                       "gather: index [3,1] does not fit x [2,3]"));
  EXPECT_TRUE(contains(error_of([&] {
                         ops::gather(a, 1, Tensor::zeros({2, 1}));
                       }),
                       "gather: index must be i64 or i32, got f32 [2,1]"));
  EXPECT_TRUE(contains(error_of([&] { ops::index_select(a, 0, int_tensor({-1}, {1})); }),
                       "index_select: index -1 at position 0 is out of range for size 2"));
  EXPECT_TRUE(contains(error_of([&] {
                         ops::index_select(a, 0, int_tensor({0, 1}, {1, 2}));
                       }),
                       "index_select: index [1,2] must be 1-D (x [2,3])"));
}

TEST(OpsIndexing, EmptyPieces) {
  Tensor x = random_tensor({2, 3}, 17);
  Tensor out = ops::concat({x, Tensor::zeros({2, 0})}, 1);
  EXPECT_TRUE(same_values(out, x));
  auto parts = ops::split(x, {0, 3}, 1);
  EXPECT_EQ(parts[0].shape(), (rig::Shape{2, 0}));
  Tensor none = ops::index_select(x, 1, Tensor::zeros({0}, rig::DType::i64));
  EXPECT_EQ(none.shape(), (rig::Shape{2, 0}));
}

}  // namespace
