// f16 / bf16 conversions (exhaustive), casts between every pair of dtypes,
// and element access for every dtype.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <limits>
#include <random>

#include "golden.hpp"
#include "rig/autograd.hpp"
#include "rig/tensor.hpp"
#include "test_tensor_util.hpp"

namespace {

using rig::DType;
using rig::Shape;
using rig::Tensor;
using namespace rig_test;

bool is_nan_half(std::uint16_t h) {
  return (h & 0x7C00U) == 0x7C00U && (h & 0x3FFU) != 0;
}
bool is_nan_bf16(std::uint16_t b) {
  return (b & 0x7F80U) == 0x7F80U && (b & 0x7FU) != 0;
}

// A straightforward integer reference for f32 -> f16, round to nearest even.
std::uint16_t reference_half(float f) {
  std::uint32_t x = std::bit_cast<std::uint32_t>(f);
  const std::uint32_t sign = (x >> 16U) & 0x8000U;
  x &= 0x7FFFFFFFU;
  if (x > 0x7F800000U) return static_cast<std::uint16_t>(sign | 0x7E00U);   // NaN
  if (x >= 0x477FF000U) return static_cast<std::uint16_t>(sign | 0x7C00U);  // >= 65520: inf
  if (x < 0x38800000U) {  // below 2^-14: a subnormal half (or zero)
    if (x < 0x33000000U) return static_cast<std::uint16_t>(sign);  // below 2^-25
    const std::uint32_t e = x >> 23U;
    const std::uint32_t m = (x & 0x7FFFFFU) | 0x800000U;
    const std::uint32_t shift = 126 - e;  // value / 2^-24 = m 2^(e - 126)
    std::uint32_t q = m >> shift;
    const std::uint32_t r = m & ((1U << shift) - 1U);
    const std::uint32_t half = 1U << (shift - 1);
    if (r > half || (r == half && (q & 1U))) ++q;
    return static_cast<std::uint16_t>(sign | q);
  }
  x -= 0x38000000U;  // re-bias the exponent: 127 - 15 = 112
  x += 0xFFFU + ((x >> 13U) & 1U);
  return static_cast<std::uint16_t>(sign | (x >> 13U));
}

std::uint16_t reference_bf16(float f) {
  const std::uint32_t x = std::bit_cast<std::uint32_t>(f);
  if ((x & 0x7FFFFFFFU) > 0x7F800000U) return static_cast<std::uint16_t>((x >> 16U) | 0x40U);
  const std::uint64_t wide = x;
  const std::uint64_t lsb = (wide >> 16U) & 1U;
  return static_cast<std::uint16_t>((wide + 0x7FFFU + lsb) >> 16U);
}

TEST(TensorDtype, HalfRoundTripsEveryBitPattern) {
  for (std::uint32_t h = 0; h <= 0xFFFFU; ++h) {
    const auto bits = static_cast<std::uint16_t>(h);
    const float f = rig::half_to_float(bits);
    if (is_nan_half(bits)) {
      ASSERT_TRUE(std::isnan(f)) << h;
      ASSERT_TRUE(is_nan_half(rig::float_to_half(f))) << h;
      continue;
    }
    ASSERT_EQ(rig::float_to_half(f), bits) << std::hex << h;
  }
}

TEST(TensorDtype, HalfWideningIsExact) {
  EXPECT_EQ(rig::half_to_float(0x3C00), 1.0F);
  EXPECT_EQ(rig::half_to_float(0xC000), -2.0F);
  EXPECT_EQ(rig::half_to_float(0x7BFF), 65504.0F);
  EXPECT_EQ(rig::half_to_float(0x0001), 0x1.0p-24F);         // smallest subnormal
  EXPECT_EQ(rig::half_to_float(0x03FF), 1023 * 0x1.0p-24F);  // largest subnormal
  EXPECT_EQ(rig::half_to_float(0x0400), 0x1.0p-14F);         // smallest normal
  EXPECT_EQ(rig::half_to_float(0x3555), 0x1.554p-2F);
  EXPECT_EQ(rig::half_to_float(0x7C00), std::numeric_limits<float>::infinity());
  EXPECT_EQ(rig::half_to_float(0xFC00), -std::numeric_limits<float>::infinity());
  EXPECT_TRUE(std::signbit(rig::half_to_float(0x8000)));
  // Every finite half is the float its fields say.
  for (std::uint32_t h = 0; h < 0x7C00U; ++h) {
    const std::uint32_t e = h >> 10U, m = h & 0x3FFU;
    const float expected =
        e == 0 ? std::ldexp(static_cast<float>(m), -24)
               : std::ldexp(1.0F + static_cast<float>(m) / 1024.0F, static_cast<int>(e) - 15);
    ASSERT_EQ(rig::half_to_float(static_cast<std::uint16_t>(h)), expected) << h;
  }
}

TEST(TensorDtype, HalfRoundsToNearestEvenAtEveryMidpoint) {
  // For every pair of adjacent non-negative finite halves, the midpoint (exact
  // in f32) goes to the even one, and the floats just around it to the nearer.
  for (std::uint32_t h = 0; h < 0x7BFFU; ++h) {
    const float lo = rig::half_to_float(static_cast<std::uint16_t>(h));
    const float hi = rig::half_to_float(static_cast<std::uint16_t>(h + 1));
    const float mid = lo + (hi - lo) / 2;
    const auto even = static_cast<std::uint16_t>(h % 2 == 0 ? h : h + 1);
    ASSERT_EQ(rig::float_to_half(mid), even) << h;
    ASSERT_EQ(rig::float_to_half(-mid), even | 0x8000U) << h;
    ASSERT_EQ(rig::float_to_half(std::nextafter(mid, 0.0F)), h) << h;
    ASSERT_EQ(rig::float_to_half(std::nextafter(mid, 1e9F)), h + 1) << h;
  }
}

TEST(TensorDtype, HalfOverflowSubnormalsAndNan) {
  const float inf = std::numeric_limits<float>::infinity();
  EXPECT_EQ(rig::float_to_half(65504.0F), 0x7BFF);
  EXPECT_EQ(rig::float_to_half(65519.996F), 0x7BFF);  // below the midpoint to "65536"
  EXPECT_EQ(rig::float_to_half(65520.0F), 0x7C00);    // the tie rounds to even: inf
  EXPECT_EQ(rig::float_to_half(1e10F), 0x7C00);
  EXPECT_EQ(rig::float_to_half(-1e10F), 0xFC00);
  EXPECT_EQ(rig::float_to_half(inf), 0x7C00);
  EXPECT_EQ(rig::float_to_half(-inf), 0xFC00);
  EXPECT_EQ(rig::float_to_half(std::numeric_limits<float>::max()), 0x7C00);
  EXPECT_EQ(rig::float_to_half(0x1.0p-25F), 0x0000);  // tie between 0 and the smallest: even
  EXPECT_EQ(rig::float_to_half(std::nextafter(0x1.0p-25F, 1.0F)), 0x0001);
  EXPECT_EQ(rig::float_to_half(3 * 0x1.0p-25F), 0x0002);  // tie between 1 and 2 ulps: even
  EXPECT_EQ(rig::float_to_half(-0x1.0p-26F), 0x8000);
  EXPECT_EQ(rig::float_to_half(std::numeric_limits<float>::denorm_min()), 0x0000);
  EXPECT_EQ(rig::float_to_half(0x1.ffcp-15F), 0x0400);  // rounds up into the normals
  EXPECT_EQ(rig::float_to_half(-0.0F), 0x8000);
  EXPECT_TRUE(is_nan_half(rig::float_to_half(std::nanf(""))));
  EXPECT_TRUE(is_nan_half(rig::float_to_half(-std::nanf("7"))));
  EXPECT_TRUE(is_nan_half(rig::float_to_half(std::bit_cast<float>(0x7F800001U))));  // tiny payload
}

TEST(TensorDtype, NarrowingMatchesTheReferenceOnManyFloats) {
  std::mt19937 rng(7);
  for (int i = 0; i < 2000000; ++i) {
    const float f = std::bit_cast<float>(static_cast<std::uint32_t>(rng()));
    const std::uint16_t h = rig::float_to_half(f), b = rig::float_to_bfloat16(f);
    if (std::isnan(f)) {
      ASSERT_TRUE(is_nan_half(h));
      ASSERT_TRUE(is_nan_bf16(b));
      continue;
    }
    ASSERT_EQ(h, reference_half(f)) << std::hexfloat << f;
    ASSERT_EQ(b, reference_bf16(f)) << std::hexfloat << f;
  }
  // Every float in the half range near 1: all 2^23 mantissas of [1, 2).
  for (std::uint32_t m = 0; m < (1U << 23U); m += 1) {
    const float f = std::bit_cast<float>(0x3F800000U | m);
    ASSERT_EQ(rig::float_to_half(f), reference_half(f)) << m;
  }
}

TEST(TensorDtype, Bfloat16RoundTripsAndRounds) {
  for (std::uint32_t b = 0; b <= 0xFFFFU; ++b) {
    const auto bits = static_cast<std::uint16_t>(b);
    const float f = rig::bfloat16_to_float(bits);
    ASSERT_EQ(std::bit_cast<std::uint32_t>(f), b << 16U);
    if (is_nan_bf16(bits)) {
      ASSERT_TRUE(is_nan_bf16(rig::float_to_bfloat16(f)));
    } else {
      ASSERT_EQ(rig::float_to_bfloat16(f), bits) << b;
    }
  }
  EXPECT_EQ(rig::float_to_bfloat16(std::bit_cast<float>(0x3F808000U)), 0x3F80);  // tie: even
  EXPECT_EQ(rig::float_to_bfloat16(std::bit_cast<float>(0x3F818000U)), 0x3F82);  // tie: even
  EXPECT_EQ(rig::float_to_bfloat16(std::bit_cast<float>(0x3F808001U)), 0x3F81);
  EXPECT_EQ(rig::float_to_bfloat16(std::numeric_limits<float>::max()), 0x7F80);  // inf
  EXPECT_EQ(rig::float_to_bfloat16(std::bit_cast<float>(0x7F7F7FFFU)), 0x7F7F);
  EXPECT_TRUE(is_nan_bf16(rig::float_to_bfloat16(std::bit_cast<float>(0x7F800001U))));
  EXPECT_TRUE(is_nan_bf16(rig::float_to_bfloat16(std::bit_cast<float>(0xFFFFFFFFU))));
}

TEST(TensorDtype, TensorCastsRoundLikeTheScalarFunctions) {
  std::vector<float> values;
  std::mt19937 rng(3);
  std::normal_distribution<float> normal(0.0F, 1000.0F);
  for (int i = 0; i < 10000; ++i) values.push_back(normal(rng));
  values.push_back(std::numeric_limits<float>::infinity());
  values.push_back(std::nanf(""));
  values.push_back(1e-7F);
  Tensor x = Tensor::from_vector(values, {static_cast<std::int64_t>(values.size())});
  const Tensor h = x.to(DType::f16);
  const Tensor b = x.to(DType::bf16);
  EXPECT_EQ(h.dtype(), DType::f16);
  const std::uint16_t* hp = h.data<std::uint16_t>();
  const std::uint16_t* bp = b.data<std::uint16_t>();
  const auto back = h.to_vector();
  for (std::size_t i = 0; i < values.size(); ++i) {
    ASSERT_EQ(hp[i], rig::float_to_half(values[i])) << i;
    ASSERT_EQ(bp[i], rig::float_to_bfloat16(values[i])) << i;
    if (!std::isnan(values[i])) {
      ASSERT_EQ(back[i], rig::half_to_float(hp[i])) << i;
    }
  }
  EXPECT_TRUE(std::isnan(back[values.size() - 2]));
  EXPECT_EQ(b.to(DType::f32).to_vector()[0], rig::bfloat16_to_float(bp[0]));
  EXPECT_EQ(h.to(DType::bf16).data<std::uint16_t>()[0],
            rig::float_to_bfloat16(rig::half_to_float(hp[0])));
  EXPECT_TRUE(contains(error_of([&] { h.data<float>(); }), "data<f32>() on a f16 tensor"));
  EXPECT_TRUE(contains(error_of([&] { x.data<std::uint16_t>(); }), "on a f32 tensor"));
}

TEST(TensorDtype, IntegerCasts) {
  Tensor f = Tensor::from_vector(
      std::vector<float>{-2.7F, -0.5F, 0.5F, 2.7F, 300.0F, -300.0F, 3e9F, -3e9F, 1e20F,
                         std::nanf(""), std::numeric_limits<float>::infinity()},
      {11});
  EXPECT_EQ(f.to(DType::i64).to_int_vector(),
            (std::vector<std::int64_t>{-2, 0, 0, 2, 300, -300, 3000000000LL, -3000000000LL,
                                       std::numeric_limits<std::int64_t>::max(), 0,
                                       std::numeric_limits<std::int64_t>::max()}));
  EXPECT_EQ(f.to(DType::i32).to_int_vector(),
            (std::vector<std::int64_t>{-2, 0, 0, 2, 300, -300, 2147483647, -2147483648LL,
                                       2147483647, 0, 2147483647}));
  EXPECT_EQ(f.to(DType::u8).to_int_vector(),
            (std::vector<std::int64_t>{0, 0, 0, 2, 255, 0, 255, 0, 255, 0, 255}));
  // Integers to integers wrap; to floats round to nearest.
  Tensor i =
      Tensor::from_vector(std::vector<std::int64_t>{-1, 256, 257, (1LL << 40) + 3, 16777217}, {5});
  EXPECT_EQ(i.to(DType::u8).to_int_vector(), (std::vector<std::int64_t>{255, 0, 1, 3, 1}));
  EXPECT_EQ(i.to(DType::i32).to_int_vector(),
            (std::vector<std::int64_t>{-1, 256, 257, 3, 16777217}));
  EXPECT_EQ(i.to(DType::f32).to_vector(),
            (std::vector<float>{-1, 256, 257, 0x1.0p40F, 16777216.0F}));
  EXPECT_EQ(i.to(DType::f16).to_vector()[2], 257.0F);
  EXPECT_EQ(Tensor::from_vector(std::vector<std::uint8_t>{0, 200, 255}, {3})
                .to(DType::i32)
                .to_int_vector(),
            (std::vector<std::int64_t>{0, 200, 255}));
  EXPECT_TRUE(contains(error_of([&] { f.to_int_vector(); }), "integer dtypes only"));
}

TEST(TensorDtype, FactoriesAndElementAccessForEveryDtype) {
  for (DType d : {DType::f32, DType::f16, DType::bf16, DType::i32, DType::i64, DType::u8}) {
    SCOPED_TRACE(std::string(rig::dtype_name(d)));
    Tensor t = Tensor::full({2, 3}, 3.0F, d);
    EXPECT_EQ(t.dtype(), d);
    EXPECT_EQ(t.nbytes(), 6 * rig::dtype_size(d));
    EXPECT_EQ(t.to_vector(), std::vector<float>(6, 3.0F));
    EXPECT_EQ(Tensor::ones({4}, d).to_vector(), std::vector<float>(4, 1.0F));
    EXPECT_EQ(Tensor::zeros({4}, d).to_vector(), std::vector<float>(4, 0.0F));
    EXPECT_EQ(Tensor::arange(5, d).to_vector(), (std::vector<float>{0, 1, 2, 3, 4}));
    EXPECT_EQ(Tensor::full({}, 2.0F, d).item(), 2.0F);
    // A strided view: the transposed [3,2] of a [2,3].
    Tensor a = Tensor::arange(6, d).reshape({2, 3}).transpose(0, 1);
    EXPECT_EQ(a.to_vector(), (std::vector<float>{0, 3, 1, 4, 2, 5}));
    EXPECT_EQ(a.slice(0, 2, 3).slice(1, 1, 2).item(), 5.0F);
    if (!rig::is_floating(d)) {
      EXPECT_EQ(a.to_int_vector(), (std::vector<std::int64_t>{0, 3, 1, 4, 2, 5}));
    }
    for (DType e : {DType::f32, DType::f16, DType::bf16, DType::i32, DType::i64, DType::u8}) {
      EXPECT_EQ(a.to(e).to_vector(), (std::vector<float>{0, 3, 1, 4, 2, 5})) << rig::dtype_name(e);
      EXPECT_EQ(a.to(e).is_contiguous(), e != d);  // the same dtype: itself, no copy
    }
  }
  EXPECT_FALSE(rig::is_floating(DType::i32));
  EXPECT_TRUE(rig::is_floating(DType::bf16));
  EXPECT_EQ(Tensor::arange(0).numel(), 0);
  EXPECT_EQ(Tensor::full({2}, 2.5F, DType::i32).to_int_vector(), (std::vector<std::int64_t>{2, 2}));
  EXPECT_EQ(Tensor::full({1}, 1.0F / 3.0F, DType::f16).data<std::uint16_t>()[0],
            rig::float_to_half(1.0F / 3.0F));
}

TEST(TensorDtype, CastsAreDifferentiableBetweenFloatingTypes) {
  Tensor x = Tensor::from_vector(std::vector<float>{1.0F, 2.0F, 3.0F}, {3}).set_requires_grad(true);
  Tensor same = x.to(DType::f32);
  EXPECT_EQ(same.impl(), x.impl());  // no cast, no copy
  Tensor h = x.to(DType::f16);
  EXPECT_TRUE(h.requires_grad());
  EXPECT_EQ(h.impl()->grad_fn->op, "to");
  Tensor back = h.to(DType::bf16).to(DType::f32).reshape({3}).slice(0, 2, 3).reshape({});
  back.backward();
  EXPECT_EQ(x.grad().dtype(), DType::f32);
  EXPECT_EQ(x.grad().to_vector(), (std::vector<float>{0, 0, 1}));
  EXPECT_FALSE(x.to(DType::i64).requires_grad());
  // An f16 leaf gets an f16 gradient.
  Tensor y = Tensor::full({2}, 1.0F, DType::f16).set_requires_grad(true);
  y.to(DType::f32).slice(0, 1, 2).reshape({}).backward();
  EXPECT_EQ(y.grad().dtype(), DType::f16);
  EXPECT_EQ(y.grad().to_vector(), (std::vector<float>{0, 1}));
}

TEST(TensorDtype, GoldenCastsFromTorch) {
  for (const auto& c : rig_test::load_golden("tensor")) {
    if (c.name.rfind("cast_", 0) != 0) continue;
    SCOPED_TRACE(c.name);
    const Tensor& x = c.input("x");
    // The outputs hold the f16 / bf16 values torch rounded to, widened to f32.
    EXPECT_TRUE(rig_test::tensors_close(x.to(DType::f16).to(DType::f32), c.output("f16"), 0, 0));
    EXPECT_TRUE(rig_test::tensors_close(x.to(DType::bf16).to(DType::f32), c.output("bf16"), 0, 0));
    if (c.outputs.count("i64")) {
      EXPECT_EQ(x.to(DType::i64).to_int_vector(), c.output("i64").to_int_vector());
    }
  }
}

}  // namespace
