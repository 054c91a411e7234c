// scaled_dot_product_attention: golden values (a float64 torch reference
// written by hand), finite differences (masks, causal, Tq != Tk, dropout with
// a fixed key, strided split-heads inputs), dropout statistics and its
// agreement with ops::dropout's stream, fully masked rows, error messages;
// at bfloat16 matmul precision, the same roundings as composed ops.
#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <stdexcept>
#include <string>
#include <vector>

#include "golden.hpp"
#include "gradcheck.hpp"
#include "rig/ops.hpp"
#include "test_tensor_util.hpp"

namespace {

using rig::Shape;
using rig::Tensor;
using namespace rig_test;
namespace ops = rig::ops;

Tensor mask_tensor(const Shape& shape, std::uint32_t seed, float keep = 0.7F) {
  const Tensor u = random_tensor(shape, seed, 0.0F, 1.0F);
  std::vector<std::uint8_t> m;
  for (float v : u.to_vector()) m.push_back(v < keep ? 1 : 0);
  return Tensor::from_vector(m, shape);
}

TEST(OpsAttention, GoldenForwardAndBackward) {
  int seen = 0;
  for (const auto& c : rig_test::load_golden("ops_nn")) {
    if (c.name.rfind("attn_", 0) != 0) continue;
    ++seen;
    SCOPED_TRACE(c.name);
    Tensor q = leaf(c, "q"), k = leaf(c, "k"), v = leaf(c, "v");
    ops::AttentionOptions o;
    if (c.inputs.count("mask")) o.mask = c.input("mask");
    o.causal = c.params.at("causal");
    if (c.params.contains("scale")) o.scale = c.params.at("scale").get<float>();
    const Tensor y = ops::scaled_dot_product_attention(q, k, v, o);
    EXPECT_TRUE(tensors_close(y, c.output("y"), 1e-4, 1e-5));
    grads_of(y, c.input("upstream"), {q, k, v});
    EXPECT_TRUE(tensors_close(q.grad(), c.grad("q"), 1e-4, 1e-5));
    EXPECT_TRUE(tensors_close(k.grad(), c.grad("k"), 1e-4, 1e-5));
    EXPECT_TRUE(tensors_close(v.grad(), c.grad("v"), 1e-4, 1e-5));
  }
  EXPECT_EQ(seen, 8);
}

struct AttnConfig {
  const char* name;
  std::int64_t b, h, tq, tk, d;
  Shape mask;  // empty: no mask
  bool causal;
  float dropout;
};

class OpsAttentionGradCheck : public ::testing::TestWithParam<AttnConfig> {};

TEST_P(OpsAttentionGradCheck, MatchesFiniteDifferences) {
  const AttnConfig& cfg = GetParam();
  ops::AttentionOptions o;
  if (!cfg.mask.empty()) o.mask = mask_tensor(cfg.mask, 9);
  o.causal = cfg.causal;
  o.dropout_p = cfg.dropout;
  o.key = {42, 7, 0, rig::purpose_id("attention.dropout")};  // the same mask every evaluation
  const auto op = [&](const std::vector<Tensor>& in) {
    return ops::scaled_dot_product_attention(in[0], in[1], in[2], o);
  };
  const std::vector<Tensor> inputs{random_tensor({cfg.b, cfg.h, cfg.tq, cfg.d}, 1, -1.5F, 1.5F),
                                   random_tensor({cfg.b, cfg.h, cfg.tk, cfg.d}, 2, -1.5F, 1.5F),
                                   random_tensor({cfg.b, cfg.h, cfg.tk, cfg.d}, 3)};
  EXPECT_TRUE(check_gradients(op, inputs, 1e-2, 2e-2, 2e-3, 160));
}

INSTANTIATE_TEST_SUITE_P(
    Configs, OpsAttentionGradCheck,
    ::testing::Values(AttnConfig{"plain", 2, 2, 4, 4, 3, {}, false, 0.0F},
                      AttnConfig{"padding_mask", 2, 2, 3, 5, 4, {2, 1, 1, 5}, false, 0.0F},
                      AttnConfig{"causal", 1, 2, 5, 5, 3, {}, true, 0.0F},
                      AttnConfig{"causal_decode", 2, 1, 2, 6, 4, {}, true, 0.0F},
                      AttnConfig{"cross_full_mask", 2, 2, 3, 7, 4, {2, 2, 3, 7}, false, 0.0F},
                      AttnConfig{"wide_d", 1, 1, 3, 18, 33, {1, 1, 3, 18}, true, 0.0F},
                      AttnConfig{"dropout", 2, 2, 4, 5, 3, {}, false, 0.3F},
                      AttnConfig{"dropout_mask_causal", 1, 2, 5, 5, 4, {1, 1, 1, 5}, true, 0.5F}),
    [](const auto& info) { return std::string(info.param.name); });

TEST(OpsAttention, SplitHeadViewsMatchContiguousInputs) {
  // MultiHeadAttention's layout: [B, T, H * D] projections viewed as [B, H, T, D].
  const std::int64_t b = 2, t = 5, h = 3, d = 4;
  const auto heads = [&](const Tensor& x) { return x.view({b, t, h, d}).transpose(1, 2); };
  const std::vector<Tensor> inputs{random_tensor({b, t, h * d}, 1), random_tensor({b, t, h * d}, 2),
                                   random_tensor({b, t, h * d}, 3)};
  ops::AttentionOptions o;
  o.mask = mask_tensor({b, 1, 1, t}, 4);
  const auto op = [&](const std::vector<Tensor>& in) {
    return ops::scaled_dot_product_attention(heads(in[0]), heads(in[1]), heads(in[2]), o);
  };
  const Tensor strided = op(inputs);
  // The output is laid out [B, T, H, D], so merging heads is a view.
  EXPECT_TRUE(strided.transpose(1, 2).is_contiguous());
  const Tensor plain = ops::scaled_dot_product_attention(heads(inputs[0]).contiguous(),
                                                         heads(inputs[1]).contiguous(),
                                                         heads(inputs[2]).contiguous(), o);
  EXPECT_TRUE(plain.is_contiguous());
  EXPECT_TRUE(tensors_close(strided.contiguous(), plain, 0, 0));
  EXPECT_TRUE(check_gradients(op, inputs, 1e-2, 2e-2, 2e-3, 160));
}

// scaled_dot_product_attention_packed: q, k and v as parts of one projection
// ([B, T, 3 H D], self-attention) or k and v as parts of one ([B, Tk, 2 H D])
// with q of its own (cross-attention): the same values and gradients, bit
// for bit, as the op on the parts as split-heads views, and the packed
// tensor's gradient is one tensor of its shape.
TEST(OpsAttention, PackedOperandsAreThePartsBitForBit) {
  const std::int64_t b = 2, t = 5, s = 7, h = 3, d = 4;
  const auto part = [&](const Tensor& packed, std::int64_t parts, std::int64_t i) {
    return packed.view({packed.size(0), packed.size(1), parts, h, d})
        .slice(2, i, i + 1)
        .squeeze(2)
        .transpose(1, 2);
  };
  for (const bool cross : {false, true}) {
    SCOPED_TRACE(cross ? "q and packed k, v" : "packed q, k, v");
    ops::AttentionOptions o;
    o.mask = mask_tensor({b, 1, 1, cross ? s : t}, 4);
    o.causal = !cross;
    o.dropout_p = 0.25F;
    o.key = {42, 7, 0, rig::purpose_id("attention.dropout")};
    const std::int64_t parts = cross ? 2 : 3;
    const Tensor packed =
        random_tensor({b, cross ? s : t, parts * h * d}, 1).set_requires_grad(true);
    const Tensor q_own = random_tensor({b, h, t, d}, 2).set_requires_grad(true);
    const Tensor upstream = random_tensor({b, h, t, d}, 3);
    const Tensor y =
        ops::scaled_dot_product_attention_packed(cross ? q_own : Tensor(), packed, h, o);
    grads_of(y, upstream, cross ? std::vector<Tensor>{q_own, packed} : std::vector<Tensor>{packed});
    // The same values through the split-heads views of copies.
    const Tensor packed2 = packed.detach().clone().set_requires_grad(true);
    const Tensor q2 = q_own.detach().clone().set_requires_grad(true);
    const Tensor y2 = ops::scaled_dot_product_attention(cross ? q2 : part(packed2, 3, 0),
                                                        part(packed2, parts, parts - 2),
                                                        part(packed2, parts, parts - 1), o);
    grads_of(y2, upstream, cross ? std::vector<Tensor>{q2, packed2} : std::vector<Tensor>{packed2});
    EXPECT_TRUE(tensors_close(y.contiguous(), y2.contiguous(), 0, 0));
    EXPECT_EQ(packed.grad().shape(), packed.shape());
    EXPECT_TRUE(tensors_close(packed.grad(), packed2.grad(), 0, 0));
    if (cross) {
      EXPECT_TRUE(tensors_close(q_own.grad(), q2.grad(), 0, 0));
    }
    const auto op = [&](const std::vector<Tensor>& in) {
      return ops::scaled_dot_product_attention_packed(cross ? in[1] : Tensor(), in[0], h, o);
    };
    std::vector<Tensor> inputs{packed.detach()};
    if (cross) inputs.push_back(q_own.detach());
    EXPECT_TRUE(check_gradients(op, inputs, 1e-2, 2e-2, 2e-3, 160));
  }
}

TEST(OpsAttention, PackedErrorsNameTheShapes) {
  const Tensor packed = random_tensor({2, 5, 20}, 1);
  try {
    ops::scaled_dot_product_attention_packed(Tensor(), packed, 3);
    ADD_FAILURE() << "a width of 20 split into 3 parts of 3 heads was accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(
        std::string(e.what()).find("packed [2,5,20] with 3 heads: expected packed [B, T, 3 H D]"),
        std::string::npos)
        << e.what();
  }
}

TEST(OpsAttention, FullyMaskedRowsGiveZerosNotNaN) {
  Tensor q = random_tensor({1, 1, 3, 4}, 1), k = random_tensor({1, 1, 5, 4}, 2),
         v = random_tensor({1, 1, 5, 4}, 3);
  q.set_requires_grad(true);
  k.set_requires_grad(true);
  v.set_requires_grad(true);
  std::vector<std::uint8_t> m(15, 1);
  for (int j = 0; j < 5; ++j) m[static_cast<std::size_t>(5 + j)] = 0;  // query 1 sees nothing
  ops::AttentionOptions o;
  o.mask = Tensor::from_vector(m, {1, 1, 3, 5});
  const Tensor y = ops::scaled_dot_product_attention(q, k, v, o);
  const std::vector<float> yv = y.to_vector();
  for (int j = 0; j < 4; ++j) EXPECT_EQ(yv[static_cast<std::size_t>(4 + j)], 0.0F);
  ops::sum(y).backward();
  for (const Tensor& g : {q.grad(), k.grad(), v.grad()}) {
    for (float x : g.to_vector()) EXPECT_TRUE(std::isfinite(x));
  }
  for (int j = 0; j < 4; ++j)
    EXPECT_EQ(q.grad().to_vector()[static_cast<std::size_t>(4 + j)], 0.0F);
  // Causal with more queries than keys: the first queries see no key at all.
  ops::AttentionOptions causal;
  causal.causal = true;
  const Tensor yc = ops::scaled_dot_product_attention(random_tensor({1, 1, 4, 2}, 5),
                                                      random_tensor({1, 1, 2, 2}, 6),
                                                      random_tensor({1, 1, 2, 2}, 7), causal);
  const std::vector<float> ycv = yc.to_vector();
  for (int j = 0; j < 4; ++j) EXPECT_EQ(ycv[static_cast<std::size_t>(j)], 0.0F);
  EXPECT_NE(ycv[7], 0.0F);
}

TEST(OpsAttention, DropoutUsesTheDropoutStreamOfTheWeights) {
  const std::int64_t b = 2, h = 3, t = 6, d = 5;
  const Tensor q = random_tensor({b, h, t, d}, 1), k = random_tensor({b, h, t, d}, 2),
               v = random_tensor({b, h, t, d}, 3);
  ops::AttentionOptions o;
  o.dropout_p = 0.4F;
  o.key = {3, 11, 1, rig::purpose_id("decoder.attention.dropout")};
  o.causal = true;
  const Tensor fused = ops::scaled_dot_product_attention(q, k, v, o);
  // The same computation from separate ops: softmax, ops::dropout, matmul.
  std::vector<std::uint8_t> causal(static_cast<std::size_t>(t * t));
  for (std::int64_t i = 0; i < t; ++i)
    for (std::int64_t j = 0; j < t; ++j) causal[static_cast<std::size_t>(i * t + j)] = j <= i;
  const Tensor scores =
      ops::mul_scalar(ops::matmul(q, k, false, true), 1.0F / std::sqrt(static_cast<float>(d)));
  const Tensor weights = ops::softmax(scores, -1, Tensor::from_vector(causal, {t, t}));
  const Tensor composed = ops::matmul(ops::dropout(weights, o.dropout_p, o.key), v);
  EXPECT_TRUE(tensors_close(fused, composed, 1e-5, 1e-6));
}

TEST(OpsAttention, DropoutStatistics) {
  // q = k = 0: uniform weights 1 / Tk; v = identity: the output is the
  // dropped weights themselves, 0 or 1 / (Tk (1 - p)).
  const std::int64_t b = 8, h = 4, t = 64;
  const float p = 0.3F;
  std::vector<float> eye(static_cast<std::size_t>(b * h * t * t), 0.0F);
  for (std::int64_t m = 0; m < b * h; ++m)
    for (std::int64_t i = 0; i < t; ++i) eye[static_cast<std::size_t>((m * t + i) * t + i)] = 1.0F;
  const Tensor v = Tensor::from_vector(eye, {b, h, t, t});
  const Tensor zeros = Tensor::zeros({b, h, t, t});
  ops::AttentionOptions o;
  o.dropout_p = p;
  o.key = {1, 2, 0, 3};
  const std::vector<float> y = ops::scaled_dot_product_attention(zeros, zeros, v, o).to_vector();
  const float kept = 1.0F / (static_cast<float>(t) * (1.0F - p));
  std::int64_t dropped = 0;
  for (float x : y) {
    if (x == 0.0F) {
      ++dropped;
    } else {
      EXPECT_NEAR(x, kept, 1e-6);
    }
  }
  const double fraction = static_cast<double>(dropped) / static_cast<double>(y.size());
  // 131072 Bernoulli(0.3) draws: the standard deviation is 0.0013.
  EXPECT_NEAR(fraction, p, 0.01);
  // Another key, another mask; the same key, the same mask.
  ops::AttentionOptions other = o;
  other.key.step = 3;
  EXPECT_NE(ops::scaled_dot_product_attention(zeros, zeros, v, other).to_vector(), y);
  EXPECT_EQ(ops::scaled_dot_product_attention(zeros, zeros, v, o).to_vector(), y);
}

// y, dq, dk, dv of attention over [b, h, tq/tk, d] random q, k, v (seeds 1-3)
// with a padding mask and dropout, backward from a random upstream gradient
// (seed 5): by the fused op, or by composed ops (matmul, scale, softmax,
// dropout, matmul).
std::vector<Tensor> attention_and_grads(const std::array<std::int64_t, 5>& dims, float scale,
                                        bool fused) {
  const auto [b, h, tq, tk, d] = dims;
  ops::AttentionOptions o;
  o.scale = scale;
  o.mask = mask_tensor({b, 1, tq, tk}, 4, 0.9F);
  o.dropout_p = 0.2F;
  o.key = {5, 6, 7, 8};
  std::vector<Tensor> x{random_tensor({b, h, tq, d}, 1), random_tensor({b, h, tk, d}, 2),
                        random_tensor({b, h, tk, d}, 3)};
  for (auto& t : x) t.set_requires_grad(true);
  Tensor y;
  if (fused) {
    y = ops::scaled_dot_product_attention(x[0], x[1], x[2], o);
  } else {
    const Tensor weights =
        ops::softmax(ops::mul_scalar(ops::matmul(x[0], x[1], false, true), scale), -1, o.mask);
    y = ops::matmul(ops::dropout(weights, o.dropout_p, o.key), x[2]);
  }
  grads_of(y, random_tensor({b, h, tq, d}, 5), x);
  return {y, x[0].grad(), x[1].grad(), x[2].grad()};
}

class OpsAttentionComposed : public ::testing::TestWithParam<std::array<std::int64_t, 5>> {};

TEST_P(OpsAttentionComposed, MatchesComposedOps) {
  // Sizes that exercise every GEMM tile width, row-block tail and the 16 x 16
  // transposes, forward and backward, with dropout.
  const std::vector<Tensor> fused = attention_and_grads(GetParam(), 0.2F, true);
  const std::vector<Tensor> composed = attention_and_grads(GetParam(), 0.2F, false);
  EXPECT_TRUE(tensors_close(fused[0], composed[0], 1e-4, 1e-5));
  for (std::size_t i = 1; i < 4; ++i) {
    SCOPED_TRACE(i);
    EXPECT_TRUE(tensors_close(fused[i], composed[i], 1e-4, 1e-5));
  }
}

INSTANTIATE_TEST_SUITE_P(Shapes, OpsAttentionComposed,
                         ::testing::Values(std::array<std::int64_t, 5>{1, 2, 45, 70, 37},
                                           std::array<std::int64_t, 5>{2, 2, 32, 32, 64}));

// Elementwise agreement of two tensors: the share of elements within
// 1e-5 (relative to the larger magnitude, floored at 1) and the largest
// difference.
struct Agreement {
  double close_share = 0.0, worst = 0.0, mean = 0.0;
};
Agreement agreement(const Tensor& x, const Tensor& y) {
  const std::vector<float> a = x.to_vector(), b = y.to_vector();
  Agreement r;
  std::size_t close = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    const double diff = std::abs(static_cast<double>(a[i]) - b[i]);
    const double scale =
        std::max({1.0, std::abs(static_cast<double>(a[i])), std::abs(static_cast<double>(b[i]))});
    close += diff <= 1e-5 * scale ? 1 : 0;
    r.worst = std::max(r.worst, diff);
    r.mean += diff / static_cast<double>(a.size());
  }
  r.close_share = static_cast<double>(close) / static_cast<double>(a.size());
  return r;
}

TEST(OpsAttention, Bfloat16PrecisionRoundsEveryPerHeadProduct) {
  // At matmul_precision bfloat16 ops::matmul rounds its operands, so the
  // composed ops round q, k, the dropped weights and v (and, backward, the
  // upstream gradient and ds) where the fused kernels' per-head products do.
  // A power-of-two scale commutes with rounding. Both ways must agree to f32
  // accuracy almost everywhere (a value 1 ulp apart may round to another
  // bf16 neighbour), and be far from the f32 results.
  const std::array<std::int64_t, 5> dims{2, 2, 33, 19, 24};
  const std::vector<Tensor> f32 = attention_and_grads(dims, 0.25F, true);
  std::vector<Tensor> fused;
  std::vector<Tensor> composed;
  {
    const rig::ops::MatmulPrecisionScope bf16(rig::MatmulPrecision::bf16);
    fused = attention_and_grads(dims, 0.25F, true);
    composed = attention_and_grads(dims, 0.25F, false);
  }
  const char* names[] = {"y", "dq", "dk", "dv"};
  for (std::size_t i = 0; i < 4; ++i) {
    SCOPED_TRACE(names[i]);
    const Agreement same = agreement(fused[i], composed[i]);
    const Agreement other = agreement(fused[i], f32[i]);
    EXPECT_GE(same.close_share, 0.99);
    EXPECT_LT(same.worst, 2e-3);
    EXPECT_LT(other.close_share, 0.5);
    EXPECT_GT(other.mean, 20.0 * same.mean);
  }
}

TEST(OpsAttention, HalfPrecisionKeepsTheDtype) {
  const Tensor q = random_tensor({1, 2, 3, 4}, 1), k = random_tensor({1, 2, 5, 4}, 2),
               v = random_tensor({1, 2, 5, 4}, 3);
  const Tensor y = ops::scaled_dot_product_attention(q.to(rig::DType::f16), k.to(rig::DType::f16),
                                                     v.to(rig::DType::f16));
  EXPECT_EQ(y.dtype(), rig::DType::f16);
  EXPECT_TRUE(
      tensors_close(y.to(rig::DType::f32), ops::scaled_dot_product_attention(q, k, v), 1e-2, 1e-2));
}

TEST(OpsAttention, ErrorsNameTheShapes) {
  const Tensor q = Tensor::zeros({2, 4, 3, 8}), kv = Tensor::zeros({2, 4, 5, 8});
  EXPECT_TRUE(contains(
      error_of([&] {
        ops::scaled_dot_product_attention(q, Tensor::zeros({2, 4, 5, 6}), kv);
      }),
      "scaled_dot_product_attention: q [2,4,3,8], k [2,4,5,6], v [2,4,5,8]: batch, heads and D "
      "must agree"));
  EXPECT_TRUE(contains(error_of([&] {
                         ops::scaled_dot_product_attention(Tensor::zeros({4, 3, 8}), kv, kv);
                       }),
                       "q must be [B, H, Tq, D], k and v [B, H, Tk, D]"));
  ops::AttentionOptions bad_mask;
  bad_mask.mask = Tensor::ones({2, 1, 1, 4}, rig::DType::u8);
  EXPECT_TRUE(contains(error_of([&] { ops::scaled_dot_product_attention(q, kv, kv, bad_mask); }),
                       "mask [2,1,1,4] does not broadcast to scores [2,4,3,5]"));
  bad_mask.mask = Tensor::ones({2, 1, 1, 5});
  EXPECT_TRUE(contains(error_of([&] { ops::scaled_dot_product_attention(q, kv, kv, bad_mask); }),
                       "scaled_dot_product_attention: mask must be u8, got f32 [2,1,1,5]"));
  ops::AttentionOptions bad_p;
  bad_p.dropout_p = 1.5F;
  EXPECT_TRUE(contains(error_of([&] { ops::scaled_dot_product_attention(q, kv, kv, bad_p); }),
                       "dropout_p 1.5 is not in [0, 1]"));
}

}  // namespace
