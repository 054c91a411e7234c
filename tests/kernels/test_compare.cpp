#include "cuda/kernels/compare.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "kernel_test_util.hpp"
#include "rig/dtype.hpp"

namespace rig::kernels::test {
namespace {

struct Case {
  Shape shape;
  Strides a, b;
};

// Broadcast, transposed, empty and single-element plans.
const Case kCases[] = {
    {{1000}, {1}, {1}},                            // contiguous
    {{5, 37}, {37, 1}, {0, 1}},                    // row broadcast
    {{5, 37}, {37, 1}, {1, 0}},                    // column broadcast
    {{3, 7, 11}, {1, 3, 21}, {77, 11, 1}},         // a transposed
    {{2, 3, 5, 7}, {0, 35, 7, 1}, {21, 7, 0, 1}},  // both broadcast
    {{1}, {0}, {0}},                               // one element
    {{0, 3}, {3, 1}, {3, 1}},                      // empty
};

std::int64_t span(const Shape& shape, const Strides& strides) {
  std::int64_t s = 1;
  for (std::size_t d = 0; d < shape.size(); ++d) s += (shape[d] - 1) * strides[d];
  return shape_numel(shape) == 0 ? 0 : s;
}

// n values of the dtype with ties (a small set), and for f32 NaN, infinities
// and signed zeros; for i64 values that double rounds.
std::vector<std::uint8_t> values(DType dtype, std::int64_t n, std::uint32_t seed) {
  std::mt19937 gen(seed);
  std::vector<std::uint8_t> out(static_cast<std::size_t>(n) * dtype_size(dtype));
  for (std::int64_t i = 0; i < n; ++i) {
    const auto small = static_cast<std::int64_t>(gen() % 5) - 2;  // -2 .. 2
    void* at = out.data() + static_cast<std::size_t>(i) * dtype_size(dtype);
    switch (dtype) {
      case DType::f32: {
        float v = static_cast<float>(small) * 0.5F;
        if (gen() % 11 == 0) v = NAN;
        if (gen() % 13 == 0) v = gen() % 2 == 0 ? INFINITY : -INFINITY;
        if (v == 0.0F && gen() % 2 == 0) v = -0.0F;
        std::memcpy(at, &v, 4);
        break;
      }
      case DType::i32: {
        const auto v = static_cast<std::int32_t>(gen() % 7 == 0 ? 2147483647 : small);
        std::memcpy(at, &v, 4);
        break;
      }
      case DType::i64: {
        std::int64_t v = small;
        if (gen() % 7 == 0) v = (std::int64_t{1} << 53) + 1;  // double(v) == 2^53
        std::memcpy(at, &v, 8);
        break;
      }
      default: {
        const auto v = static_cast<std::uint8_t>(small + 2 + (gen() % 9 == 0 ? 250 : 0));
        std::memcpy(at, &v, 1);
        break;
      }
    }
  }
  return out;
}

TEST(KernelCompare, BitEqualToCpu) {
  for (const Case& c : kCases) {
    for (const DType dtype : {DType::f32, DType::i32, DType::i64, DType::u8}) {
      const std::vector<std::uint8_t> a = values(dtype, span(c.shape, c.a), 3);
      const std::vector<std::uint8_t> b = values(dtype, span(c.shape, c.b), 4);
      const Strides out_strides = contiguous_strides(c.shape);
      const Strides zero(c.shape.size(), 0);
      for (const CompareOp op : {CompareOp::equal, CompareOp::less, CompareOp::not_equal_scalar}) {
        const bool scalar_op = op == CompareOp::not_equal_scalar;
        // not_equal_scalar: operand 2 has stride 0 (b is not read).
        const auto plan =
            backend::make_strided_plan<3>(c.shape, {&out_strides, &c.a, scalar_op ? &zero : &c.b});
        for (const double scalar : {0.0, 0.5, -1.0, 2.0, 9007199254740992.0, 2147483647.0}) {
          if (!scalar_op && scalar != 0.0) continue;
          SCOPED_TRACE(::testing::Message()
                       << to_string(c.shape) << " dtype " << dtype_name(dtype) << " op "
                       << static_cast<int>(op) << " scalar " << scalar);
          const auto n = static_cast<std::size_t>(shape_numel(c.shape));
          std::vector<std::uint8_t> want(n, 7), got(n, 9);
          cpu().compare(static_cast<backend::Compare>(op), plan, dtype, a.data(),
                        scalar_op ? nullptr : b.data(), scalar, want.data());
          CompareKernel k{.op = op,
                          .dtype = dtype,
                          .ndim = plan.ndim,
                          .a = a.data(),
                          .b = scalar_op ? nullptr : b.data(),
                          .scalar = scalar,
                          .out = got.data()};
          for (int d = 0; d < plan.ndim; ++d) {
            k.shape[d] = plan.shape[d];
            for (int o = 0; o < 3; ++o) k.strides[o][d] = plan.strides[o][d];
          }
          run(k);
          EXPECT_TRUE(bit_equal(got, want));
        }
      }
    }
  }
}

TEST(KernelCompare, EmptyPlanLaunchesNothing) {
  CompareKernel k{.ndim = 1};
  k.shape[0] = 0;
  EXPECT_EQ(k.plan(h100()).grid.count(), 0U);
}

}  // namespace
}  // namespace rig::kernels::test
