#include "cuda/kernels/elementwise.hpp"

#include <gtest/gtest.h>

#include "backend/kernel_args.hpp"
#include "backend/strided_plan.hpp"
#include "kernel_test_util.hpp"
#include "rig/half.hpp"

namespace rig::kernels::test {
namespace {

static_assert(static_cast<int>(UnaryOp::pow_scalar) ==
              static_cast<int>(backend::Unary::pow_scalar));
static_assert(static_cast<int>(UnaryOp::gelu_tanh) == static_cast<int>(backend::Unary::gelu_tanh));
static_assert(static_cast<int>(UnaryOp::sigmoid) == static_cast<int>(backend::Unary::sigmoid));
static_assert(static_cast<int>(BinaryOp::div) == static_cast<int>(backend::Binary::div));
static_assert(kMaxDims == backend::kMaxStridedDims);

constexpr std::int64_t kSizes[] = {1, 33, 1000};

// exp, tanh and the activations built on them: the CPU's SIMD polynomials
// differ from expf/tanhf by a few ulp (the GPU's by up to 2 more).
constexpr float kTransAbs = 1e-6F, kTransRel = 1e-5F;

struct UnaryCase {
  UnaryOp op;
  float scalar;
  bool positive;  // inputs in (0.1, 4)
  bool exact;     // bit-equal to the CPU in the emulator (the host's libm)
};

constexpr UnaryCase kUnaryCases[] = {
    {UnaryOp::neg, 0.0F, false, true},        {UnaryOp::exp, 0.0F, false, false},
    {UnaryOp::log, 0.0F, true, true},         {UnaryOp::sqrt, 0.0F, true, true},
    {UnaryOp::rsqrt, 0.0F, true, true},       {UnaryOp::relu, 0.0F, false, true},
    {UnaryOp::gelu, 0.0F, false, false},      {UnaryOp::gelu_tanh, 0.0F, false, false},
    {UnaryOp::tanh, 0.0F, false, false},      {UnaryOp::sigmoid, 0.0F, false, false},
    {UnaryOp::add_scalar, 1.5F, false, true}, {UnaryOp::mul_scalar, -0.75F, false, true},
    {UnaryOp::pow_scalar, 2.0F, false, true}, {UnaryOp::pow_scalar, 3.0F, false, true},
    {UnaryOp::pow_scalar, 0.5F, true, true},  {UnaryOp::pow_scalar, -1.0F, true, true},
    {UnaryOp::pow_scalar, 1.7F, true, true},  {UnaryOp::pow_scalar, 0.0F, true, true},
};

TEST(KernelElementwise, UnaryForwardAndBackwardMatchCpu) {
  for (const std::int64_t n : kSizes) {
    for (const UnaryCase& c : kUnaryCases) {
      SCOPED_TRACE(::testing::Message()
                   << "n " << n << " op " << static_cast<int>(c.op) << " scalar " << c.scalar);
      const auto seed = static_cast<std::uint32_t>(n * 31 + static_cast<int>(c.op));
      std::vector<float> x =
          c.positive ? uniform(n, 0.1F, 4.0F, seed) : uniform(n, -4.0F, 4.0F, seed);
      if (!c.positive && n > 3) {  // signed zeros and a NaN
        x[0] = 0.0F;
        x[1] = -0.0F;
        x[2] = NAN;
      }
      const std::vector<float> g = uniform(n, -1.0F, 1.0F, seed + 1);
      const auto size = static_cast<std::size_t>(n);
      const auto bop = static_cast<backend::Unary>(c.op);
      std::vector<float> want_y(size), want_dx(size), y(size, 7.0F), dx(size, 7.0F);
      cpu().unary(bop, x.data(), want_y.data(), n, c.scalar);
      cpu().unary_backward(bop, g.data(), x.data(), want_y.data(), want_dx.data(), n, c.scalar);
      run(UnaryForward{c.op, x.data(), y.data(), n, c.scalar});
      run(UnaryBackward{c.op, g.data(), x.data(), want_y.data(), dx.data(), n, c.scalar});
      if (c.exact) {
        EXPECT_TRUE(bit_equal(y, want_y));
        EXPECT_TRUE(bit_equal(dx, want_dx));
      } else {
        EXPECT_TRUE(close(y, want_y, kTransAbs, kTransRel));
        EXPECT_TRUE(close(dx, want_dx, kTransAbs, kTransRel));
      }
    }
  }
  // In place.
  std::vector<float> x = uniform(100, -2.0F, 2.0F, 3), want(100);
  cpu().unary(backend::Unary::mul_scalar, x.data(), want.data(), 100, 3.0F);
  run(UnaryForward{UnaryOp::mul_scalar, x.data(), x.data(), 100, 3.0F});
  EXPECT_TRUE(bit_equal(x, want));
}

// out [2, 3, 37]-like shapes with broadcast and transposed operands.
TEST(KernelElementwise, BinaryOverBroadcastPlansIsBitEqual) {
  struct Case {
    Shape shape;
    Strides a, b;
  };
  const Case cases[] = {
      {{1000}, {1}, {1}},                            // contiguous
      {{5, 37}, {37, 1}, {0, 1}},                    // row broadcast
      {{5, 37}, {37, 1}, {1, 0}},                    // column broadcast
      {{3, 7, 11}, {1, 3, 21}, {77, 11, 1}},         // a transposed
      {{2, 3, 5, 7}, {0, 35, 7, 1}, {21, 7, 0, 1}},  // both broadcast
      {{1}, {0}, {0}},                               // one element
  };
  for (const Case& c : cases) {
    const std::int64_t n = shape_numel(c.shape);
    std::int64_t a_span = 1, b_span = 1;
    for (std::size_t d = 0; d < c.shape.size(); ++d) {
      a_span += (c.shape[d] - 1) * c.a[d];
      b_span += (c.shape[d] - 1) * c.b[d];
    }
    const std::vector<float> a = uniform(a_span, -3.0F, 3.0F, 5);
    std::vector<float> b = uniform(b_span, 0.5F, 3.0F, 6);
    const Strides out_strides = contiguous_strides(c.shape);
    const auto plan = backend::make_strided_plan<3>(c.shape, {&out_strides, &c.a, &c.b});
    for (const BinaryOp op : {BinaryOp::add, BinaryOp::sub, BinaryOp::mul, BinaryOp::div}) {
      SCOPED_TRACE(::testing::Message() << to_string(c.shape) << " op " << static_cast<int>(op));
      std::vector<float> want(static_cast<std::size_t>(n)), got(want.size(), 9.0F);
      cpu().binary(static_cast<backend::Binary>(op), plan, a.data(), b.data(), want.data());
      BinaryKernel k{.op = op, .ndim = plan.ndim, .a = a.data(), .b = b.data(), .out = got.data()};
      for (int d = 0; d < plan.ndim; ++d) {
        k.shape[d] = plan.shape[d];
        for (int o = 0; o < 3; ++o) k.strides[o][d] = plan.strides[o][d];
      }
      run(k);
      EXPECT_TRUE(bit_equal(got, want));
    }
  }
}

constexpr Activation kActivations[] = {Activation::none, Activation::relu, Activation::gelu,
                                       Activation::tanh, Activation::sigmoid};

bool exact(Activation a) {
  return a == Activation::none || a == Activation::relu;
}

TEST(KernelElementwise, BiasActivationMatchesCpu) {
  for (const std::int64_t rows : {1, 3, 37}) {
    for (const std::int64_t cols : {1, 33, 100}) {
      for (const Activation act : kActivations) {
        for (const bool with_bias : {false, true}) {
          SCOPED_TRACE(::testing::Message() << rows << "x" << cols << " act "
                                            << static_cast<int>(act) << " bias " << with_bias);
          const auto n = static_cast<std::size_t>(rows * cols);
          const std::vector<float> y0 = uniform(rows * cols, -3.0F, 3.0F, 11);
          const std::vector<float> bias = uniform(cols, -1.0F, 1.0F, 12);
          const float* bp = with_bias ? bias.data() : nullptr;
          std::vector<float> want = y0, got = y0, want_pre(n, 5.0F), pre(n, 5.0F);
          cpu().bias_activation(want.data(), want_pre.data(), bp, rows, cols, act);
          if (with_bias || act != Activation::none) {
            run(BiasActivation{got.data(), pre.data(), bp, rows, cols, act});
          }
          EXPECT_TRUE(bit_equal(pre, want_pre));  // y + bias: exact
          if (exact(act)) {
            EXPECT_TRUE(bit_equal(got, want));
          } else {
            EXPECT_TRUE(close(got, want, kTransAbs, kTransRel));
          }
        }
      }
    }
  }
}

TEST(KernelElementwise, BiasReluDropoutStoreIsBiasActivationDropoutAndACast) {
  const RandomKey key{7, 3, 1, 99};
  for (const std::int64_t rows : {1, 3, 37}) {
    for (const std::int64_t cols : {1, 33, 100}) {  // n % 4 != 0 included: a partial block
      for (const bool relu : {false, true}) {
        for (const float p : {0.0F, 0.3F}) {
          for (const ElementType type : {ElementType::bf16, ElementType::f16}) {
            const bool with_bias = (rows + cols) % 2 == 0 || relu;
            SCOPED_TRACE(::testing::Message()
                         << rows << "x" << cols << " relu " << relu << " p " << p << " f16 "
                         << (type == ElementType::f16) << " bias " << with_bias);
            const auto n = static_cast<std::size_t>(rows * cols);
            std::vector<float> y = uniform(rows * cols, -3.0F, 3.0F, 21);
            y[0] = -0.0F;  // relu keeps -0 (v < 0 is false), as the CPU
            const std::vector<float> bias = uniform(cols, -1.0F, 1.0F, 22);
            const Activation act = relu ? Activation::relu : Activation::none;
            const float scale = 1.0F / (1.0F - p);
            std::vector<float> want = y;
            cpu().bias_activation(want.data(), nullptr, with_bias ? bias.data() : nullptr, rows,
                                  cols, act);
            if (p > 0.0F) {
              cpu().dropout_forward(key, p, scale, DType::f32, want.data(), want.data(),
                                    rows * cols, nullptr);
            }
            std::vector<std::uint16_t> got(n, 0x7777);
            BiasReluDropoutStore k;
            k.y = y.data();
            k.bias = with_bias ? bias.data() : nullptr;
            k.out = got.data();
            k.type = type;
            k.rows = rows;
            k.cols = cols;
            k.relu = relu;
            if (p > 0.0F) {
              k.dropped = true;
              k.stream = math::PhiloxStream::of(key.seed, key.step, key.rank, key.purpose);
              k.threshold = math::dropout_threshold(p);
              k.scale = scale;
            }
            run(k);
            for (std::size_t i = 0; i < n; ++i) {
              const std::uint16_t bits = type == ElementType::bf16 ? float_to_bfloat16_bits(want[i])
                                                                   : float_to_half_bits(want[i]);
              ASSERT_EQ(got[i], bits) << "element " << i;
            }
          }
        }
      }
    }
  }
}

TEST(KernelElementwise, ActivationBackwardMatchesCpu) {
  for (const std::int64_t rows : {1, 37, 64, 65, 150}) {
    for (const std::int64_t cols : {1, 33, 70}) {
      for (const Activation act : kActivations) {
        SCOPED_TRACE(::testing::Message()
                     << rows << "x" << cols << " act " << static_cast<int>(act));
        const auto n = static_cast<std::size_t>(rows * cols);
        const auto seed = static_cast<std::uint32_t>(rows * 100 + cols);
        const std::vector<float> g = uniform(rows * cols, -1.0F, 1.0F, seed);
        // saved: the output of relu / tanh / sigmoid, gelu's pre-activation.
        std::vector<float> saved = uniform(rows * cols, -2.0F, 2.0F, seed + 1);
        if (act == Activation::relu) {
          for (float& v : saved) v = v < 0.0F ? 0.0F : v;
        } else if (act == Activation::tanh) {
          for (float& v : saved) v = std::tanh(v);
        } else if (act == Activation::sigmoid) {
          for (float& v : saved) v = 1.0F / (1.0F + std::exp(-v));
        }
        const float relu_scale = act == Activation::relu ? 1.25F : 1.0F;
        const float* sp = act == Activation::none ? nullptr : saved.data();
        std::vector<float> want_dz(n, 3.0F), want_db(static_cast<std::size_t>(cols), 3.0F);
        std::vector<std::uint16_t> want_bf(n, 3);
        cpu().activation_backward(act, g.data(), sp, want_dz.data(), want_db.data(), rows, cols,
                                  relu_scale);
        cpu().activation_backward_bf16(act, g.data(), sp, want_bf.data(), nullptr, rows, cols,
                                       relu_scale);

        const std::int64_t blocks = activation_row_blocks(rows);
        std::vector<float> dz(n, 3.0F), db(static_cast<std::size_t>(cols), 3.0F);
        std::vector<float> partial(static_cast<std::size_t>(blocks * cols), -1.0F);
        std::vector<std::uint16_t> bf(n, 3);
        float* dzp = act == Activation::none ? nullptr : dz.data();  // as the CPU
        run(ActivationBackward{act, g.data(), sp, dzp, bf.data(),
                               blocks == 1 ? db.data() : partial.data(), rows, cols, relu_scale});
        if (blocks > 1) run(ColumnTotals{partial.data(), db.data(), blocks, cols});
        // tanh: the CPU contracts 1 - y * y into a multiply-add.
        if (exact(act) || act == Activation::sigmoid) {
          EXPECT_TRUE(bit_equal(dz, want_dz));
          EXPECT_TRUE(bit_equal(db, want_db));
          EXPECT_TRUE(bit_equal(bf, want_bf));
        } else {  // gelu: exp; tanh: contraction
          EXPECT_TRUE(close(dz, want_dz, kTransAbs, kTransRel));
          EXPECT_TRUE(close(db, want_db, 1e-5F, 1e-5F));
          std::vector<float> wide(n), want_wide(n);
          for (std::size_t i = 0; i < n; ++i) {
            wide[i] = bfloat16_bits_to_float(bf[i]);
            want_wide[i] = bfloat16_bits_to_float(want_bf[i]);
          }
          EXPECT_TRUE(close(wide, want_wide, 1e-6F, 1e-2F));  // one bf16 ulp
        }
      }
    }
  }
}

// Two sets of partial rows totalled in one launch equal two launches, bit for
// bit: each set's columns in the same order, each with its own accumulate.
TEST(KernelElementwise, ColumnTotalsOfTwoSetsAreTwoLaunches) {
  for (const ElementType type : {ElementType::f32, ElementType::bf16}) {
    for (const std::int64_t cols : {1, 37, 512}) {
      SCOPED_TRACE(::testing::Message()
                   << "cols " << cols << " bf16 " << (type != ElementType::f32));
      const std::int64_t blocks = 7;
      const auto seed = static_cast<std::uint32_t>(cols);
      const std::vector<float> a = uniform(blocks * cols, -1.0F, 1.0F, seed);
      const std::vector<float> b = uniform(blocks * cols, -1.0F, 1.0F, seed + 1);
      const std::vector<float> start = uniform(cols, -1.0F, 1.0F, seed + 2);
      // Rows as `type` (f32 values, or bf16 bits in the low half of each f32 slot).
      const auto stored = [&](const std::vector<float>& v) {
        std::vector<float> out(v.size());
        for (std::size_t i = 0; i < v.size(); ++i) store_element(out.data(), type, i, v[i]);
        return out;
      };
      std::vector<float> want_a = stored(start), want_b = stored(start);
      run(ColumnTotals{a.data(), want_a.data(), blocks, cols, type, false});
      run(ColumnTotals{b.data(), want_b.data(), blocks, cols, type, true});
      std::vector<float> got_a = stored(start), got_b = stored(start);
      ColumnTotals both{a.data(), got_a.data(), blocks, cols, type, false};
      both.partial2 = b.data();
      both.out2 = got_b.data();
      both.accumulate2 = true;
      run(both);
      EXPECT_TRUE(bit_equal(got_a, want_a));
      EXPECT_TRUE(bit_equal(got_b, want_b));
    }
  }
}

}  // namespace
}  // namespace rig::kernels::test
