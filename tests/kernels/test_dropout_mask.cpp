#include "cuda/kernels/dropout_mask.hpp"

#include <gtest/gtest.h>

#include "kernel_test_util.hpp"
#include "rig/random.hpp"

namespace rig::kernels::test {
namespace {

DropoutMask mask_kernel(const RandomKey& key, float p, std::uint8_t* mask, std::int64_t n,
                        std::uint64_t first) {
  return DropoutMask{math::PhiloxStream::of(key.seed, key.step, key.rank, key.purpose),
                     math::dropout_threshold(p), mask, n, first};
}

// Every alignment of the stream (first % 4) and of the mask pointer, sizes
// around a Philox block and a warp's, p from 0 (all kept) to 1.
TEST(KernelDropoutMask, BitEqualToCpu) {
  const RandomKey key{0x1234567890ABCDEFULL, 77, 3, 0xC0FFEEU};
  for (const std::int64_t n : {1, 2, 3, 4, 5, 7, 33, 1000, 4099}) {
    for (const std::uint64_t first :
         {std::uint64_t{0}, std::uint64_t{1}, std::uint64_t{2}, std::uint64_t{3},
          std::uint64_t{1001}, (std::uint64_t{1} << 33) + 6}) {
      for (const float p : {0.0F, 0.1F, 0.5F, 1.0F}) {
        for (const std::size_t shift : {std::size_t{0}, std::size_t{1}, std::size_t{3}}) {
          SCOPED_TRACE(::testing::Message()
                       << "n " << n << " first " << first << " p " << p << " shift " << shift);
          const auto size = static_cast<std::size_t>(n);
          std::vector<std::uint8_t> want(size, 0xAB);
          cpu().dropout_mask(key, p, want.data(), n, first);
          // Guard bytes around the mask must stay untouched.
          std::vector<std::uint8_t> buffer(size + 8, 0xCD);
          run(mask_kernel(key, p, buffer.data() + shift, n, first));
          const std::vector<std::uint8_t> got(
              buffer.begin() + static_cast<std::ptrdiff_t>(shift),
              buffer.begin() + static_cast<std::ptrdiff_t>(shift + size));
          EXPECT_TRUE(bit_equal(got, want));
          for (std::size_t i = 0; i < shift; ++i) EXPECT_EQ(buffer[i], 0xCD);
          for (std::size_t i = shift + size; i < buffer.size(); ++i) EXPECT_EQ(buffer[i], 0xCD);
        }
      }
    }
  }
}

TEST(KernelDropoutMask, EmptyLaunchesNothing) {
  EXPECT_EQ(mask_kernel(RandomKey{}, 0.5F, nullptr, 0, 3).plan(h100()).grid.count(), 0U);
}

// A grid smaller than the mask: the grid-stride loop covers every block.
TEST(KernelDropoutMask, GridStrideCoversEveryBlock) {
  const RandomKey key{5, 6, 0, 9};
  const std::int64_t n = 3001;
  std::vector<std::uint8_t> want(n), got(n, 0xEE);
  cpu().dropout_mask(key, 0.3F, want.data(), n, 2);
  simt::emulate(simt::LaunchShape{{2, 1, 1}, {64, 1, 1}, 0},
                mask_kernel(key, 0.3F, got.data(), n, 2));
  EXPECT_TRUE(bit_equal(got, want));
}

}  // namespace
}  // namespace rig::kernels::test
