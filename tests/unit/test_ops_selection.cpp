// where, masked_fill, argmax, topk: PyTorch golden values, finite-difference
// gradients, NaN and tie rules, a brute-force reference on beam-search sizes.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <limits>
#include <numeric>
#include <random>

#include "golden.hpp"
#include "gradcheck.hpp"
#include "rig/ops.hpp"
#include "test_tensor_util.hpp"

namespace {

using rig::Tensor;
using namespace rig_test;
namespace ops = rig::ops;

const char* kArea = "ops_index";

Tensor u8_tensor(const std::vector<std::uint8_t>& values, rig::Shape shape) {
  return Tensor::from_vector(values, std::move(shape));
}

// ---- golden ---------------------------------------------------------------------

TEST(OpsSelectionGolden, Where) {
  for (const char* name : {"where_same", "where_broadcast", "where_scalar_b"}) {
    SCOPED_TRACE(name);
    const auto c = golden_case(kArea, name);
    Tensor a = leaf(c.input("a"));
    Tensor b = leaf(c.input("b"));
    Tensor out = ops::where(c.input("cond"), a, b);
    EXPECT_TRUE(tensors_close(out, c.output("out"), 0, 0));
    backward_with(out, c.input("upstream"));
    EXPECT_TRUE(tensors_close(a.grad(), c.grad("a"), 1e-5, 1e-6));
    EXPECT_TRUE(tensors_close(b.grad(), c.grad("b"), 1e-5, 1e-6));
  }
}

TEST(OpsSelectionGolden, MaskedFill) {
  for (const char* name : {"masked_fill_same", "masked_fill_broadcast"}) {
    SCOPED_TRACE(name);
    const auto c = golden_case(kArea, name);
    Tensor x = leaf(c.input("x"));
    Tensor out = ops::masked_fill(x, c.input("mask"), c.params.at("value").get<float>());
    EXPECT_TRUE(tensors_close(out, c.output("out"), 0, 0));
    backward_with(out, c.input("upstream"));
    EXPECT_TRUE(tensors_close(x.grad(), c.grad("x"), 0, 0));
  }
}

TEST(OpsSelectionGolden, Argmax) {
  for (const char* name : {"argmax_last_ties", "argmax_axis0_ties", "argmax_middle"}) {
    SCOPED_TRACE(name);
    const auto c = golden_case(kArea, name);
    Tensor out = ops::argmax(c.input("x"), c.params.at("axis").get<std::int64_t>());
    EXPECT_EQ(out.dtype(), rig::DType::i64);
    EXPECT_TRUE(tensors_close(out, c.output("out"), 0, 0));
  }
}

TEST(OpsSelectionGolden, Topk) {
  for (const char* name : {"topk_last_ties", "topk_axis0", "topk_full", "topk_large_k"}) {
    SCOPED_TRACE(name);
    const auto c = golden_case(kArea, name);
    auto [values, indices] = ops::topk(c.input("x"), c.params.at("k").get<std::int64_t>(),
                                       c.params.at("axis").get<std::int64_t>());
    EXPECT_TRUE(tensors_close(values, c.output("values"), 0, 0));
    EXPECT_EQ(indices.dtype(), rig::DType::i64);
    EXPECT_TRUE(tensors_close(indices, c.output("indices"), 0, 0));
  }
}

// ---- finite differences ------------------------------------------------------------

TEST(OpsSelectionGradCheck, WhereBroadcast) {
  const Tensor cond = u8_tensor({1, 0, 0, 1, 1, 0}, {2, 1, 3});
  EXPECT_TRUE(
      check_gradients([&](const std::vector<Tensor>& in) { return ops::where(cond, in[0], in[1]); },
                      {random_tensor({4, 1}, 1), random_tensor({2, 4, 3}, 2)}, 1e-2, 2e-3, 2e-3));
  EXPECT_TRUE(
      check_gradients([&](const std::vector<Tensor>& in) { return ops::where(cond, in[0], in[1]); },
                      {random_tensor({2, 1, 3}, 3), random_tensor({}, 4)}, 1e-2, 2e-3, 2e-3));
}

TEST(OpsSelectionGradCheck, MaskedFill) {
  const Tensor mask = u8_tensor({1, 0, 1}, {3});
  EXPECT_TRUE(check_gradients(
      [&](const std::vector<Tensor>& in) { return ops::masked_fill(in[0], mask, -7.0F); },
      {random_tensor({2, 3}, 5)}, 1e-2, 2e-3, 2e-3));
}

// ---- behaviour ---------------------------------------------------------------------

TEST(OpsSelection, WhereAndMaskedFillOnOtherDtypesAndViews) {
  const Tensor cond = u8_tensor({1, 0, 1, 0}, {4});
  Tensor a = int_tensor({1, 2, 3, 4}, {4});
  Tensor b = int_tensor({-1, -2, -3, -4}, {4});
  EXPECT_EQ(ops::where(cond, a, b).to_int_vector(), (std::vector<std::int64_t>{1, -2, 3, -4}));
  Tensor h = Tensor::from_vector(std::vector<float>{1, 2, 3, 4}, {4}).to(rig::DType::f16);
  Tensor filled = ops::masked_fill(h, cond, 0.5F);
  EXPECT_EQ(filled.dtype(), rig::DType::f16);
  EXPECT_EQ(filled.to_vector(), (std::vector<float>{0.5F, 2, 0.5F, 4}));
  Tensor bf = ops::masked_fill(h.to(rig::DType::bf16), cond, -1.0F);
  EXPECT_EQ(bf.to_vector(), (std::vector<float>{-1, 2, -1, 4}));
  // A transposed x and a broadcast mask [1, 2] (columns of the view).
  Tensor x =
      Tensor::from_vector(std::vector<float>{1, 2, 3, 4, 5, 6}, {2, 3}).transpose(0, 1);  // [3,2]
  Tensor out = ops::masked_fill(x, u8_tensor({0, 1}, {1, 2}), 9.0F);
  EXPECT_EQ(out.to_vector(), (std::vector<float>{1, 9, 2, 9, 3, 9}));
  // -inf into attention-style scores [B, H, T, T] with a key mask [B, 1, 1, T].
  Tensor scores = random_tensor({2, 2, 3, 3}, 6);
  Tensor keys = u8_tensor({0, 0, 1, 0, 1, 1}, {2, 1, 1, 3});
  const float inf = std::numeric_limits<float>::infinity();
  const auto sv = scores.to_vector();
  const auto mv = ops::masked_fill(scores, keys, -inf).to_vector();
  for (std::size_t i = 0; i < sv.size(); ++i) {
    const bool masked = keys.to_vector()[(i / 18) * 3 + i % 3] != 0;
    EXPECT_EQ(mv[i], masked ? -inf : sv[i]) << i;
  }
}

TEST(OpsSelection, ArgmaxNaNAndDtypes) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  std::vector<float> row(100, 1.0F);
  row[70] = 5.0F;
  row[40] = nan;
  row[90] = nan;
  EXPECT_EQ(ops::argmax(Tensor::from_vector(row, {100})).to_int_vector()[0], 40);  // like torch
  row[40] = row[90] = 0.0F;
  row[80] = 5.0F;
  EXPECT_EQ(ops::argmax(Tensor::from_vector(row, {100})).to_int_vector()[0], 70);  // first tie
  Tensor h = Tensor::from_vector(row, {100}).to(rig::DType::bf16);
  EXPECT_EQ(ops::argmax(h).to_int_vector()[0], 70);
  EXPECT_EQ(ops::argmax(int_tensor({3, 9, 9, 1}, {2, 2}), 1).to_int_vector(),
            (std::vector<std::int64_t>{1, 0}));
  EXPECT_EQ(ops::argmax(Tensor::scalar(1.0F).reshape({1}), 0).shape(), rig::Shape{});
}

TEST(OpsSelection, TopkNaNInfAndSmallK) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  std::vector<float> row(50, -inf);
  row[3] = 2.0F;
  row[30] = nan;
  row[10] = inf;
  auto [v, i] = ops::topk(Tensor::from_vector(row, {1, 50}), 4);
  const auto vv = v.to_vector();
  EXPECT_TRUE(std::isnan(vv[0]));
  EXPECT_EQ(vv[1], inf);
  EXPECT_EQ(vv[2], 2.0F);
  EXPECT_EQ(vv[3], -inf);
  EXPECT_EQ(i.to_int_vector(), (std::vector<std::int64_t>{30, 10, 3, 0}));
  auto [v0, i0] = ops::topk(Tensor::from_vector(row, {1, 50}), 0);
  EXPECT_EQ(v0.shape(), (rig::Shape{1, 0}));
  EXPECT_EQ(i0.shape(), (rig::Shape{1, 0}));
  auto [vi, ii] = ops::topk(int_tensor({4, 8, 8, 1, 8}, {5}), 2);
  EXPECT_EQ(vi.dtype(), rig::DType::i64);
  EXPECT_EQ(vi.to_int_vector(), (std::vector<std::int64_t>{8, 8}));
  EXPECT_EQ(ii.to_int_vector(), (std::vector<std::int64_t>{1, 2}));
}

// Beam-search sizes against a stable sort, with many ties.
TEST(OpsSelection, TopkMatchesStableSortOnVocabularyRows) {
  const std::int64_t rows = 6, vocab = 32768;
  std::mt19937 rng(7);
  std::uniform_int_distribution<int> level(0, 2000);
  std::vector<float> data(static_cast<std::size_t>(rows * vocab));
  for (auto& x : data) x = static_cast<float>(level(rng)) * 0.25F;
  // One row rising (every element inserts), one falling, one constant.
  for (std::int64_t j = 0; j < vocab; ++j) {
    data[static_cast<std::size_t>(j)] = static_cast<float>(j);
    data[static_cast<std::size_t>(vocab + j)] = static_cast<float>(-j);
    data[static_cast<std::size_t>(2 * vocab + j)] = 1.0F;
  }
  const Tensor x = Tensor::from_vector(data, {rows, vocab});
  for (std::int64_t k : {1, 8, 64, 65, 300}) {
    SCOPED_TRACE(k);
    auto [values, indices] = ops::topk(x, k);
    const auto vv = values.to_vector();
    const auto iv = indices.to_int_vector();
    for (std::int64_t r = 0; r < rows; ++r) {
      std::vector<std::int64_t> order(static_cast<std::size_t>(vocab));
      std::iota(order.begin(), order.end(), 0);
      const float* row = data.data() + r * vocab;
      std::stable_sort(order.begin(), order.end(),
                       [row](std::int64_t a, std::int64_t b) { return row[a] > row[b]; });
      for (std::int64_t j = 0; j < k; ++j) {
        const auto at = static_cast<std::size_t>(r * k + j);
        ASSERT_EQ(iv[at], order[static_cast<std::size_t>(j)]) << "row " << r << " rank " << j;
        ASSERT_EQ(vv[at], row[order[static_cast<std::size_t>(j)]]);
      }
    }
  }
  EXPECT_EQ(ops::argmax(x).to_int_vector()[0], vocab - 1);
  EXPECT_EQ(ops::argmax(x).to_int_vector()[1], 0);
  EXPECT_EQ(ops::argmax(x).to_int_vector()[2], 0);
}

// On a device whose kernel selects at most 64 (the emulated GPU's), a wider k
// is selected on the host: the CPU's values and indices, on the device.
TEST(OpsSelection, TopkWiderThanTheDeviceKernelSelectsOnTheHost) {
  setenv("RIG_CUDA_EMULATOR", "1", 1);  // each ctest test is a process of its own
  std::mt19937 rng(11);
  std::uniform_int_distribution<int> level(0, 50);
  std::vector<float> data(3 * 200);
  for (auto& x : data) x = static_cast<float>(level(rng));  // many ties
  const Tensor x = Tensor::from_vector(data, {3, 200});
  const Tensor on_device = x.to(rig::Device::cuda(0));
  for (const std::int64_t k : {64, 65, 200}) {
    SCOPED_TRACE(k);
    const auto [values, indices] = ops::topk(x, k);
    const auto [device_values, device_indices] = ops::topk(on_device, k);
    EXPECT_EQ(device_values.device(), rig::Device::cuda(0));
    EXPECT_EQ(device_indices.device(), rig::Device::cuda(0));
    EXPECT_EQ(device_values.to_vector(), values.to_vector());
    EXPECT_EQ(device_indices.to_int_vector(), indices.to_int_vector());
  }
}

TEST(OpsSelection, Errors) {
  const Tensor x = Tensor::zeros({2, 3});
  EXPECT_TRUE(contains(error_of([&] { ops::where(x, x, x); }),
                       "where: condition must be u8, got f32 [2,3]"));
  EXPECT_TRUE(contains(error_of([&] { ops::where(u8_tensor({1, 0}, {2}), x, x); }), "[2]"));
  EXPECT_TRUE(contains(error_of([&] { ops::where(u8_tensor({1}, {1}), x, x.to(rig::DType::i64)); }),
                       "where: a f32 [2,3] and b i64 [2,3]: dtypes differ"));
  EXPECT_TRUE(contains(error_of([&] {
                         ops::masked_fill(x, u8_tensor({1, 0, 1, 0}, {4, 1, 1}), 0);
                       }),
                       "masked_fill: mask [4,1,1] does not broadcast to x [2,3]"));
  EXPECT_TRUE(contains(error_of([&] { ops::topk(x, 4); }),
                       "topk: k = 4 out of range [0, 3] for [2,3] along axis -1"));
  EXPECT_TRUE(contains(error_of([&] {
                         ops::argmax(Tensor::zeros({2, 0}));
                       }),
                       "argmax: axis -1 of [2,0] is empty"));
  EXPECT_TRUE(contains(error_of([&] { ops::argmax(x, 2); }), "argmax: axis 2 out of range"));
}

}  // namespace
