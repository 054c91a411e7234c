#include "cuda/kernels/reduce.hpp"

#include <gtest/gtest.h>

#include "kernel_test_util.hpp"

namespace rig::kernels::test {
namespace {

// sum_all / sum_squares: the CPU sums float lanes (about 1e-7 of sum |x|
// per 2048 elements); the kernel sums in f64.
TEST(KernelReduce, SumAllAndSumSquaresMatchCpu) {
  for (const std::int64_t n : {0, 1, 7, 1000, 4096, 9001}) {
    for (const bool squares : {false, true}) {
      SCOPED_TRACE(::testing::Message() << "n " << n << " squares " << squares);
      const std::vector<float> x = uniform(n, -3.0F, 5.0F, static_cast<std::uint32_t>(n + 1));
      const double divisor = n == 0 ? 1.0 : 3.0;
      float want = 0.0F;
      if (squares) {
        cpu().sum_squares(x.data(), n, divisor, &want);
      } else {
        cpu().sum_all(x.data(), n, divisor, &want);
      }
      double abs_sum = 0.0;
      for (const float v : x) abs_sum += squares ? double{v} * v : std::fabs(v);
      const std::int64_t chunks = sum_chunks(n);
      std::vector<float> first;
      for (const std::uint64_t emu_seed : kSeeds) {
        std::vector<double> partial(static_cast<std::size_t>(chunks), -1.0);
        float got = 123.0F;
        run(SumPartials{x.data(), n, squares, partial.data()}, emu_seed);
        run(SumFinish{partial.data(), chunks, divisor, &got}, emu_seed);
        EXPECT_NEAR(got, want, 1e-6 * abs_sum / divisor + 1e-30);
        if (first.empty()) {
          first.push_back(got);
        } else {
          EXPECT_TRUE(bit_equal(std::vector<float>{got}, first));
        }
      }
    }
  }
}

// The result does not depend on the launch: a grid over grid.y gives the same bits.
TEST(KernelReduce, SumPartialsIndependentOfGrid) {
  const std::int64_t n = 3 * kSumChunk + 5;
  const std::vector<float> x = uniform(n, -1.0F, 1.0F, 9);
  std::vector<double> a(4), b(4);
  run(SumPartials{x.data(), n, false, a.data()});
  simt::emulate(simt::LaunchShape{{3, 2, 1}, {kBlockThreads, 1, 1}, 0},
                SumPartials{x.data(), n, false, b.data()}, simt::EmulatorOptions{.seed = 3});
  EXPECT_TRUE(bit_equal(a, b));
}

struct Dims {
  std::int64_t outer, r, inner;
};
constexpr Dims kDims[] = {{1, 1, 1},    {3, 7, 1}, {2, 300, 1}, {4, 33, 5},
                          {1, 100, 37}, {3, 1, 9}, {2, 0, 3},   {5, 0, 1}};

TEST(KernelReduce, SumAxisMatchesCpu) {
  for (const Dims d : kDims) {
    for (const float scale : {1.0F, 0.25F}) {
      SCOPED_TRACE(::testing::Message()
                   << d.outer << "x" << d.r << "x" << d.inner << " scale " << scale);
      const std::vector<float> x = uniform(d.outer * d.r * d.inner, -2.0F, 2.0F, 4);
      const auto n = static_cast<std::size_t>(d.outer * d.inner);
      std::vector<float> want(n, 7.0F);
      cpu().sum_axis(x.data(), want.data(), d.outer, d.r, d.inner, scale);
      for (const std::uint64_t emu_seed : kSeeds) {
        std::vector<float> y(n, 7.0F);
        run(SumAxis{x.data(), y.data(), d.outer, d.r, d.inner, scale}, emu_seed);
        if (d.inner > 1) {  // the CPU's order
          EXPECT_TRUE(bit_equal(y, want));
        } else {  // SIMD lanes against a block's tree
          EXPECT_TRUE(close(y, want, 1e-5F, 1e-5F));
        }
      }
    }
  }
}

TEST(KernelReduce, MaxAxisAndBackwardBitEqualToCpu) {
  for (const Dims d : kDims) {
    if (d.r == 0) continue;
    SCOPED_TRACE(::testing::Message() << d.outer << "x" << d.r << "x" << d.inner);
    std::vector<float> x = uniform(d.outer * d.r * d.inner, -2.0F, 2.0F, 8);
    // Ties (a small set of values), NaNs and infinities.
    for (std::size_t i = 0; i < x.size(); ++i) {
      x[i] = std::round(x[i] * 2.0F);
      if (i % 17 == 5) x[i] = NAN;
      if (i % 23 == 3) x[i] = INFINITY;
    }
    const auto n = static_cast<std::size_t>(d.outer * d.inner);
    std::vector<float> want(n), y(n, 7.0F);
    std::vector<std::int64_t> want_index(n), index(n, -5);
    cpu().max_axis(x.data(), want.data(), want_index.data(), d.outer, d.r, d.inner);
    run(MaxAxis{x.data(), y.data(), index.data(), d.outer, d.r, d.inner});
    EXPECT_TRUE(bit_equal(y, want));
    EXPECT_TRUE(bit_equal(index, want_index));

    const std::vector<float> g = uniform(d.outer * d.inner, -1.0F, 1.0F, 10);
    std::vector<float> want_dx(x.size(), 3.0F), dx(x.size(), 3.0F);
    cpu().max_axis_backward(g.data(), want_index.data(), want_dx.data(), d.outer, d.r, d.inner);
    run(MaxAxisBackward{g.data(), want_index.data(), dx.data(), d.outer, d.r, d.inner});
    EXPECT_TRUE(bit_equal(dx, want_dx));
  }
}

}  // namespace
}  // namespace rig::kernels::test
