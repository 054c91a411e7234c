// dropout: the mask is the documented function of the Philox stream
// (uniform_float(random_bits(key, i)) >= p), deterministic per key, different
// across keys, with the expected keep rate; backward applies the same mask.
#include <gtest/gtest.h>

#include <cmath>

#include "cpu/dropout.hpp"
#include "cpu/parallel.hpp"
#include "gradcheck.hpp"
#include "rig/ops.hpp"
#include "rig/random.hpp"
#include "test_tensor_util.hpp"

namespace {

using rig::RandomKey;
using rig::Tensor;
using namespace rig_test;
namespace ops = rig::ops;

const RandomKey kKey{42, 7, 1, rig::purpose_id("encoder.layers.0.dropout")};

std::vector<bool> kept(const Tensor& out) {
  std::vector<bool> k;
  for (float v : out.to_vector()) k.push_back(v != 0.0F);
  return k;
}

TEST(OpsDropout, MaskIsThePhiloxStream) {
  for (float p : {0.1F, 0.5F, 0.9F, 0.3333F}) {
    SCOPED_TRACE(p);
    const std::int64_t n = 1000 + 37;  // not a whole number of 64-element groups
    Tensor out = ops::dropout(Tensor::ones({n}), p, kKey);
    const auto v = out.to_vector();
    const float scale = 1.0F / (1.0F - p);
    for (std::int64_t i = 0; i < n; ++i) {
      const bool keep =
          rig::uniform_float(rig::random_bits(kKey, static_cast<std::uint64_t>(i))) >= p;
      ASSERT_EQ(v[static_cast<std::size_t>(i)], keep ? scale : 0.0F) << i;
    }
  }
}

TEST(OpsDropout, MaskAtFarStreamOffsets) {
  // Block numbers beyond 2^32 use the high counter word.
  for (std::uint64_t first :
       {std::uint64_t{5}, (std::uint64_t{1} << 34) - 7, (std::uint64_t{1} << 40) + 2}) {
    Tensor mask = Tensor::empty({300}, rig::DType::u8);
    rig::cpu::dropout_mask(kKey, 0.5F, mask.data<std::uint8_t>(), mask.numel(), first);
    const auto m = mask.to_vector();
    for (std::uint64_t i = 0; i < 300; ++i) {
      const bool keep = rig::uniform_float(rig::random_bits(kKey, first + i)) >= 0.5F;
      ASSERT_EQ(m[i] != 0.0F, keep) << first << " + " << i;
    }
  }
}

TEST(OpsDropout, SameKeySameMaskOtherKeysOtherMasks) {
  const Tensor x = random_tensor({64, 33}, 1);
  const auto base = kept(ops::dropout(x, 0.5F, kKey));
  EXPECT_EQ(kept(ops::dropout(x, 0.5F, kKey)), base);
  RandomKey seed = kKey, step = kKey, rank = kKey;
  seed.seed += 1;
  step.step += 1;
  rank.rank += 1;
  for (const RandomKey& other : {seed, step, rank, kKey.derive("other")}) {
    const auto mask = kept(ops::dropout(x, 0.5F, other));
    std::size_t same = 0;
    for (std::size_t i = 0; i < mask.size(); ++i) same += mask[i] == base[i];
    // Independent masks agree on about half the elements.
    EXPECT_NEAR(static_cast<double>(same) / static_cast<double>(mask.size()), 0.5, 0.06);
  }
}

TEST(OpsDropout, KeepRateAndUnbiasedMean) {
  const std::int64_t n = 1 << 20;
  for (float p : {0.1F, 0.3F, 0.5F}) {
    SCOPED_TRACE(p);
    const auto v = ops::dropout(Tensor::ones({n}), p, kKey.derive("rate")).to_vector();
    double keep = 0.0, sum = 0.0;
    for (float x : v) {
      keep += x != 0.0F;
      sum += x;
    }
    const double rate = keep / static_cast<double>(n);
    const double sigma = std::sqrt(p * (1.0 - p) / static_cast<double>(n));
    EXPECT_NEAR(rate, 1.0 - p, 5 * sigma);
    EXPECT_NEAR(sum / static_cast<double>(n), 1.0, 5 * sigma / (1.0 - p));
  }
}

TEST(OpsDropout, BackwardReusesTheMask) {
  Tensor x = random_tensor({5, 77}, 2);
  x.set_requires_grad(true);
  Tensor out = ops::dropout(x, 0.25F, kKey);
  const Tensor up = random_tensor({5, 77}, 3);
  backward_with(out, up);
  const auto g = x.grad().to_vector();
  const auto u = up.to_vector();
  const auto k = kept(out);
  for (std::size_t i = 0; i < g.size(); ++i) {
    EXPECT_EQ(g[i], k[i] ? u[i] * (1.0F / 0.75F) : 0.0F) << i;
  }
}

TEST(OpsDropoutGradCheck, FixedKey) {
  EXPECT_TRUE(
      check_gradients([](const std::vector<Tensor>& in) { return ops::dropout(in[0], 0.4F, kKey); },
                      {random_tensor({3, 7}, 4)}, 1e-2, 2e-3, 2e-3));
}

// residual + dropout(x): the residual's gradient is g, x's dropout's backward.
TEST(OpsDropoutGradCheck, DropoutAdd) {
  EXPECT_TRUE(check_gradients(
      [](const std::vector<Tensor>& in) { return ops::dropout_add(in[0], in[1], 0.4F, kKey); },
      {random_tensor({3, 7}, 6), random_tensor({3, 7}, 7)}, 1e-2, 2e-3, 2e-3));
  const Tensor r = random_tensor({5, 9}, 8), x = random_tensor({5, 9}, 9);
  EXPECT_EQ(ops::dropout_add(r, x, 0.4F, kKey).to_vector(),
            ops::add(r, ops::dropout(x, 0.4F, kKey)).to_vector());
  EXPECT_EQ(ops::dropout_add(r, x, 0.0F, kKey).to_vector(), ops::add(r, x).to_vector());
}

TEST(OpsDropout, IndependentOfThreadCount) {
  const Tensor x = random_tensor({1000, 129}, 5);
  const int saved = rig::cpu::num_threads();
  rig::cpu::set_num_threads(1);
  const auto one = ops::dropout(x, 0.1F, kKey).to_vector();
  rig::cpu::set_num_threads(3);
  EXPECT_EQ(ops::dropout(x, 0.1F, kKey).to_vector(), one);
  rig::cpu::set_num_threads(saved);
}

TEST(OpsDropout, HalfTypesNonContiguousAndEdgeProbabilities) {
  const Tensor x = random_tensor({8, 40}, 6);
  const auto f32 = ops::dropout(x, 0.5F, kKey).to_vector();
  for (auto dtype : {rig::DType::f16, rig::DType::bf16}) {
    Tensor out = ops::dropout(x.to(dtype), 0.5F, kKey);
    EXPECT_EQ(out.dtype(), dtype);
    const auto expected = Tensor::from_vector(f32, {8, 40}).to(dtype).to_vector();
    const auto got = out.to_vector();
    // f32 rounding of x, then of x * 2: equal up to one half-precision step.
    for (std::size_t i = 0; i < got.size(); ++i) {
      EXPECT_NEAR(got[i], expected[i], 1e-2 * (1.0 + std::abs(expected[i]))) << i;
    }
  }
  // A transposed view is masked in its logical (row-major) order.
  Tensor t = x.transpose(0, 1);
  EXPECT_EQ(ops::dropout(t, 0.5F, kKey).to_vector(),
            ops::dropout(t.contiguous(), 0.5F, kKey).to_vector());
  Tensor same = ops::dropout(x, 0.0F, kKey);
  EXPECT_TRUE(same.shares_storage(x));
  for (float v : ops::dropout(x, 1.0F, kKey).to_vector()) EXPECT_EQ(v, 0.0F);
  EXPECT_TRUE(contains(error_of([&] { ops::dropout(x, 1.5F, kKey); }),
                       "dropout: p = 1.5 is not in [0, 1] (x [8,40])"));
  EXPECT_TRUE(contains(error_of([&] { ops::dropout(x.to(rig::DType::i64), 0.5F, kKey); }),
                       "dropout: x must be f32 or f16 or bf16, got i64 [8,40]"));
}

}  // namespace
