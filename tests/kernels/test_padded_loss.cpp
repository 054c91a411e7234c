#include "cuda/kernels/padded_loss.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "kernel_test_util.hpp"

namespace rig::kernels::test {
namespace {

// 0 rows, one row, fewer rows than a block, one chunk, several chunks.
constexpr std::int64_t kRowCounts[] = {0, 1, 7, 300, 4097, 9001};

enum class Weights { random, with_zeros, all_zero };

struct Outputs {
  float loss = -1.0F;
  std::vector<float> row_scale, dw;
  float x_scale = -1.0F;
};

// The kernel sequences of padded_loss and padded_loss_backward, in one scratch.
Outputs run_sequences(const std::vector<float>& xent, const std::vector<float>& w, double constant,
                      float upstream, bool with_dw, std::uint64_t seed) {
  const auto rows = static_cast<std::int64_t>(xent.size());
  const std::int64_t chunks = padded_loss_chunks(rows);
  std::vector<double> scratch(padded_loss_scratch_bytes(rows) / sizeof(double), -123.0);
  double* partial = scratch.data();
  double* sums = partial + 2 * chunks;
  Outputs out;
  run(PaddedLossPartials{xent.data(), w.data(), rows, constant, partial}, seed);
  run(PaddedLossFinish{partial, chunks, &out.loss, nullptr}, seed);

  std::fill(scratch.begin(), scratch.end(), -456.0);
  out.row_scale.assign(xent.size(), 77.0F);
  out.dw.assign(xent.size(), 88.0F);
  run(PaddedLossPartials{xent.data(), w.data(), rows, constant, partial}, seed);
  run(PaddedLossFinish{partial, chunks, nullptr, sums}, seed);
  run(PaddedLossBackward{xent.data(), w.data(), rows, constant, sums, &upstream,
                         out.row_scale.data(), &out.x_scale, with_dw ? out.dw.data() : nullptr},
      seed);
  return out;
}

// The f64 sums are taken in another order than the CPU's row order: the f32
// results agree to 1e-6 relative (in practice to the last bit or one ulp);
// dw within 1e-6 of its terms' magnitude |g| (2 |w t| + |L|) / |W|.
TEST(KernelPaddedLoss, ForwardAndBackwardMatchCpu) {
  for (const std::int64_t rows : kRowCounts) {
    for (const Weights weights : {Weights::random, Weights::with_zeros, Weights::all_zero}) {
      for (const bool with_dw : {true, false}) {
        SCOPED_TRACE(::testing::Message() << "rows " << rows << " weights "
                                          << static_cast<int>(weights) << " dw " << with_dw);
        const std::vector<float> xent = uniform(rows, 0.0F, 9.0F, 3);
        std::vector<float> w = uniform(rows, 0.0F, 2.0F, 4);
        for (std::size_t i = 0; i < w.size(); ++i) {
          if (weights == Weights::all_zero || (weights == Weights::with_zeros && i % 3 != 0)) {
            w[i] = 0.0F;
          }
        }
        const double constant = 0.3;
        const float upstream = 0.7F;
        float want_loss = -1.0F;
        cpu().padded_loss(xent.data(), w.data(), rows, constant, &want_loss);
        std::vector<float> want_row_scale(xent.size(), 5.0F), want_dw(xent.size(), 88.0F);
        float want_x_scale = -1.0F;
        cpu().padded_loss_backward(xent.data(), w.data(), rows, constant, &upstream,
                                   want_row_scale.data(), &want_x_scale,
                                   with_dw ? want_dw.data() : nullptr);

        double sum_w = 0.0, numerator = 0.0;
        for (std::size_t i = 0; i < w.size(); ++i) {
          sum_w += w[i];
          numerator += (double{xent[i]} - constant) * w[i] * w[i];
        }
        const double l = sum_w == 0.0 ? 0.0 : numerator / sum_w;

        const Outputs a = run_sequences(xent, w, constant, upstream, with_dw, kSeeds[0]);
        EXPECT_TRUE(close({a.loss}, {want_loss}, 0.0F, 1e-6F));
        EXPECT_TRUE(close({a.x_scale}, {want_x_scale}, 0.0F, 1e-6F));
        EXPECT_TRUE(bit_equal(a.row_scale, want_row_scale));
        if (with_dw) {
          for (std::size_t i = 0; i < w.size(); ++i) {
            const double magnitude =
                sum_w == 0.0
                    ? 0.0
                    : upstream *
                          (2.0 * std::fabs(w[i] * (double{xent[i]} - constant)) + std::fabs(l)) /
                          std::fabs(sum_w);
            ASSERT_NEAR(a.dw[i], want_dw[i], 1e-6 * magnitude + 1e-30) << "row " << i;
          }
        } else {
          EXPECT_EQ(a.dw, std::vector<float>(xent.size(), 88.0F));
        }
        if (weights == Weights::all_zero) {
          EXPECT_EQ(a.loss, 0.0F);
          EXPECT_EQ(a.x_scale, 0.0F);
        }
        // Another schedule: the same bits.
        const Outputs b = run_sequences(xent, w, constant, upstream, with_dw, kSeeds[1]);
        EXPECT_EQ(math::float_bits(b.loss), math::float_bits(a.loss));
        EXPECT_EQ(math::float_bits(b.x_scale), math::float_bits(a.x_scale));
        EXPECT_TRUE(bit_equal(b.dw, a.dw));
      }
    }
  }
}

// Non-finite cross-entropies propagate as on the CPU.
TEST(KernelPaddedLoss, NonFiniteRows) {
  for (const float bad : {INFINITY, NAN}) {
    std::vector<float> xent = uniform(50, 0.0F, 5.0F, 8);
    const std::vector<float> w = uniform(50, 0.5F, 1.0F, 9);
    xent[17] = bad;
    float want = 0.0F;
    cpu().padded_loss(xent.data(), w.data(), 50, 0.0, &want);
    const Outputs got = run_sequences(xent, w, 0.0, 1.0F, true, kSeeds[0]);
    EXPECT_TRUE(close({got.loss}, {want}, 0.0F, 0.0F));
    std::vector<float> want_row_scale(50), want_dw(50);
    float want_x_scale = 0.0F;
    const float upstream = 1.0F;
    cpu().padded_loss_backward(xent.data(), w.data(), 50, 0.0, &upstream, want_row_scale.data(),
                               &want_x_scale, want_dw.data());
    EXPECT_TRUE(close(got.dw, want_dw, 1e-6F, 1e-5F));
  }
}

}  // namespace
}  // namespace rig::kernels::test
