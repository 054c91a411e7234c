#include "cuda/kernels/accumulate.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "kernel_test_util.hpp"
#include "rig/dtype.hpp"
#include "rig/half.hpp"

namespace rig::kernels::test {
namespace {

struct Case {
  Shape shape;
  Strides dst, src;
};

// Broadcast destinations (the gradients of expand), transposed and strided
// sources, size-1 axes, a single element and an empty shape.
const Case kCases[] = {
    {{1000}, {1}, {1}},                            // contiguous
    {{37, 33}, {0, 1}, {33, 1}},                   // bias gradient: sum over rows
    {{37, 33}, {1, 0}, {33, 1}},                   // sum over the inner axis (row sums)
    {{37, 33}, {0, 0}, {33, 1}},                   // everything into one element
    {{5, 7, 9}, {9, 0, 1}, {63, 9, 1}},            // middle axis broadcast
    {{5, 7, 9}, {0, 1, 0}, {1, 5, 35}},            // transposed source, two broadcast axes
    {{4, 1, 6, 3}, {18, 0, 3, 1}, {1, 0, 4, 24}},  // size-1 axis, permuted source
    {{3, 5, 2}, {0, 2, 1}, {20, 4, 1}},            // gaps in the source
    {{2, 3}, {1, 2}, {3, 1}},                      // transposed destination
    {{1, 1}, {0, 0}, {0, 0}},                      // one element
    {{0, 5}, {0, 1}, {5, 1}},                      // empty
    {{300}, {0}, {1}},                             // a long row into one element
};

std::int64_t span(const Shape& shape, const Strides& strides) {
  if (shape_numel(shape) == 0) return 0;
  std::int64_t s = 1;
  for (std::size_t d = 0; d < shape.size(); ++d) s += (shape[d] - 1) * strides[d];
  return s;
}

// n elements of a floating dtype from f32 values (rounded as the CPU does).
std::vector<std::uint8_t> encode(DType dtype, const std::vector<float>& v) {
  std::vector<std::uint8_t> out(v.size() * dtype_size(dtype));
  for (std::size_t i = 0; i < v.size(); ++i) {
    if (dtype == DType::f32) {
      std::memcpy(out.data() + 4 * i, &v[i], 4);
    } else {
      const std::uint16_t h =
          dtype == DType::f16 ? float_to_half_bits(v[i]) : float_to_bfloat16_bits(v[i]);
      std::memcpy(out.data() + 2 * i, &h, 2);
    }
  }
  return out;
}

struct Types {
  DType dst, src;
};
constexpr Types kTypes[] = {{DType::f32, DType::f32},  {DType::f16, DType::f32},
                            {DType::bf16, DType::f16}, {DType::f32, DType::bf16},
                            {DType::f16, DType::f16},  {DType::bf16, DType::bf16}};

AddStrided planned(const Case& c, void* dst, DType dst_type, const void* src, DType src_type) {
  return plan_add_strided(static_cast<int>(c.shape.size()), c.shape.data(), dst, c.dst.data(),
                          dst_type, src, c.src.data(), src_type);
}

TEST(KernelAccumulate, AddStridedBitEqualToCpu) {
  for (const Case& c : kCases) {
    for (const Types t : kTypes) {
      for (const bool specials : {false, true}) {
        SCOPED_TRACE(::testing::Message()
                     << to_string(c.shape) << " " << dtype_name(t.dst)
                     << " += " << dtype_name(t.src) << " specials " << specials);
        const std::int64_t ns = span(c.shape, c.src), nd = span(c.shape, c.dst);
        std::vector<float> s = uniform(ns, -3.0F, 3.0F, 11);
        std::vector<float> d0 = uniform(nd, -100.0F, 100.0F, 12);
        if (specials) {
          for (std::size_t i = 0; i < s.size(); ++i) {
            if (i % 29 == 3) s[i] = NAN;
            if (i % 31 == 7) s[i] = INFINITY;
            if (i % 37 == 5) s[i] = 70000.0F;  // beyond f16's range
          }
        }
        const std::vector<std::uint8_t> src = encode(t.src, s);
        std::vector<std::uint8_t> want = encode(t.dst, d0);
        std::vector<std::uint8_t> got = want;
        cpu().add_strided(c.shape, want.data(), c.dst, t.dst, src.data(), c.src, t.src);
        run(planned(c, got.data(), t.dst, src.data(), t.src));
        EXPECT_TRUE(bit_equal(got, want));
      }
    }
  }
}

// Many small values into one f16 element: the CPU rounds once per row along
// an innermost broadcast axis and after every addition otherwise; both orders
// are reproduced.
TEST(KernelAccumulate, RoundsWhereTheCpuRounds) {
  const Case cases[] = {
      {{64, 50}, {0, 0}, {50, 1}},  // innermost broadcast: one rounding per row
      {{64, 50}, {0, 0}, {1, 64}},  // transposed source: the same layout after sorting
      {{64, 50}, {1, 0}, {1, 64}},  // dst axis innermost by source order: every add rounds
      {{64, 50}, {0, 1}, {50, 1}},  // rows accumulated into 50 elements, each add rounded
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(to_string(c.shape));
    const std::vector<float> s = uniform(span(c.shape, c.src), 0.0F, 0.01F, 21);
    const std::vector<std::uint8_t> src = encode(DType::f32, s);
    std::vector<std::uint8_t> want = encode(
        DType::f16, std::vector<float>(static_cast<std::size_t>(span(c.shape, c.dst)), 1000.0F));
    std::vector<std::uint8_t> got = want;
    cpu().add_strided(c.shape, want.data(), c.dst, DType::f16, src.data(), c.src, DType::f32);
    run(planned(c, got.data(), DType::f16, src.data(), DType::f32));
    EXPECT_TRUE(bit_equal(got, want));
  }
}

TEST(KernelAccumulate, PlanOfEmptyAndNonFloating) {
  const Case c{{0, 5}, {0, 1}, {5, 1}};
  float x = 0.0F;
  EXPECT_EQ(planned(c, &x, DType::f32, &x, DType::f32).plan(h100()).grid.count(), 0U);
  EXPECT_THROW(planned(c, &x, DType::i32, &x, DType::f32), std::invalid_argument);
}

// A grid smaller than the destination: the grid-stride loop covers it.
TEST(KernelAccumulate, GridStrideCoversEveryElement) {
  const Case c{{20, 300}, {0, 1}, {300, 1}};
  const std::vector<float> s = uniform(6000, -1.0F, 1.0F, 5);
  std::vector<float> want(300, 0.5F), got(300, 0.5F);
  cpu().add_strided(c.shape, want.data(), c.dst, DType::f32, s.data(), c.src, DType::f32);
  simt::emulate(simt::LaunchShape{{2, 1, 1}, {64, 1, 1}, 0},
                planned(c, got.data(), DType::f32, s.data(), DType::f32));
  EXPECT_TRUE(bit_equal(got, want));
}

}  // namespace
}  // namespace rig::kernels::test
