#include "cuda/kernels/cross_entropy.hpp"

#include <gtest/gtest.h>

#include "kernel_test_util.hpp"

namespace rig::kernels::test {
namespace {

std::vector<std::int64_t> random_labels(std::int64_t rows, std::int64_t c, std::uint32_t seed) {
  std::mt19937 gen(seed);
  std::vector<std::int64_t> labels(static_cast<std::size_t>(rows));
  for (auto& l : labels) l = static_cast<std::int64_t>(gen() % static_cast<std::uint32_t>(c));
  return labels;
}

TEST(KernelCrossEntropy, ForwardAndInPlaceBackwardMatchCpu) {
  for (const std::int64_t rows : kRows) {
    for (const std::int64_t c : kCols) {
      for (const bool smoothed : {false, true}) {
        for (const bool row_scaled : {false, true}) {
          SCOPED_TRACE(::testing::Message() << rows << "x" << c << " smoothed " << smoothed
                                            << " row_scale " << row_scaled);
          const auto n = static_cast<std::size_t>(rows * c);
          const auto rn = static_cast<std::size_t>(rows);
          const auto seed = static_cast<std::uint32_t>(rows * 3571 + c);
          const std::vector<float> x = uniform(rows * c, -6.0F, 6.0F, seed);
          const std::vector<std::int64_t> labels = random_labels(rows, c, seed + 1);
          const std::vector<float> row_scale = uniform(rows, 0.0F, 2.0F, seed + 2);
          const float* rs = row_scaled ? row_scale.data() : nullptr;
          const math::SmoothedTargets q =
              smoothed ? math::torch_smoothing(0.1F, c) : math::SmoothedTargets{};
          const float scale = 0.25F;
          const float factor = 1.5F;

          std::vector<float> want_loss(rn), want_lse(rn), want_dx(n);
          cpu().cross_entropy_forward(x.data(), labels.data(), rows, c, q.on, q.off,
                                      want_loss.data(), want_lse.data());
          cpu().cross_entropy_backward(x.data(), labels.data(), want_lse.data(), rs, scale, &factor,
                                       rows, c, q.on, q.off, want_dx.data());

          for (const std::uint64_t emu_seed : kSeeds) {
            std::vector<float> loss(rn, 3.0F), lse(rn, 3.0F);
            run(CrossEntropyForward{x.data(), labels.data(), loss.data(), lse.data(), rows, c, q},
                emu_seed);
            EXPECT_TRUE(close(lse, want_lse, 1e-5F, 1e-6F));
            EXPECT_TRUE(close(loss, want_loss, 1e-5F, 1e-5F));
            // In place over a copy of the logits, from the CPU's lse.
            std::vector<float> dx = x;
            run(CrossEntropyBackward{dx.data(), labels.data(), want_lse.data(), rs, &factor, scale,
                                     dx.data(), rows, c, q},
                emu_seed);
            EXPECT_TRUE(close(dx, want_dx, 1e-7F, 1e-5F));
          }
        }
      }
    }
  }
}

}  // namespace
}  // namespace rig::kernels::test
