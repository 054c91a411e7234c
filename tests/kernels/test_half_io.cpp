// The row and elementwise kernels reading and writing f16 / bf16 tensors
// (their `type` field; the math stays f32): each against the CPU back end's
// f32 result on the same inputs rounded to the type, that result rounded to
// the type. The kernel's f32 value differs from the CPU's by a few f32 ulps,
// so the two roundings differ by at most one ulp of the 16-bit type.
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "backend/kernel_args.hpp"
#include "backend/strided_plan.hpp"
#include "cuda/kernels/cross_entropy.hpp"
#include "cuda/kernels/elementwise.hpp"
#include "cuda/kernels/layer_norm.hpp"
#include "cuda/kernels/softmax.hpp"
#include "kernel_test_util.hpp"
#include "rig/half.hpp"

namespace rig::kernels::test {
namespace {

struct Half {
  ElementType type;
  float ulp;  // relative: one ulp of the type at most this fraction of the value
  const char* name;
};

constexpr Half kHalves[] = {{ElementType::f16, 1e-3F, "f16"}, {ElementType::bf16, 8e-3F, "bf16"}};

std::uint16_t to_bits(ElementType t, float v) {
  return t == ElementType::f16 ? float_to_half_bits(v) : float_to_bfloat16_bits(v);
}

float from_bits(ElementType t, std::uint16_t b) {
  return t == ElementType::f16 ? half_bits_to_float(b) : bfloat16_bits_to_float(b);
}

// A 16-bit tensor, handed to the kernels through their float* fields.
struct Tensor16 {
  std::vector<std::uint16_t> bits;
  ElementType type;

  Tensor16(ElementType t, const std::vector<float>& v) : bits(v.size()), type(t) {
    for (std::size_t i = 0; i < v.size(); ++i) bits[i] = to_bits(t, v[i]);
  }
  float* data() { return reinterpret_cast<float*>(bits.data()); }
  std::vector<float> values() const {
    std::vector<float> out(bits.size());
    for (std::size_t i = 0; i < bits.size(); ++i) out[i] = from_bits(type, bits[i]);
    return out;
  }
};

// v rounded to the type (and back to f32).
std::vector<float> rounded(ElementType t, const std::vector<float>& v) {
  return Tensor16(t, v).values();
}

// Output of the type: within abs_tol + one ulp of the type (plus the f32 rel_tol).
::testing::AssertionResult close16(const Half& h, const Tensor16& got,
                                   const std::vector<float>& want_f32, float abs_tol,
                                   float rel_tol = 0.0F) {
  return close(got.values(), rounded(h.type, want_f32), abs_tol, rel_tol + h.ulp);
}

std::vector<std::uint8_t> random_mask(std::int64_t rows, std::int64_t cols, std::uint32_t seed) {
  std::mt19937 gen(seed);
  std::vector<std::uint8_t> mask(static_cast<std::size_t>(rows * cols));
  for (auto& m : mask) m = gen() % 3 != 0 ? 1 : 0;
  if (rows > 1) {
    for (std::int64_t j = 0; j < cols; ++j)
      mask[static_cast<std::size_t>((rows - 1) * cols + j)] = 0;
  }
  return mask;
}

constexpr std::int64_t kHalfRows[] = {1, 3, 37};
constexpr std::int64_t kHalfCols[] = {1, 7, 33, 257, 1000};

TEST(KernelHalfIo, Softmax) {
  for (const Half& h : kHalves) {
    for (const std::int64_t rows : kHalfRows) {
      for (const std::int64_t cols : kHalfCols) {
        for (const bool log : {false, true}) {
          for (const bool masked : {false, true}) {
            SCOPED_TRACE(::testing::Message() << h.name << " " << rows << "x" << cols << " log "
                                              << log << " masked " << masked);
            const auto n = static_cast<std::size_t>(rows * cols);
            const auto seed = static_cast<std::uint32_t>(rows * 1009 + cols);
            Tensor16 x(h.type, uniform(rows * cols, -8.0F, 8.0F, seed));
            Tensor16 g(h.type, uniform(rows * cols, -1.0F, 1.0F, seed + 1));
            const std::vector<std::uint8_t> mask = random_mask(rows, cols, seed + 2);
            const std::uint8_t* mp = masked ? mask.data() : nullptr;

            std::vector<float> want_y(n), want_dx(n);
            cpu().softmax_forward(row_plan(rows, cols), x.values().data(), mp, want_y.data(), log);
            Tensor16 y(h.type, std::vector<float>(n, 123.0F));
            run(SoftmaxForward{.x = x.data(),
                               .mask = mp,
                               .y = y.data(),
                               .rows = rows,
                               .cols = cols,
                               .log = log,
                               .type = h.type});
            EXPECT_TRUE(close16(h, y, want_y, log ? 2e-5F : 1e-7F));

            // Backward from the CPU's y rounded to the type.
            Tensor16 y16(h.type, want_y);
            cpu().softmax_backward(y16.values().data(), g.values().data(), want_dx.data(), rows,
                                   cols, log);
            for (const std::uint64_t emu_seed : kSeeds) {
              Tensor16 dx(h.type, std::vector<float>(n, 123.0F));
              run(SoftmaxBackward{.y = y16.data(),
                                  .g = g.data(),
                                  .dx = dx.data(),
                                  .rows = rows,
                                  .cols = cols,
                                  .log = log,
                                  .type = h.type},
                  emu_seed);
              EXPECT_TRUE(close16(h, dx, want_dx, 1e-6F, 1e-5F));
            }
          }
        }
      }
    }
  }
}

TEST(KernelHalfIo, LayerNorm) {
  for (const Half& h : kHalves) {
    for (const std::int64_t rows : kHalfRows) {
      for (const std::int64_t d : kHalfCols) {
        for (const bool affine : {false, true}) {
          SCOPED_TRACE(::testing::Message()
                       << h.name << " " << rows << "x" << d << " affine " << affine);
          const auto n = static_cast<std::size_t>(rows * d);
          const auto rn = static_cast<std::size_t>(rows);
          const auto dn = static_cast<std::size_t>(d);
          const auto seed = static_cast<std::uint32_t>(rows * 7919 + d);
          Tensor16 x(h.type, uniform(rows * d, 2.0F, 6.0F, seed));
          Tensor16 g(h.type, uniform(rows * d, -1.0F, 1.0F, seed + 1));
          const std::vector<float> gamma = uniform(d, 0.5F, 1.5F, seed + 2);
          const std::vector<float> beta = uniform(d, -0.5F, 0.5F, seed + 3);
          const float* gp = affine ? gamma.data() : nullptr;
          const float* bp = affine ? beta.data() : nullptr;
          const float eps = 1e-5F;
          const std::vector<float> xv = x.values(), gv = g.values();

          std::vector<float> want_y(n), want_mean(rn), want_rstd(rn);
          cpu().layer_norm_forward(xv.data(), gp, bp, want_y.data(), want_mean.data(),
                                   want_rstd.data(), rows, d, eps);
          std::vector<float> want_dx(n), want_dgamma(dn), want_dbeta(dn);
          std::vector<float> scratch(
              static_cast<std::size_t>(cpu().layer_norm_scratch_size(rows, d)));
          cpu().layer_norm_backward(xv.data(), gp, want_mean.data(), want_rstd.data(), gv.data(),
                                    want_dx.data(), want_dgamma.data(), want_dbeta.data(), rows, d,
                                    scratch.data());

          Tensor16 y(h.type, std::vector<float>(n, 7.0F)), dx(h.type, std::vector<float>(n, 7.0F));
          std::vector<float> mean(rn, 7.0F), rstd(rn, 7.0F), dgamma(dn, 7.0F), dbeta(dn, 7.0F);
          run(LayerNormForward{.x = x.data(),
                               .gamma = gp,
                               .beta = bp,
                               .y = y.data(),
                               .mean = mean.data(),
                               .rstd = rstd.data(),
                               .rows = rows,
                               .d = d,
                               .eps = eps,
                               .type = h.type});
          EXPECT_TRUE(close(mean, want_mean, 0.0F, 1e-6F));
          EXPECT_TRUE(close(rstd, want_rstd, 0.0F, 1e-4F));
          EXPECT_TRUE(close16(h, y, want_y, 1e-4F, 1e-4F));
          run(LayerNormBackwardDx{.x = x.data(),
                                  .gamma = gp,
                                  .mean = want_mean.data(),
                                  .rstd = want_rstd.data(),
                                  .g = g.data(),
                                  .dx = dx.data(),
                                  .rows = rows,
                                  .d = d,
                                  .type = h.type});
          std::vector<float> partials(static_cast<std::size_t>(layer_norm_params_scratch(rows, d)),
                                      7.0F);
          run_layer_norm_params([&](const auto& k) { run(k); },
                                LayerNormBackwardParams{.x = x.data(),
                                                        .mean = want_mean.data(),
                                                        .rstd = want_rstd.data(),
                                                        .g = g.data(),
                                                        .rows = rows,
                                                        .d = d,
                                                        .type = h.type},
                                dgamma.data(), dbeta.data(), partials.data());
          EXPECT_TRUE(close16(h, dx, want_dx, 2e-4F, 1e-4F));
          EXPECT_TRUE(close(dgamma, want_dgamma, 1e-5F, 1e-5F));  // f32 outputs
          EXPECT_TRUE(close(dbeta, want_dbeta, 1e-5F, 1e-5F));
        }
      }
    }
  }
}

TEST(KernelHalfIo, CrossEntropy) {
  for (const Half& h : kHalves) {
    for (const std::int64_t rows : kHalfRows) {
      for (const std::int64_t c : kHalfCols) {
        for (const bool smoothed : {false, true}) {
          SCOPED_TRACE(::testing::Message()
                       << h.name << " " << rows << "x" << c << " smoothed " << smoothed);
          const auto n = static_cast<std::size_t>(rows * c);
          const auto rn = static_cast<std::size_t>(rows);
          const auto seed = static_cast<std::uint32_t>(rows * 3571 + c);
          Tensor16 x(h.type, uniform(rows * c, -6.0F, 6.0F, seed));
          std::mt19937 gen(seed + 1);
          std::vector<std::int64_t> labels(rn);
          for (auto& l : labels)
            l = static_cast<std::int64_t>(gen() % static_cast<std::uint32_t>(c));
          const std::vector<float> row_scale = uniform(rows, 0.0F, 2.0F, seed + 2);
          const math::SmoothedTargets q =
              smoothed ? math::torch_smoothing(0.1F, c) : math::SmoothedTargets{};
          const float scale = 0.25F, factor = 1.5F;
          const std::vector<float> xv = x.values();

          std::vector<float> want_loss(rn), want_lse(rn), want_dx(n);
          cpu().cross_entropy_forward(xv.data(), labels.data(), rows, c, q.on, q.off,
                                      want_loss.data(), want_lse.data());
          cpu().cross_entropy_backward(xv.data(), labels.data(), want_lse.data(), row_scale.data(),
                                       scale, &factor, rows, c, q.on, q.off, want_dx.data());

          std::vector<float> loss(rn, 3.0F), lse(rn, 3.0F);
          run(CrossEntropyForward{.x = x.data(),
                                  .labels = labels.data(),
                                  .loss = loss.data(),
                                  .lse = lse.data(),
                                  .rows = rows,
                                  .c = c,
                                  .targets = q,
                                  .type = h.type});
          EXPECT_TRUE(close(lse, want_lse, 1e-5F, 1e-6F));  // f32 outputs
          EXPECT_TRUE(close(loss, want_loss, 1e-5F, 1e-5F));
          // In place over the logits.
          run(CrossEntropyBackward{.x = x.data(),
                                   .labels = labels.data(),
                                   .lse = want_lse.data(),
                                   .row_scale = row_scale.data(),
                                   .scale_factor = &factor,
                                   .scale = scale,
                                   .dx = x.data(),
                                   .rows = rows,
                                   .c = c,
                                   .targets = q,
                                   .type = h.type});
          EXPECT_TRUE(close16(h, x, want_dx, 1e-7F, 1e-5F));
        }
      }
    }
  }
}

struct UnaryCase {
  UnaryOp op;
  float scalar;
  bool positive;  // inputs in (0.1, 4)
};

constexpr UnaryCase kUnaryCases[] = {
    {UnaryOp::neg, 0.0F, false},        {UnaryOp::exp, 0.0F, false},
    {UnaryOp::log, 0.0F, true},         {UnaryOp::sqrt, 0.0F, true},
    {UnaryOp::rsqrt, 0.0F, true},       {UnaryOp::relu, 0.0F, false},
    {UnaryOp::gelu, 0.0F, false},       {UnaryOp::gelu_tanh, 0.0F, false},
    {UnaryOp::tanh, 0.0F, false},       {UnaryOp::sigmoid, 0.0F, false},
    {UnaryOp::add_scalar, 1.5F, false}, {UnaryOp::mul_scalar, -0.75F, false},
    {UnaryOp::pow_scalar, 2.0F, false}, {UnaryOp::pow_scalar, 3.0F, false},
    {UnaryOp::pow_scalar, 0.5F, true},  {UnaryOp::pow_scalar, 1.7F, true},
};

// exp, tanh and the activations: the CPU's SIMD polynomials, a few f32 ulps.
constexpr float kTransAbs = 1e-6F, kTransRel = 1e-5F;

TEST(KernelHalfIo, Unary) {
  for (const Half& h : kHalves) {
    for (const std::int64_t n : {1, 33, 1000}) {
      for (const UnaryCase& c : kUnaryCases) {
        SCOPED_TRACE(::testing::Message() << h.name << " n " << n << " op "
                                          << static_cast<int>(c.op) << " scalar " << c.scalar);
        const auto seed = static_cast<std::uint32_t>(n * 31 + static_cast<int>(c.op));
        std::vector<float> xf =
            c.positive ? uniform(n, 0.1F, 4.0F, seed) : uniform(n, -4.0F, 4.0F, seed);
        if (!c.positive && n > 3) {  // signed zeros and a NaN
          xf[0] = 0.0F;
          xf[1] = -0.0F;
          xf[2] = NAN;
        }
        Tensor16 x(h.type, xf);
        Tensor16 g(h.type, uniform(n, -1.0F, 1.0F, seed + 1));
        const auto size = static_cast<std::size_t>(n);
        const auto bop = static_cast<backend::Unary>(c.op);
        const std::vector<float> xv = x.values(), gv = g.values();
        std::vector<float> want_y(size), want_dx(size);
        cpu().unary(bop, xv.data(), want_y.data(), n, c.scalar);
        Tensor16 y16(h.type, want_y);  // the backward reads the rounded forward output
        cpu().unary_backward(bop, gv.data(), xv.data(), y16.values().data(), want_dx.data(), n,
                             c.scalar);
        Tensor16 y(h.type, std::vector<float>(size, 7.0F)), dx(h.type, y.values());
        run(UnaryForward{
            .op = c.op, .x = x.data(), .y = y.data(), .n = n, .scalar = c.scalar, .type = h.type});
        run(UnaryBackward{.op = c.op,
                          .g = g.data(),
                          .x = x.data(),
                          .y = y16.data(),
                          .dx = dx.data(),
                          .n = n,
                          .scalar = c.scalar,
                          .type = h.type});
        EXPECT_TRUE(close16(h, y, want_y, kTransAbs, kTransRel));
        EXPECT_TRUE(close16(h, dx, want_dx, kTransAbs, kTransRel));
      }
    }
  }
}

TEST(KernelHalfIo, BinaryBroadcast) {
  struct Case {
    Shape shape;
    Strides a, b;
  };
  const Case cases[] = {
      {{1000}, {1}, {1}},
      {{5, 37}, {37, 1}, {0, 1}},
      {{3, 7, 11}, {1, 3, 21}, {77, 11, 1}},
      {{1}, {0}, {0}},
  };
  for (const Half& h : kHalves) {
    for (const Case& c : cases) {
      const std::int64_t n = shape_numel(c.shape);
      std::int64_t a_span = 1, b_span = 1;
      for (std::size_t d = 0; d < c.shape.size(); ++d) {
        a_span += (c.shape[d] - 1) * c.a[d];
        b_span += (c.shape[d] - 1) * c.b[d];
      }
      Tensor16 a(h.type, uniform(a_span, -3.0F, 3.0F, 5));
      Tensor16 b(h.type, uniform(b_span, 0.5F, 3.0F, 6));
      const std::vector<float> av = a.values(), bv = b.values();
      const Strides out_strides = contiguous_strides(c.shape);
      const auto plan = backend::make_strided_plan<3>(c.shape, {&out_strides, &c.a, &c.b});
      for (const BinaryOp op : {BinaryOp::add, BinaryOp::sub, BinaryOp::mul, BinaryOp::div}) {
        SCOPED_TRACE(::testing::Message()
                     << h.name << " " << to_string(c.shape) << " op " << static_cast<int>(op));
        std::vector<float> want(static_cast<std::size_t>(n));
        cpu().binary(static_cast<backend::Binary>(op), plan, av.data(), bv.data(), want.data());
        Tensor16 got(h.type, std::vector<float>(want.size(), 9.0F));
        BinaryKernel k{.op = op,
                       .ndim = plan.ndim,
                       .a = a.data(),
                       .b = b.data(),
                       .out = got.data(),
                       .type = h.type};
        for (int d = 0; d < plan.ndim; ++d) {
          k.shape[d] = plan.shape[d];
          for (int o = 0; o < 3; ++o) k.strides[o][d] = plan.strides[o][d];
        }
        run(k);
        // The same f32 value, rounded once: bit-equal.
        EXPECT_TRUE(bit_equal(got.bits, Tensor16(h.type, want).bits));
      }
    }
  }
}

TEST(KernelHalfIo, BiasActivation) {
  constexpr Activation kActs[] = {Activation::none, Activation::relu, Activation::gelu,
                                  Activation::tanh, Activation::sigmoid};
  for (const Half& h : kHalves) {
    for (const std::int64_t rows : {1, 3, 37}) {
      for (const std::int64_t cols : {1, 33, 100}) {
        for (const Activation act : kActs) {
          SCOPED_TRACE(::testing::Message()
                       << h.name << " " << rows << "x" << cols << " act " << static_cast<int>(act));
          const auto n = static_cast<std::size_t>(rows * cols);
          Tensor16 y(h.type, uniform(rows * cols, -3.0F, 3.0F, 11));
          const std::vector<float> bias = uniform(cols, -1.0F, 1.0F, 12);
          std::vector<float> want = y.values(), want_pre(n, 5.0F);
          cpu().bias_activation(want.data(), want_pre.data(), bias.data(), rows, cols, act);
          Tensor16 pre(h.type, std::vector<float>(n, 5.0F));
          run(BiasActivation{.y = y.data(),
                             .pre = pre.data(),
                             .bias = bias.data(),
                             .rows = rows,
                             .cols = cols,
                             .activation = act,
                             .type = h.type});
          EXPECT_TRUE(bit_equal(pre.bits, Tensor16(h.type, want_pre).bits));  // y + bias, rounded
          EXPECT_TRUE(close16(h, y, want, kTransAbs, kTransRel));
        }
      }
    }
  }
}

}  // namespace
}  // namespace rig::kernels::test
