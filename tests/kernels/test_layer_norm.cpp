#include "cuda/kernels/layer_norm.hpp"

#include <gtest/gtest.h>

#include "kernel_test_util.hpp"

namespace rig::kernels::test {
namespace {

struct Affine {
  bool gamma, beta;
};

TEST(KernelLayerNorm, ForwardAndBackwardMatchCpu) {
  // 200 rows: four row blocks of the parameter gradients, the last partial.
  for (const std::int64_t rows :
       {std::int64_t{1}, std::int64_t{3}, std::int64_t{37}, std::int64_t{200}}) {
    for (const std::int64_t d : kCols) {
      for (const Affine affine : {Affine{true, true}, Affine{false, false}, Affine{true, false}}) {
        SCOPED_TRACE(::testing::Message()
                     << rows << "x" << d << " gamma " << affine.gamma << " beta " << affine.beta);
        const auto n = static_cast<std::size_t>(rows * d);
        const auto seed = static_cast<std::uint32_t>(rows * 7919 + d);
        // An offset mean, so the two-pass variance matters.
        const std::vector<float> x = uniform(rows * d, 2.0F, 6.0F, seed);
        const std::vector<float> g = uniform(rows * d, -1.0F, 1.0F, seed + 1);
        const std::vector<float> gamma = uniform(d, 0.5F, 1.5F, seed + 2);
        const std::vector<float> beta = uniform(d, -0.5F, 0.5F, seed + 3);
        const float* gp = affine.gamma ? gamma.data() : nullptr;
        const float* bp = affine.beta ? beta.data() : nullptr;
        const float eps = 1e-5F;
        const auto rn = static_cast<std::size_t>(rows);
        const auto dn = static_cast<std::size_t>(d);

        std::vector<float> want_y(n), want_mean(rn), want_rstd(rn);
        cpu().layer_norm_forward(x.data(), gp, bp, want_y.data(), want_mean.data(),
                                 want_rstd.data(), rows, d, eps);
        std::vector<float> want_dx(n), want_dgamma(dn), want_dbeta(dn);
        std::vector<float> scratch(
            static_cast<std::size_t>(cpu().layer_norm_scratch_size(rows, d)));
        cpu().layer_norm_backward(x.data(), gp, want_mean.data(), want_rstd.data(), g.data(),
                                  want_dx.data(), want_dgamma.data(), want_dbeta.data(), rows, d,
                                  scratch.data());

        std::vector<float> first_y;
        for (const std::uint64_t emu_seed : kSeeds) {
          std::vector<float> y(n, 7.0F), mean(rn, 7.0F), rstd(rn, 7.0F);
          run(LayerNormForward{x.data(), gp, bp, y.data(), mean.data(), rstd.data(), rows, d, eps},
              emu_seed);
          EXPECT_TRUE(close(mean, want_mean, 0.0F, 1e-6F));
          EXPECT_TRUE(close(rstd, want_rstd, 0.0F, 1e-4F));
          EXPECT_TRUE(close(y, want_y, 1e-4F, 1e-4F));
          if (first_y.empty()) {
            first_y = y;
          } else {
            EXPECT_TRUE(bit_equal(y, first_y));
          }
          // Backward from the CPU's statistics: both see the same inputs.
          std::vector<float> dx(n, 7.0F), dgamma(dn, 7.0F), dbeta(dn, 7.0F);
          run(LayerNormBackwardDx{x.data(), gp, want_mean.data(), want_rstd.data(), g.data(),
                                  dx.data(), rows, d},
              emu_seed);
          std::vector<float> partials(static_cast<std::size_t>(layer_norm_params_scratch(rows, d)),
                                      7.0F);
          run_layer_norm_params([&](const auto& k) { run(k, emu_seed); },
                                LayerNormBackwardParams{.x = x.data(),
                                                        .mean = want_mean.data(),
                                                        .rstd = want_rstd.data(),
                                                        .g = g.data(),
                                                        .rows = rows,
                                                        .d = d},
                                dgamma.data(), dbeta.data(), partials.data());
          // dx cancels (g gamma - means): compare with the row's scale.
          EXPECT_TRUE(close(dx, want_dx, 2e-4F, 1e-4F));
          EXPECT_TRUE(close(dgamma, want_dgamma, 1e-5F, 1e-5F));
          EXPECT_TRUE(close(dbeta, want_dbeta, 1e-5F, 1e-5F));
        }
      }
    }
  }
}

TEST(KernelLayerNorm, ParamGradsAreOneThreadPerRowBlockAndColumns) {
  // 37 rows: one block, written straight into f32 dgamma / dbeta (the
  // scratch is for 16-bit ones, rounded by ColumnTotals).
  EXPECT_EQ(layer_norm_row_blocks(37), 1);
  EXPECT_EQ(layer_norm_params_scratch(37, 1000), 2 * 1000);
  // A thread per column where d % 8 != 0, per 8 columns (a pack) otherwise.
  const LayerNormBackwardParams one{.rows = 37, .d = 1001};
  EXPECT_FALSE(one.packed());
  EXPECT_EQ(one.plan(h100()).block.x, 256U);
  EXPECT_EQ(one.plan(h100()).grid.x, 4U);
  const LayerNormBackwardParams packs{.rows = 37, .d = 1000};
  EXPECT_TRUE(packs.packed());
  EXPECT_EQ(packs.plan(h100()).grid.x, 1U);  // 125 threads
  // 8000 rows: 125 partial rows of each gradient, 8000 threads of 8 columns.
  EXPECT_EQ(layer_norm_row_blocks(8000), 125);
  EXPECT_EQ(layer_norm_params_scratch(8000, 512), 2 * 125 * 512);
  const LayerNormBackwardParams many{.rows = 8000, .d = 512};
  const simt::LaunchShape s = many.plan(h100());
  EXPECT_GE(std::int64_t{s.grid.x} * s.block.x, std::int64_t{125 * 512 / 8});
}

}  // namespace
}  // namespace rig::kernels::test
