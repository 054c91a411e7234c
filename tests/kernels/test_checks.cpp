#include "cuda/kernels/checks.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>

#include "kernel_test_util.hpp"
#include "rig/dtype.hpp"
#include "rig/half.hpp"

namespace rig::kernels::test {
namespace {

// ---- first_out_of_range ------------------------------------------------------------

std::int64_t first_out_of_range(const void* index, DType dtype, std::int64_t n, std::int64_t limit,
                                std::uint64_t seed) {
  const std::int64_t chunks = check_chunks(n);
  std::vector<std::int64_t> scratch(index_check_scratch_bytes(n) / sizeof(std::int64_t), -77);
  std::int64_t* partial = scratch.data();
  std::int64_t* result = partial + chunks;
  run(IndexCheckPartials{index, dtype, n, limit, partial}, seed);
  run(IndexCheckFinish{partial, chunks, result}, seed);
  return *result;
}

TEST(KernelChecks, FirstOutOfRangeEqualsCpu) {
  const std::int64_t limit = 1000;
  for (const std::int64_t n : {0, 1, 100, 4096, 9001}) {
    // Bad positions: none; the first; the last; several, the first in a later
    // chunk than the block holding the larger ones; negative and == limit.
    const std::vector<std::vector<std::int64_t>> bad_sets = {
        {}, {0}, {n - 1}, {8000, 4500, 6000}, {n / 2, n - 1}, {4097}};
    for (const auto& bad : bad_sets) {
      for (const DType dtype : {DType::i32, DType::i64}) {
        for (const bool negative : {false, true}) {
          SCOPED_TRACE(::testing::Message()
                       << "n " << n << " dtype " << dtype_name(dtype) << " negative " << negative
                       << " bad " << (bad.empty() ? -1 : bad[0]));
          std::vector<std::int64_t> v64(static_cast<std::size_t>(n));
          std::mt19937 gen(static_cast<std::uint32_t>(n));
          for (auto& x : v64) x = static_cast<std::int64_t>(gen() % limit);
          for (const std::int64_t b : bad) {
            if (b >= 0 && b < n) v64[static_cast<std::size_t>(b)] = negative ? -1 : limit;
          }
          std::vector<std::int32_t> v32(v64.begin(), v64.end());
          const void* data = dtype == DType::i32 ? static_cast<const void*>(v32.data())
                                                 : static_cast<const void*>(v64.data());
          const std::int64_t want = cpu().first_out_of_range(data, dtype, n, limit);
          for (const std::uint64_t seed : kSeeds) {
            EXPECT_EQ(first_out_of_range(data, dtype, n, limit, seed), want);
          }
        }
      }
    }
  }
}

TEST(KernelChecks, FirstOutOfRangeWideValues) {
  // i64 values beyond i32, a limit of 0 (everything out of range).
  const std::vector<std::int64_t> v = {5, std::int64_t{1} << 40, 3, -(std::int64_t{1} << 40)};
  EXPECT_EQ(first_out_of_range(v.data(), DType::i64, 4, 10, kSeeds[0]), 1);
  EXPECT_EQ(first_out_of_range(v.data(), DType::i64, 4, 0, kSeeds[0]), 0);
  EXPECT_EQ(first_out_of_range(v.data(), DType::i64, 4, std::int64_t{1} << 41, kSeeds[0]), 3);
}

// ---- gradient_stats --------------------------------------------------------------------

GradientStats gradient_stats(const std::vector<float>& g, const float* loss, std::uint64_t seed) {
  const auto n = static_cast<std::int64_t>(g.size());
  const std::int64_t chunks = check_chunks(n);
  std::vector<double> storage(grad_stats_scratch_bytes(n) / sizeof(double) + 1, -5.0);
  auto* squares = storage.data();
  auto* bits = reinterpret_cast<std::uint32_t*>(squares + chunks);
  GradientStats out{-1.0, -1.0, false};
  run(GradStatsPartials{g.data(), n, squares, bits}, seed);
  run(GradStatsFinish{squares, bits, chunks, loss, &out}, seed);
  return out;
}

enum class Special { none, inf, nan, huge, tiny };

// The norm: f64 sums of f32 squares against the CPU's f32 runs of 1024
// (1e-5 relative); amax and loss_finite exactly.
TEST(KernelChecks, GradientStatsMatchCpu) {
  for (const std::int64_t n : {0, 1, 33, 1000, 4096, 20000}) {
    for (const Special special :
         {Special::none, Special::inf, Special::nan, Special::huge, Special::tiny}) {
      if (n == 0 && special != Special::none) continue;
      SCOPED_TRACE(::testing::Message() << "n " << n << " special " << static_cast<int>(special));
      std::vector<float> g = uniform(n, -2.0F, 2.0F, static_cast<std::uint32_t>(n + 3));
      const auto at = static_cast<std::size_t>(n * 2 / 3);
      switch (special) {
        case Special::inf:
          g[at] = -INFINITY;
          break;
        case Special::nan:
          g[at] = NAN;
          break;
        case Special::huge:  // its square overflows f32: both back ends give inf
          g[at] = 3e19F;
          break;
        case Special::tiny:  // squares underflow
          for (float& x : g) x *= 1e-25F;
          break;
        case Special::none:
          break;
      }
      for (const float loss : {1.5F, INFINITY, NAN}) {
        const GradientStats want = cpu().gradient_stats(g.data(), n, &loss);
        const GradientStats got = gradient_stats(g, &loss, kSeeds[0]);
        EXPECT_EQ(got.loss_finite, want.loss_finite);
        EXPECT_EQ(got.amax, want.amax);
        if (std::isfinite(want.norm)) {
          EXPECT_NEAR(got.norm, want.norm, 1e-5 * want.norm);
        } else {
          EXPECT_EQ(got.norm, want.norm);
        }
        const GradientStats again = gradient_stats(g, &loss, kSeeds[1]);
        EXPECT_EQ(std::memcmp(&again.norm, &got.norm, sizeof(double)), 0);
        EXPECT_EQ(again.amax, got.amax);
      }
      const GradientStats no_loss = gradient_stats(g, nullptr, kSeeds[0]);
      EXPECT_TRUE(no_loss.loss_finite);
      EXPECT_EQ(no_loss.amax, cpu().gradient_stats(g.data(), n, nullptr).amax);
    }
  }
}

}  // namespace
// The model's 16-bit gradients read times a scale have the statistics, bit
// for bit, of the f32 masters unscaling writes from them: in the kernels
// (packed and, one element off an aligned start, element by element) and on
// the CPU; an inf among them is an overflow either way.
TEST(KernelChecks, GradientStatsOf16BitGradientsAreThoseOfTheirF32Masters) {
  for (const DType dtype : {DType::bf16, DType::f16}) {
    for (const std::int64_t n : {1, 1000, 20000}) {
      for (const bool overflow : {false, true}) {
        SCOPED_TRACE(::testing::Message()
                     << dtype_name(dtype) << " n " << n << " overflow " << overflow);
        const float scale = 1.0F / 3000.0F;
        std::vector<std::uint16_t> g16(static_cast<std::size_t>(n + 1));
        std::vector<float> master(static_cast<std::size_t>(n));
        const std::vector<float> g = uniform(n + 1, -2.0F, 2.0F, static_cast<std::uint32_t>(n));
        for (std::int64_t i = 0; i <= n; ++i) {
          const float x = overflow && i == n / 2 + 1 ? INFINITY : g[i] * 1024.0F;
          g16[i] = dtype == DType::f16 ? float_to_half_bits(x) : float_to_bfloat16_bits(x);
        }
        for (const std::int64_t shift : {0, 1}) {
          for (std::int64_t i = 0; i < n; ++i) {
            const std::uint16_t b = g16[i + shift];
            master[i] =
                (dtype == DType::f16 ? half_bits_to_float(b) : bfloat16_bits_to_float(b)) * scale;
          }
          const GradientStats want = gradient_stats(master, nullptr, kSeeds[0]);
          const std::int64_t chunks = check_chunks(n);
          std::vector<double> storage(grad_stats_scratch_bytes(n) / sizeof(double) + 1, -5.0);
          auto* bits = reinterpret_cast<std::uint32_t*>(storage.data() + chunks);
          GradientStats got{-1.0, -1.0, false};
          const GradStatsPartials partials{
              g16.data() + shift,
              n,
              storage.data(),
              bits,
              dtype == DType::f16 ? ElementType::f16 : ElementType::bf16,
              scale};
          EXPECT_EQ(partials.packed(), shift == 0);
          run(partials);
          run(GradStatsFinish{storage.data(), bits, chunks, nullptr, &got});
          EXPECT_EQ(std::memcmp(&got.norm, &want.norm, sizeof(double)), 0) << got.norm;
          EXPECT_EQ(got.amax, want.amax);
          // The inf lies in the masters of both shifts but n 1's unshifted one.
          EXPECT_EQ(std::isinf(got.norm), overflow && (n > 1 || shift == 1));
          const GradientStats cpu_want = cpu().gradient_stats(master.data(), n, nullptr);
          const GradientStats cpu_got =
              cpu().gradient_stats(GradientSource{g16.data() + shift, dtype, scale}, n, nullptr);
          EXPECT_EQ(std::memcmp(&cpu_got.norm, &cpu_want.norm, sizeof(double)), 0);
          EXPECT_EQ(cpu_got.amax, cpu_want.amax);
        }
      }
    }
  }
}

}  // namespace rig::kernels::test
