#include "cuda/kernels/unscale.hpp"

#include <gtest/gtest.h>

#include "kernel_test_util.hpp"
#include "rig/dtype.hpp"
#include "rig/half.hpp"

namespace rig::kernels::test {
namespace {

constexpr std::int64_t kSizes[] = {1, 7, 33, 1000, 5000};

struct Result {
  std::vector<float> master;
  float amax = -1.0F;
  double sum_squares = -1.0;
};

// Both stages as planned for the H100 (or with the given first-stage shape).
Result unscale(std::int64_t n, ElementType type, const void* src, bool write_master, float scale,
               std::uint64_t seed, const simt::LaunchShape* shape = nullptr) {
  Result r;
  r.master.assign(static_cast<std::size_t>(n), 42.0F);
  UnscalePartials first{n,     type,    src,    write_master ? r.master.data() : nullptr,
                        scale, nullptr, nullptr};
  const simt::LaunchShape s = shape != nullptr ? *shape : first.plan(h100());
  std::vector<std::uint32_t> amax_bits(s.grid.x + 1, 0xDEADBEEFU);
  std::vector<double> sums(s.grid.x + 1, -7.0);
  first.partial_amax_bits = amax_bits.data();
  first.partial_sum_squares = sums.data();
  if (s.grid.x > 0) simt::emulate(s, first, simt::EmulatorOptions{.seed = seed});
  const UnscaleFinish finish{amax_bits.data(), sums.data(), s.grid.x, &r.amax, &r.sum_squares};
  simt::emulate(finish.plan(h100()), finish, simt::EmulatorOptions{.seed = seed});
  return r;
}

struct Source {
  ElementType type;
  DType dtype;
};

TEST(KernelUnscale, MatchesCpu) {
  for (const std::int64_t n : kSizes) {
    for (const Source src :
         {Source{ElementType::f32, DType::f32}, Source{ElementType::f16, DType::f16},
          Source{ElementType::bf16, DType::bf16}}) {
      for (const int special : {0, 1, 2}) {  // none, an inf, a NaN
        SCOPED_TRACE(::testing::Message() << "n " << n << " type " << static_cast<int>(src.type)
                                          << " special " << special);
        std::vector<float> values = uniform(n, -100.0F, 100.0F, static_cast<std::uint32_t>(n));
        if (special != 0) values[static_cast<std::size_t>(n / 2)] = special == 1 ? -INFINITY : NAN;
        std::vector<std::uint16_t> narrow(values.size());
        for (std::size_t i = 0; i < values.size(); ++i) {
          narrow[i] = src.type == ElementType::f16 ? float_to_half_bits(values[i])
                                                   : float_to_bfloat16_bits(values[i]);
        }
        const void* data = src.type == ElementType::f32 ? static_cast<const void*>(values.data())
                                                        : static_cast<const void*>(narrow.data());
        const float scale = 1.0F / 1024.0F;
        std::vector<float> want(values.size());
        float want_amax = -1.0F;
        cpu().unscale(n, src.dtype, data, want.data(), scale, &want_amax);
        long double squares = 0.0L;
        for (const float g : want) squares += static_cast<long double>(g) * g;

        const Result a = unscale(n, src.type, data, true, scale, kSeeds[0]);
        EXPECT_TRUE(bit_equal(a.master, want));
        EXPECT_EQ(math::float_bits(a.amax), math::float_bits(want_amax));
        if (special == 0) {
          EXPECT_NEAR(a.sum_squares, static_cast<double>(squares),
                      1e-12 * static_cast<double>(squares));
        } else {
          EXPECT_FALSE(std::isfinite(a.sum_squares));
        }
        // Another schedule, and no master: the same bits.
        const Result b = unscale(n, src.type, data, false, scale, kSeeds[1]);
        EXPECT_EQ(math::float_bits(b.amax), math::float_bits(a.amax));
        EXPECT_EQ(std::memcmp(&b.sum_squares, &a.sum_squares, sizeof(double)), 0);
        EXPECT_EQ(b.master, std::vector<float>(values.size(), 42.0F));
      }
    }
  }
}

TEST(KernelUnscale, InPlaceAndManyPartials) {
  const std::int64_t n = 5000;
  std::vector<float> values = uniform(n, -3.0F, 3.0F, 3);
  std::vector<float> want(values.size());
  float want_amax = 0.0F;
  cpu().unscale(n, DType::f32, values.data(), want.data(), 0.5F, &want_amax);
  // Seven blocks of 64 threads: a grid-stride loop and seven partials.
  const simt::LaunchShape shape{{7, 1, 1}, {64, 1, 1}, 0};
  std::vector<std::uint32_t> bits(7);
  std::vector<double> sums(7);
  float amax = -1.0F;
  double sum = 0.0;
  simt::emulate(shape, UnscalePartials{n, ElementType::f32, values.data(), values.data(), 0.5F,
                                       bits.data(), sums.data()});
  simt::emulate(UnscaleFinish{}.plan(h100()),
                UnscaleFinish{bits.data(), sums.data(), 7, &amax, &sum});
  EXPECT_TRUE(bit_equal(values, want));
  EXPECT_EQ(amax, want_amax);
  long double squares = 0.0L;
  for (const float g : want) squares += static_cast<long double>(g) * g;
  EXPECT_NEAR(sum, static_cast<double>(squares), 1e-12 * static_cast<double>(squares));
}

// Without partials (no statistic wanted: a data-parallel bucket) the masters
// are written as with them, and the blocks reduce nothing.
TEST(KernelUnscale, MastersAloneWithoutPartials) {
  const std::int64_t n = 5000;
  std::vector<std::uint16_t> narrow;
  for (const float v : uniform(n, -100.0F, 100.0F, 9)) narrow.push_back(float_to_bfloat16_bits(v));
  const Result with = unscale(n, ElementType::bf16, narrow.data(), true, 0.125F, kSeeds[0]);
  std::vector<float> master(static_cast<std::size_t>(n), 42.0F);
  run(UnscalePartials{n, ElementType::bf16, narrow.data(), master.data(), 0.125F, nullptr,
                      nullptr});
  EXPECT_TRUE(bit_equal(master, with.master));
}

TEST(KernelUnscale, EmptyGivesZero) {
  float amax = -1.0F;
  double sum = -1.0;
  EXPECT_EQ((UnscalePartials{.n = 0}.plan(h100()).grid.x), 0U);
  simt::emulate(UnscaleFinish{}.plan(h100()), UnscaleFinish{nullptr, nullptr, 0, &amax, &sum});
  EXPECT_EQ(amax, 0.0F);
  EXPECT_EQ(sum, 0.0);
}

}  // namespace
}  // namespace rig::kernels::test
