#include "cuda/kernels/selection.hpp"

#include <gtest/gtest.h>

#include <cstring>

#include "backend/kernel_args.hpp"
#include "kernel_test_util.hpp"

namespace rig::kernels::test {
namespace {

// n values of `type` with many ties (few distinct values) and, for f32,
// NaNs, infinities and both zeros.
std::vector<std::uint8_t> values(DType type, std::int64_t n, std::uint32_t seed) {
  std::mt19937 gen(seed);
  std::vector<std::uint8_t> out(static_cast<std::size_t>(n) * dtype_size(type));
  for (std::int64_t i = 0; i < n; ++i) {
    const int v = static_cast<int>(gen() % 41) - 20;
    switch (type) {
      case DType::f32: {
        float f = static_cast<float>(v) * 0.5F;
        const std::uint32_t r = gen() % 50;
        if (r == 0) f = NAN;
        if (r == 1) f = INFINITY;
        if (r == 2) f = -INFINITY;
        if (r == 3) f = -0.0F;
        if (r == 4) f = 0.0F;
        std::memcpy(out.data() + 4 * i, &f, 4);
        break;
      }
      case DType::i32: {
        const std::int32_t x = v * 100000000;
        std::memcpy(out.data() + 4 * i, &x, 4);
        break;
      }
      case DType::i64: {
        const std::int64_t x = static_cast<std::int64_t>(v) << 40;
        std::memcpy(out.data() + 8 * i, &x, 8);
        break;
      }
      default:
        out[static_cast<std::size_t>(i)] = static_cast<std::uint8_t>(v * 12);
        break;
    }
  }
  return out;
}

constexpr DType kTypes[] = {DType::f32, DType::i32, DType::i64, DType::u8};

TEST(KernelSelection, ArgmaxBitEqualToCpu) {
  struct Dims {
    std::int64_t outer, n, inner;
  };
  const Dims dims[] = {{1, 1, 1}, {3, 1000, 1}, {5, 33, 1}, {2, 40, 7}, {1, 3, 100}};
  for (const Dims d : dims) {
    for (const DType t : kTypes) {
      SCOPED_TRACE(::testing::Message()
                   << d.outer << "x" << d.n << "x" << d.inner << " " << dtype_name(t));
      const std::vector<std::uint8_t> x = values(t, d.outer * d.n * d.inner, 7);
      const auto n_out = static_cast<std::size_t>(d.outer * d.inner);
      std::vector<std::int64_t> want(n_out, -3);
      cpu().argmax(backend::ConstBuffer{x.data(), t, Shape{d.outer, d.n, d.inner}}, d.outer, d.n,
                   d.inner, want.data());
      for (const std::uint64_t emu_seed : kSeeds) {
        std::vector<std::int64_t> got(n_out, -3);
        run(Argmax{x.data(), t, d.outer, d.n, d.inner, got.data()}, emu_seed);
        EXPECT_TRUE(bit_equal(got, want));
      }
    }
  }
}

TEST(KernelSelection, TopkBitEqualToCpu) {
  struct Dims {
    std::int64_t rows, n, k;
  };
  const Dims dims[] = {{1, 1, 1}, {3, 7, 7}, {2, 100, 5}, {1, 300, 64}, {4, 33, 1}};
  for (const Dims d : dims) {
    for (const DType t : kTypes) {
      SCOPED_TRACE(::testing::Message()
                   << d.rows << "x" << d.n << " k " << d.k << " " << dtype_name(t));
      const std::vector<std::uint8_t> x = values(t, d.rows * d.n, 9);
      const auto out = static_cast<std::size_t>(d.rows * d.k);
      std::vector<std::uint8_t> want_v(out * dtype_size(t), 1);
      std::vector<std::int64_t> want_i(out, -3);
      cpu().topk(backend::ConstBuffer{x.data(), t, Shape{d.rows, d.n}}, d.rows, d.n, d.k,
                 want_v.data(), want_i.data());
      for (const std::uint64_t emu_seed : kSeeds) {
        std::vector<std::uint8_t> got_v(want_v.size(), 2);
        std::vector<std::int64_t> got_i(out, -4);
        run(TopK{x.data(), t, d.rows, d.n, d.k, got_v.data(), got_i.data()}, emu_seed);
        EXPECT_TRUE(bit_equal(got_v, want_v));
        EXPECT_TRUE(bit_equal(got_i, want_i));
      }
    }
  }
}

TEST(KernelSelection, TopkPlanRejectsWhatItCannotDo) {
  EXPECT_THROW((TopK{.rows = 2, .n = 100, .k = kTopKMaxK + 1}.plan(h100())), std::invalid_argument);
  EXPECT_THROW((TopK{.rows = 2, .n = 3, .k = 4}.plan(h100())), std::invalid_argument);
  EXPECT_EQ((TopK{.rows = 2, .n = 3, .k = 0}.plan(h100()).grid.x), 0U);
  EXPECT_EQ((TopK{.rows = 5, .n = 1000, .k = 64}.plan(h100()).grid.x), 5U);
}

}  // namespace
}  // namespace rig::kernels::test
