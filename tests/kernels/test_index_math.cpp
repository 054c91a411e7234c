// The kernels' index arithmetic (cuda/kernels/common.hpp): the 32-bit and
// division-free paths of strided_offsets and div_mod give the 64-bit answers.
#include <gtest/gtest.h>

#include <cstdint>
#include <random>

#include "cuda/kernels/common.hpp"

namespace rig::kernels::test {
namespace {

// The 64-bit reference: every axis divided in 64 bits.
template <int N, int D>
void reference_offsets(std::int64_t linear, int ndim, const std::int64_t (&shape)[D],
                       const std::int64_t (&strides)[N][D], std::int64_t (&off)[N]) {
  for (int k = 0; k < N; ++k) off[k] = 0;
  for (int d = ndim - 1; d >= 0; --d) {
    const std::int64_t c = linear % shape[d];
    linear /= shape[d];
    for (int k = 0; k < N; ++k) off[k] += c * strides[k][d];
  }
}

TEST(KernelIndexMath, StridedOffsetsMatchSixtyFourBitDivision) {
  std::mt19937_64 gen(5);
  // Shapes with positions below and above 2^32, and an axis longer than 2^32.
  const std::int64_t shapes[][3] = {{7, 5, 3},         {1, 1, 1},          {3, 1, 100000},
                                    {70000, 70000, 3}, {2, 5000000000, 3}, {5000000000, 1, 2}};
  for (const auto& s : shapes) {
    for (const int ndim : {1, 2, 3}) {
      std::int64_t shape[kMaxDims] = {};
      std::int64_t strides[2][kMaxDims] = {};
      std::int64_t n = 1;
      for (int d = 0; d < ndim; ++d) {
        shape[d] = s[d];
        n *= s[d];
        strides[0][d] = static_cast<std::int64_t>(gen() % 1000) - 500;
        strides[1][d] = static_cast<std::int64_t>(gen() % 7);
      }
      for (int trial = 0; trial < 2000; ++trial) {
        const std::int64_t linear =
            trial < 4 ? std::min<std::int64_t>(trial, n - 1)
                      : static_cast<std::int64_t>(gen() % static_cast<std::uint64_t>(n));
        std::int64_t got[2], want[2];
        strided_offsets(linear, ndim, shape, strides, got);
        reference_offsets(linear, ndim, shape, strides, want);
        ASSERT_EQ(got[0], want[0])
            << "position " << linear << " of " << n << ", " << ndim << " axes";
        ASSERT_EQ(got[1], want[1])
            << "position " << linear << " of " << n << ", " << ndim << " axes";
      }
    }
  }
}

TEST(KernelIndexMath, DivModMatchesSixtyFourBitDivision) {
  std::mt19937_64 gen(6);
  const std::int64_t limits[] = {100, std::int64_t{1} << 32, std::int64_t{1} << 40};
  for (const std::int64_t a_limit : limits) {
    for (const std::int64_t b_limit : limits) {
      for (int trial = 0; trial < 1000; ++trial) {
        const auto a = static_cast<std::int64_t>(gen() % static_cast<std::uint64_t>(a_limit));
        const auto b = 1 + static_cast<std::int64_t>(gen() % static_cast<std::uint64_t>(b_limit));
        const QuotientRemainder qr = div_mod(a, b);
        ASSERT_EQ(qr.quotient, a / b) << a << " / " << b;
        ASSERT_EQ(qr.remainder, a % b) << a << " % " << b;
      }
    }
  }
  EXPECT_EQ(div_mod(0xFFFFFFFFLL, 0xFFFFFFFFLL).quotient, 1);
  EXPECT_EQ(div_mod(0x100000000LL, 3).remainder, 0x100000000LL % 3);
}

}  // namespace
}  // namespace rig::kernels::test
