// batch_norm: golden values from PyTorch (outputs, gradients and the running
// statistics after the in-place update), finite differences in training and
// eval mode, error messages.
#include <gtest/gtest.h>

#include <cmath>
#include <tuple>
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

TEST(OpsBatchNorm, GoldenForwardBackwardAndRunningStatistics) {
  int seen = 0;
  for (const auto& c : rig_test::load_golden("ops_nn")) {
    if (c.name.rfind("bn_", 0) != 0) continue;
    ++seen;
    SCOPED_TRACE(c.name);
    Tensor x = leaf(c, "x");
    Tensor gamma = leaf(c, "gamma");
    Tensor beta = leaf(c, "beta");
    Tensor running_mean = c.input("running_mean").clone();
    Tensor running_var = c.input("running_var").clone();
    const bool training = c.params.at("training");
    const Tensor y =
        ops::batch_norm(x, gamma, beta, running_mean, running_var, training,
                        c.params.at("momentum").get<float>(), c.params.at("eps").get<float>());
    EXPECT_TRUE(tensors_close(y, c.output("y"), 1e-4, 1e-5));
    EXPECT_TRUE(tensors_close(running_mean, c.output("running_mean"), 1e-5, 1e-6));
    EXPECT_TRUE(tensors_close(running_var, c.output("running_var"), 1e-5, 1e-6));
    grads_of(y, c.input("upstream"), {x, gamma, beta});
    EXPECT_TRUE(tensors_close(x.grad(), c.grad("x"), 1e-4, 1e-4));
    EXPECT_TRUE(tensors_close(gamma.grad(), c.grad("gamma"), 1e-4, 1e-4));
    EXPECT_TRUE(tensors_close(beta.grad(), c.grad("beta"), 1e-4, 1e-4));
  }
  EXPECT_EQ(seen, 5);
}

struct BnConfig {
  const char* name;
  Shape x;
  bool training;
};

class OpsBatchNormGradCheck : public ::testing::TestWithParam<BnConfig> {};

TEST_P(OpsBatchNormGradCheck, MatchesFiniteDifferences) {
  const BnConfig& cfg = GetParam();
  const std::int64_t c = cfg.x[1];
  const Tensor x = random_tensor(cfg.x, 1, -2.0F, 3.0F);
  const Tensor gamma = random_tensor({c}, 2, 0.5F, 1.5F);
  const Tensor beta = random_tensor({c}, 3);
  const Tensor mean0 = random_tensor({c}, 4);
  const Tensor var0 = random_tensor({c}, 5, 0.5F, 2.0F);
  const auto op = [&](const std::vector<Tensor>& in) {
    // Fresh running statistics per evaluation: the op updates them in place.
    return ops::batch_norm(in[0], in[1], in[2], mean0.clone(), var0.clone(), cfg.training);
  };
  EXPECT_TRUE(check_gradients(op, {x, gamma, beta}, 1e-2, 2e-2, 2e-3, 160));
}

INSTANTIATE_TEST_SUITE_P(Configs, OpsBatchNormGradCheck,
                         ::testing::Values(BnConfig{"train_nchw", {3, 2, 4, 5}, true},
                                           BnConfig{"train_2d", {6, 4}, true},
                                           BnConfig{"train_one_pixel", {5, 3, 1, 1}, true},
                                           BnConfig{"eval_nchw", {2, 3, 3, 3}, false},
                                           BnConfig{"eval_2d", {4, 5}, false}),
                         [](const auto& info) { return std::string(info.param.name); });

// batch_norm_relu: relu(batch_norm(...)) in one op (fused on the CUDA back
// end; composed here), its gradients against finite differences.
TEST_P(OpsBatchNormGradCheck, WithReluMatchesFiniteDifferences) {
  const BnConfig& cfg = GetParam();
  const std::int64_t c = cfg.x[1];
  const Tensor gamma = random_tensor({c}, 12, 0.5F, 1.5F);
  const Tensor beta = random_tensor({c}, 13);
  const Tensor mean0 = random_tensor({c}, 14);
  const Tensor var0 = random_tensor({c}, 15, 0.5F, 2.0F);
  const auto normalised = [&](const Tensor& in) {
    return ops::batch_norm(in, gamma, beta, mean0.clone(), var0.clone(), cfg.training).to_vector();
  };
  // Finite differences of step 1e-2 across relu's kink mean nothing: inputs
  // whose output lies within 0.05 of 0 are moved until none does.
  Tensor x = random_tensor(cfg.x, 11, -2.0F, 3.0F);
  for (int round = 0; round < 50; ++round) {
    const std::vector<float> y = normalised(x);
    std::vector<float> xs = x.to_vector();
    bool moved = false;
    for (std::size_t i = 0; i < y.size(); ++i) {
      if (std::fabs(y[i]) < 0.05F) {
        xs[i] += 0.3F;
        moved = true;
      }
    }
    if (!moved) break;
    x = Tensor::from_vector(xs, cfg.x);
  }
  for (const float v : normalised(x)) ASSERT_GT(std::fabs(v), 0.05F) << "an output at the kink";
  const auto op = [&](const std::vector<Tensor>& in) {
    return ops::batch_norm_relu(in[0], in[1], in[2], mean0.clone(), var0.clone(), cfg.training);
  };
  EXPECT_TRUE(check_gradients(op, {x, gamma, beta}, 1e-2, 2e-2, 2e-3, 160));
  // The same numbers as the two ops.
  const Tensor fused = op({x, gamma, beta});
  const Tensor composed =
      ops::relu(ops::batch_norm(x, gamma, beta, mean0.clone(), var0.clone(), cfg.training));
  EXPECT_EQ(fused.to_vector(), composed.to_vector());
}

// A direct double reference at the ResNet benchmark's layout (many pixels per
// channel, several threads) and for [N, C] with more channels than one block.
void expect_matches_reference(const Shape& shape) {
  const std::int64_t n = shape[0], c = shape[1];
  const std::int64_t inner = shape.size() == 4 ? shape[2] * shape[3] : 1;
  Tensor x = random_tensor(shape, 7, -1.0F, 4.0F);
  Tensor gamma = random_tensor({c}, 8, 0.5F, 1.5F);
  Tensor beta = random_tensor({c}, 9);
  x.set_requires_grad(true);
  gamma.set_requires_grad(true);
  beta.set_requires_grad(true);
  Tensor rm = Tensor::zeros({c});
  Tensor rv = Tensor::ones({c});
  const Tensor y = ops::batch_norm(x, gamma, beta, rm, rv, true, 0.1F, 1e-5F);
  const Tensor up = random_tensor(shape, 10);
  grads_of(y, up, {x, gamma, beta});

  const std::vector<float> xv = x.to_vector(), gv = gamma.to_vector(), bv = beta.to_vector(),
                           uv = up.to_vector();
  const double count = static_cast<double>(n * inner);
  std::vector<float> ey(xv.size()), edx(xv.size()), edg(static_cast<std::size_t>(c)),
      edb(static_cast<std::size_t>(c)), erm(static_cast<std::size_t>(c)),
      erv(static_cast<std::size_t>(c));
  for (std::int64_t ch = 0; ch < c; ++ch) {
    const auto idx = [&](std::int64_t i, std::int64_t j) {
      return static_cast<std::size_t>((i * c + ch) * inner + j);
    };
    double mean = 0, var = 0, sum_u = 0, sum_uxh = 0;
    for (std::int64_t i = 0; i < n; ++i)
      for (std::int64_t j = 0; j < inner; ++j) mean += xv[idx(i, j)];
    mean /= count;
    for (std::int64_t i = 0; i < n; ++i)
      for (std::int64_t j = 0; j < inner; ++j) var += std::pow(xv[idx(i, j)] - mean, 2);
    var /= count;
    const double invstd = 1.0 / std::sqrt(var + 1e-5);
    const auto cu = static_cast<std::size_t>(ch);
    for (std::int64_t i = 0; i < n; ++i) {
      for (std::int64_t j = 0; j < inner; ++j) {
        const double xh = (xv[idx(i, j)] - mean) * invstd;
        ey[idx(i, j)] = static_cast<float>(xh * gv[cu] + bv[cu]);
        sum_u += uv[idx(i, j)];
        sum_uxh += uv[idx(i, j)] * xh;
      }
    }
    for (std::int64_t i = 0; i < n; ++i) {
      for (std::int64_t j = 0; j < inner; ++j) {
        const double xh = (xv[idx(i, j)] - mean) * invstd;
        edx[idx(i, j)] = static_cast<float>(gv[cu] * invstd *
                                            (uv[idx(i, j)] - sum_u / count - xh * sum_uxh / count));
      }
    }
    edg[cu] = static_cast<float>(sum_uxh);
    edb[cu] = static_cast<float>(sum_u);
    erm[cu] = static_cast<float>(0.1 * mean);
    erv[cu] = static_cast<float>(0.9 + 0.1 * var * count / (count - 1));
  }
  EXPECT_TRUE(tensors_close(y, Tensor::from_vector(ey, shape), 1e-4, 1e-4));
  EXPECT_TRUE(tensors_close(x.grad(), Tensor::from_vector(edx, shape), 1e-3, 1e-4));
  EXPECT_TRUE(tensors_close(gamma.grad(), Tensor::from_vector(edg, {c}), 1e-4, 1e-3));
  EXPECT_TRUE(tensors_close(beta.grad(), Tensor::from_vector(edb, {c}), 1e-4, 1e-3));
  EXPECT_TRUE(tensors_close(rm, Tensor::from_vector(erm, {c}), 1e-5, 1e-6));
  EXPECT_TRUE(tensors_close(rv, Tensor::from_vector(erv, {c}), 1e-5, 1e-6));
}

TEST(OpsBatchNorm, MatchesReferenceAtResNetLayout) {
  expect_matches_reference({16, 32, 14, 14});
}

TEST(OpsBatchNorm, MatchesReferenceForManyFeatures) {
  expect_matches_reference({40, 600});
}

TEST(OpsBatchNorm, AddReluMatchesFiniteDifferences) {
  // relu(batch_norm(x) + residual), a residual block's end, with the
  // residual's gradient; away from relu's kink (|output| > 0.05).
  const Shape shape{4, 3, 3, 3};
  Tensor x = random_tensor(shape, 21, -2.0F, 2.0F);
  Tensor residual = random_tensor(shape, 22, -1.0F, 1.0F);
  const Tensor gamma = random_tensor({3}, 23, 0.5F, 1.5F), beta = random_tensor({3}, 24);
  {
    std::vector<float> r = residual.to_vector();
    const std::vector<float> y =
        ops::batch_norm(x, gamma, beta, {}, {}, true).to_vector();  // batch norm's output
    for (std::size_t i = 0; i < r.size(); ++i) {
      if (std::fabs(y[i] + r[i]) < 0.05F) r[i] += 0.2F;
    }
    residual = Tensor::from_vector(r, shape);
  }
  const auto op = [&](const std::vector<Tensor>& in) {
    return ops::batch_norm_add_relu(in[0], in[1], in[2], in[3], {}, {}, true);
  };
  EXPECT_TRUE(check_gradients(op, {x, residual, gamma, beta}, 1e-2, 2e-2, 2e-3, 160));
  const Tensor composed = ops::add_relu(ops::batch_norm(x, gamma, beta, {}, {}, true), residual);
  EXPECT_EQ(op({x, residual, gamma, beta}).to_vector(), composed.to_vector());
}

TEST(OpsBatchNorm, AddBatchNormReluMatchesFiniteDifferences) {
  // relu(batch_norm(x) + batch_norm(x2)), a residual block's end with a
  // projection shortcut, with every input's gradient; away from relu's kink
  // (x2 nudged until every |pre-relu sum| > 0.05).
  const Shape shape{4, 3, 3, 3};
  const Tensor x = random_tensor(shape, 31, -2.0F, 2.0F);
  Tensor x2 = random_tensor(shape, 32, -1.0F, 1.0F);
  const Tensor gamma = random_tensor({3}, 33, 0.5F, 1.5F), beta = random_tensor({3}, 34);
  const Tensor gamma2 = random_tensor({3}, 35, 0.5F, 1.5F), beta2 = random_tensor({3}, 36);
  const auto pre_relu = [&] {
    return ops::add(ops::batch_norm(x, gamma, beta, {}, {}, true),
                    ops::batch_norm(x2, gamma2, beta2, {}, {}, true, 0.2F, 1e-3F))
        .to_vector();
  };
  for (int round = 0; round < 20; ++round) {
    std::vector<float> v = x2.to_vector();
    const std::vector<float> sums = pre_relu();
    bool moved = false;
    for (std::size_t i = 0; i < v.size(); ++i) {
      if (std::fabs(sums[i]) < 0.05F) {
        v[i] += 0.3F;
        moved = true;
      }
    }
    if (!moved) break;
    x2 = Tensor::from_vector(v, shape);
  }
  for (const float s : pre_relu()) ASSERT_GE(std::fabs(s), 0.05F) << "x2 not moved off the kink";
  const auto op = [](const std::vector<Tensor>& in) {
    return ops::batch_norm_add_batch_norm_relu(in[0], {in[1], in[2], {}, {}, 0.1F, 1e-5F}, in[3],
                                               {in[4], in[5], {}, {}, 0.2F, 1e-3F}, true);
  };
  EXPECT_TRUE(check_gradients(op, {x, gamma, beta, x2, gamma2, beta2}, 1e-2, 2e-2, 2e-3, 160));
  const Tensor composed = ops::batch_norm_add_relu(
      x, ops::batch_norm(x2, gamma2, beta2, {}, {}, true, 0.2F, 1e-3F), gamma, beta, {}, {}, true);
  EXPECT_EQ(op({x, gamma, beta, x2, gamma2, beta2}).to_vector(), composed.to_vector());
}

TEST(OpsBatchNorm, ChannelsLastRowsAreTheNchwBatchNorm) {
  // A channels-last network normalises NHWC activations as [N H W, C] rows:
  // the same outputs, gradients and running statistics as NCHW, up to the
  // order of the per-channel sums; with and without the fused relu.
  for (const bool relu : {false, true}) {
    SCOPED_TRACE(relu ? "batch_norm_relu" : "batch_norm");
    const Shape shape{6, 20, 7, 5};
    const std::int64_t c = shape[1];
    const auto norm = [&](const Tensor& x, const Tensor& g, const Tensor& b, Tensor& rm,
                          Tensor& rv) {
      return relu ? ops::batch_norm_relu(x, g, b, rm, rv, true)
                  : ops::batch_norm(x, g, b, rm, rv, true);
    };
    Tensor x = leaf(random_tensor(shape, 11, -1.0F, 3.0F));
    Tensor gamma = leaf(random_tensor({c}, 12, 0.5F, 1.5F));
    Tensor beta = leaf(random_tensor({c}, 13));
    Tensor rm = Tensor::zeros({c}), rv = Tensor::ones({c});
    const Tensor y = norm(x, gamma, beta, rm, rv);
    const Tensor up = random_tensor(shape, 14);
    grads_of(y, up, {x, gamma, beta});

    Tensor xl = leaf(x.detach().permute({0, 2, 3, 1}).contiguous());
    Tensor gl = leaf(gamma.detach()), bl = leaf(beta.detach());
    Tensor rml = Tensor::zeros({c}), rvl = Tensor::ones({c});
    const Tensor yl = norm(xl.reshape({-1, c}), gl, bl, rml, rvl).reshape(xl.shape());
    EXPECT_TRUE(tensors_close(yl.permute({0, 3, 1, 2}), y, 1e-5, 1e-5));
    grads_of(yl, up.permute({0, 2, 3, 1}).contiguous(), {xl, gl, bl});
    EXPECT_TRUE(tensors_close(xl.grad().permute({0, 3, 1, 2}), x.grad(), 1e-4, 1e-5));
    EXPECT_TRUE(tensors_close(gl.grad(), gamma.grad(), 1e-4, 1e-4));
    EXPECT_TRUE(tensors_close(bl.grad(), beta.grad(), 1e-4, 1e-4));
    EXPECT_TRUE(tensors_close(rml, rm, 1e-6, 1e-6));
    EXPECT_TRUE(tensors_close(rvl, rv, 1e-6, 1e-6));
  }
}

TEST(OpsBatchNorm, EvalUsesAndKeepsTheRunningStatistics) {
  const Tensor x = random_tensor({4, 2, 3, 3}, 1);
  Tensor rm = Tensor::from_vector(std::vector<float>{0.5F, -1.0F}, {2});
  Tensor rv = Tensor::from_vector(std::vector<float>{4.0F, 0.25F}, {2});
  const Tensor y =
      ops::batch_norm(x, Tensor::ones({2}), Tensor::zeros({2}), rm, rv, false, 0.1F, 0.0F);
  const std::vector<float> xv = x.to_vector(), yv = y.to_vector();
  for (std::size_t i = 0; i < xv.size(); ++i) {
    const bool first = (i / 9) % 2 == 0;
    EXPECT_NEAR(yv[i], first ? (xv[i] - 0.5F) / 2.0F : (xv[i] + 1.0F) / 0.5F, 1e-5);
  }
  EXPECT_EQ(rm.to_vector(), (std::vector<float>{0.5F, -1.0F}));
  EXPECT_EQ(rv.to_vector(), (std::vector<float>{4.0F, 0.25F}));
}

TEST(OpsBatchNorm, WithoutAffineParametersOrRunningStatistics) {
  const Tensor x = random_tensor({8, 3}, 2);
  const Tensor y = ops::batch_norm(x, {}, {}, {}, {}, true);
  const Tensor per_channel_mean = ops::mean(y, {0});
  EXPECT_TRUE(tensors_close(per_channel_mean, Tensor::zeros({3}), 0, 1e-6));
}

TEST(OpsBatchNorm, HalfPrecisionKeepsTheDtype) {
  const Tensor x = random_tensor({4, 3, 2, 2}, 3);
  Tensor rm = Tensor::zeros({3}), rv = Tensor::ones({3});
  const Tensor y =
      ops::batch_norm(x.to(rig::DType::bf16), Tensor::ones({3}), Tensor::zeros({3}), rm, rv, true);
  EXPECT_EQ(y.dtype(), rig::DType::bf16);
  Tensor rm2 = Tensor::zeros({3}), rv2 = Tensor::ones({3});
  const Tensor y32 = ops::batch_norm(x.to(rig::DType::bf16).to(rig::DType::f32), Tensor::ones({3}),
                                     Tensor::zeros({3}), rm2, rv2, true);
  EXPECT_TRUE(tensors_close(y.to(rig::DType::f32), y32, 1e-2, 1e-2));
}

// 16-bit x on the CPU (a back end that computes f32 only): batch_norm and
// relu give the bits of their f32 ops on cast copies, forward and backward,
// and keep the 16-bit tensors for the backward rather than f32 copies.
TEST(OpsBatchNorm, SixteenBitOnTheCpuHasTheCastCompositionsBitsAndKeeps16BitTensors) {
  const rig::Shape shape{8, 16, 8, 8};
  const Tensor values = random_tensor(shape, 11, -2.0F, 2.0F);
  const Tensor upstream = random_tensor(shape, 12);
  for (const rig::DType dtype : {rig::DType::bf16, rig::DType::f16}) {
    SCOPED_TRACE(std::string(rig::dtype_name(dtype)));
    const auto run = [&](bool composed, Tensor& rm, Tensor& rv) {
      Tensor x = leaf(values.to(dtype));
      Tensor gamma = leaf(random_tensor({16}, 13, 0.5F, 1.5F));
      Tensor beta = leaf(random_tensor({16}, 14));
      const std::size_t before = rig::allocator_stats().current_bytes;
      Tensor y;
      if (composed) {  // what these ops did before: differentiable casts around f32 ops
        const Tensor normed =
            ops::batch_norm(x.to(rig::DType::f32), gamma, beta, rm, rv, true).to(dtype);
        y = ops::relu(normed.to(rig::DType::f32)).to(dtype);
      } else {
        y = ops::relu(ops::batch_norm(x, gamma, beta, rm, rv, true));
      }
      const std::size_t held = rig::allocator_stats().current_bytes - before;
      grads_of(y, upstream.to(dtype), {x, gamma, beta});
      return std::tuple{y, x.grad(), gamma.grad(), beta.grad(), held};
    };
    Tensor rm = Tensor::zeros({16}), rv = Tensor::ones({16});
    Tensor rm_ref = Tensor::zeros({16}), rv_ref = Tensor::ones({16});
    const auto [y, dx, dgamma, dbeta, held] = run(false, rm, rv);
    const auto [y_ref, dx_ref, dgamma_ref, dbeta_ref, held_ref] = run(true, rm_ref, rv_ref);
    EXPECT_EQ(y.dtype(), dtype);
    EXPECT_EQ(dx.dtype(), dtype);
    EXPECT_TRUE(same_values(y.to(rig::DType::f32), y_ref.to(rig::DType::f32)));
    EXPECT_TRUE(same_values(dx.to(rig::DType::f32), dx_ref.to(rig::DType::f32)));
    EXPECT_TRUE(same_values(dgamma, dgamma_ref));
    EXPECT_TRUE(same_values(dbeta, dbeta_ref));
    EXPECT_TRUE(same_values(rm, rm_ref));
    EXPECT_TRUE(same_values(rv, rv_ref));
    // Held after the forward: batch norm's 16-bit output (relu's saved
    // input) and relu's output, 2 x 16 KiB, and the per-channel vectors;
    // the composition held f32 copies of x and of relu's output besides.
    const std::size_t bytes16 = static_cast<std::size_t>(values.numel()) * 2;
    EXPECT_LT(held, 2 * bytes16 + 4096);
    EXPECT_GT(held_ref, 4 * bytes16);
  }
}

TEST(OpsBatchNorm, ErrorsNameTheShapes) {
  const Tensor x = Tensor::zeros({4, 3, 2, 2});
  const Tensor c3 = Tensor::zeros({3});
  EXPECT_TRUE(contains(error_of([&] { ops::batch_norm(x, Tensor::ones({4}), c3, c3, c3, true); }),
                       "batch_norm: x [4,3,2,2]: gamma [4] must be [3]"));
  EXPECT_TRUE(contains(error_of([&] {
                         ops::batch_norm(Tensor::zeros({4, 3, 2}), c3, c3, c3, c3, true);
                       }),
                       "batch_norm: x [4,3,2] must be [N, C, H, W] or [N, C]"));
  EXPECT_TRUE(
      contains(error_of([&] {
                 ops::batch_norm(Tensor::zeros({1, 3}), c3, c3, c3.clone(), c3.clone(), true);
               }),
               "batch_norm: x [1,3]: training needs more than one value per channel"));
  EXPECT_TRUE(contains(error_of([&] { ops::batch_norm(x, c3, c3, {}, {}, false); }),
                       "eval mode needs running_mean and running_var"));
  EXPECT_TRUE(contains(
      error_of([&] { ops::batch_norm(x, c3, c3, Tensor::zeros({3}, rig::DType::f16), c3, true); }),
      "batch_norm: running_mean must be f32, got f16 [3]"));
  EXPECT_TRUE(contains(
      error_of([&] { ops::batch_norm(x, c3, c3, Tensor::zeros({6}).slice(0, 0, 6, 2), c3, true); }),
      "running_mean [3] must be contiguous"));
}

}  // namespace
