#include "cuda/kernels/softmax.hpp"

#include <gtest/gtest.h>

#include "backend/strided_plan.hpp"
#include "kernel_test_util.hpp"

namespace rig::kernels::test {
namespace {

// About a third masked out, and the last row (of several) wholly masked.
std::vector<std::uint8_t> random_mask(std::int64_t rows, std::int64_t cols, std::uint32_t seed) {
  std::mt19937 gen(seed);
  std::vector<std::uint8_t> mask(static_cast<std::size_t>(rows * cols));
  for (auto& m : mask) m = gen() % 3 != 0 ? 1 : 0;
  if (rows > 1) {
    for (std::int64_t j = 0; j < cols; ++j)
      mask[static_cast<std::size_t>((rows - 1) * cols + j)] = 0;
  }
  return mask;
}

// Forward: exp and the sums' order differ from the CPU's SIMD code (a few ulp).
constexpr float kProbAbs = 1e-7F, kProbRel = 2e-5F;
constexpr float kLogAbs = 2e-5F, kLogRel = 2e-6F;

// The shared column counts, and rows just past kSoftmaxWarpCols and longer,
// which take a block each instead of a warp.
constexpr std::int64_t kSoftmaxCols[] = {1, 7, 31, 33, 257, 1000, 1024, 1025, 3000};

TEST(KernelSoftmax, ForwardAndBackwardMatchCpu) {
  for (const std::int64_t rows : kRows) {
    for (const std::int64_t cols : kSoftmaxCols) {
      for (const bool log : {false, true}) {
        for (const bool masked : {false, true}) {
          SCOPED_TRACE(::testing::Message()
                       << rows << "x" << cols << " log " << log << " masked " << masked);
          const auto n = static_cast<std::size_t>(rows * cols);
          const auto seed = static_cast<std::uint32_t>(rows * 1009 + cols);
          const std::vector<float> x = uniform(rows * cols, -8.0F, 8.0F, seed);
          const std::vector<float> g = uniform(rows * cols, -1.0F, 1.0F, seed + 1);
          const std::vector<std::uint8_t> mask = random_mask(rows, cols, seed + 2);
          const std::uint8_t* mp = masked ? mask.data() : nullptr;

          std::vector<float> want_y(n), want_dx(n);
          cpu().softmax_forward(row_plan(rows, cols), x.data(), mp, want_y.data(), log);
          cpu().softmax_backward(want_y.data(), g.data(), want_dx.data(), rows, cols, log);

          std::vector<float> first_y, first_dx;
          for (const std::uint64_t emu_seed : kSeeds) {
            std::vector<float> y(n, 123.0F), dx(n, 123.0F);
            run(SoftmaxForward{x.data(), mp, y.data(), rows, cols, log}, emu_seed);
            // Backward from the CPU's y, so both backward passes see the same input.
            run(SoftmaxBackward{want_y.data(), g.data(), dx.data(), rows, cols, log}, emu_seed);
            EXPECT_TRUE(close(y, want_y, log ? kLogAbs : kProbAbs, log ? kLogRel : kProbRel));
            EXPECT_TRUE(close(dx, want_dx, 1e-6F, 1e-5F));
            if (first_y.empty()) {
              first_y = y;
              first_dx = dx;
            } else {  // the reductions' order is fixed: every schedule gives the same bits
              EXPECT_TRUE(bit_equal(y, first_y));
              EXPECT_TRUE(bit_equal(dx, first_dx));
            }
          }
        }
      }
    }
  }
}

TEST(KernelSoftmax, MaskedRowIsZeroOrMinusInfinity) {
  const std::int64_t rows = 2, cols = 40;
  const std::vector<float> x = uniform(rows * cols, -1.0F, 1.0F, 7);
  std::vector<std::uint8_t> mask(static_cast<std::size_t>(rows * cols), 1);
  for (std::int64_t j = 0; j < cols; ++j) mask[static_cast<std::size_t>(cols + j)] = 0;
  for (const bool log : {false, true}) {
    std::vector<float> y(static_cast<std::size_t>(rows * cols), 5.0F);
    run(SoftmaxForward{x.data(), mask.data(), y.data(), rows, cols, log});
    for (std::int64_t j = 0; j < cols; ++j) {
      EXPECT_EQ(y[static_cast<std::size_t>(cols + j)], log ? -INFINITY : 0.0F);
    }
  }
}

TEST(KernelSoftmax, PlanIsAWarpPerShortRowAndABlockPerLongRow) {
  // 37 rows of 1000: a warp each, 8 to a block of 256 threads.
  const simt::LaunchShape warps = SoftmaxForward{.rows = 37, .cols = 1000}.plan(h100());
  EXPECT_EQ(warps.grid.x, 5U);
  EXPECT_EQ(warps.block.x, 256U);
  EXPECT_EQ((SoftmaxBackward{.rows = 37, .cols = 33}.plan(h100()).grid.x), 5U);
  // Longer rows: a block each, as many threads as cover the row up to 256.
  const simt::LaunchShape blocks = SoftmaxForward{.rows = 37, .cols = 2000}.plan(h100());
  EXPECT_EQ(blocks.grid.x, 37U);
  EXPECT_EQ(blocks.block.x, 256U);
  EXPECT_EQ((SoftmaxForward{.rows = 0, .cols = 33}.plan(h100()).grid.x), 0U);
}

// Rows split over grid.y (plan_rows does so above max_grid_x): row = x + y *
// grid.x (times the block's warps for rows of a warp each), and the warps or
// blocks past the last row return.
TEST(KernelSoftmax, RowsOverGridY) {
  for (const std::int64_t cols : {std::int64_t{50}, std::int64_t{1500}}) {
    SCOPED_TRACE(cols);
    const std::int64_t rows = cols == 50 ? 7 : 3;  // 2 warps a block of 64: 8 rows
    const std::vector<float> x = uniform(rows * cols, -3.0F, 3.0F, 11);
    std::vector<float> want(x.size()), y(x.size(), 9.0F);
    cpu().softmax_forward(row_plan(rows, cols), x.data(), nullptr, want.data(), false);
    simt::emulate(simt::LaunchShape{{2, 2, 1}, {64, 1, 1}, 0},
                  SoftmaxForward{x.data(), nullptr, y.data(), rows, cols, false});
    EXPECT_TRUE(close(y, want, kProbAbs, kProbRel));
  }
}

}  // namespace
}  // namespace rig::kernels::test
