// CPU kernels behind the fused paths: the oneDNN GEMM panels (alpha, beta,
// transposes, leading dimensions wider than the matrix) and gemm_pair
// against a double loop, linear's backward epilogue (activation_backward)
// against a scalar loop, and ops::adam_update against a scalar
// double-precision Adam, the same at every thread count and SIMD width.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "cpu/elementwise.hpp"
#include "cpu/gemm.hpp"
#include "cpu/parallel.hpp"
#include "cpu/simd.hpp"
#include "rig/half.hpp"
#include "rig/ops.hpp"

namespace {

using rig::Tensor;

std::vector<float> random_floats(std::size_t n, std::mt19937& rng, float low = -1.0F,
                                 float high = 1.0F) {
  std::uniform_real_distribution<float> dist(low, high);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

// C = alpha op(A) op(B) + beta C over leading dimensions lda / ldb / ldc.
TEST(CpuFusedKernels, GemmAlphaBetaAndLeadingDimensions) {
  std::mt19937 rng(3);
  // 96 x 200 x 150 takes the oneDNN panels; 9 x 7 x 5 stays on OpenBLAS;
  // 576 x 64 x 456 with A transposed and beta 0 or 1 is computed as its
  // transpose and copied (or added) back.
  for (const auto& [m, n, k] :
       std::vector<std::array<std::int64_t, 3>>{{96, 200, 150}, {9, 7, 5}, {576, 64, 456}}) {
    for (bool ta : {false, true}) {
      for (bool tb : {false, true}) {
        for (const auto& [alpha, beta] :
             std::vector<std::pair<float, float>>{{1.0F, 0.0F}, {0.5F, 1.0F}, {-2.0F, 0.25F}}) {
          const std::int64_t lda = (ta ? m : k) + 3, ldb = (tb ? k : n) + 5, ldc = n + 2;
          const auto a = random_floats(static_cast<std::size_t>((ta ? k : m) * lda), rng);
          const auto b = random_floats(static_cast<std::size_t>((tb ? n : k) * ldb), rng);
          auto c = random_floats(static_cast<std::size_t>(m * ldc), rng);
          std::vector<double> expected(c.begin(), c.end());
          for (std::int64_t i = 0; i < m; ++i) {
            for (std::int64_t j = 0; j < n; ++j) {
              double s = 0.0;
              for (std::int64_t p = 0; p < k; ++p) {
                s += static_cast<double>(ta ? a[p * lda + i] : a[i * lda + p]) *
                     (tb ? b[j * ldb + p] : b[p * ldb + j]);
              }
              expected[i * ldc + j] = alpha * s + beta * expected[i * ldc + j];
            }
          }
          rig::cpu::gemm(m, n, k, alpha, {a.data(), lda, ta}, {b.data(), ldb, tb}, beta, c.data(),
                         ldc, rig::cpu::GemmPrecision::f32);
          double worst = 0.0;
          for (std::size_t i = 0; i < c.size(); ++i) {
            worst = std::max(worst, std::abs(c[i] - expected[i]));  // padding too: untouched
          }
          EXPECT_LT(worst, 1e-4) << m << "x" << n << "x" << k << " ta " << ta << " tb " << tb
                                 << " alpha " << alpha << " beta " << beta;
        }
      }
    }
  }
}

// C = op(A) op(B) in double, for gemm_pair's products (alpha 1, beta 0).
std::vector<double> reference_product(const rig::cpu::GemmProduct& p) {
  std::vector<double> c(static_cast<std::size_t>(p.m * p.n));
  for (std::int64_t i = 0; i < p.m; ++i) {
    for (std::int64_t j = 0; j < p.n; ++j) {
      double s = 0.0;
      for (std::int64_t q = 0; q < p.k; ++q) {
        s += static_cast<double>(p.a.trans ? p.a.data[q * p.a.ld + i] : p.a.data[i * p.a.ld + q]) *
             (p.b.trans ? p.b.data[j * p.b.ld + q] : p.b.data[q * p.b.ld + j]);
      }
      c[static_cast<std::size_t>(i * p.n + j)] = s;
    }
  }
  return c;
}

// A linear layer's dX and dW computed together, at 1, 2 and 3 threads (each
// product whole on its own thread, split over half the pool, or one after
// the other), equal the double loop.
TEST(CpuFusedKernels, GemmPairComputesBothProducts) {
  std::mt19937 rng(5);
  const std::int64_t rows = 160, in = 96, out = 272;
  const auto dz = random_floats(static_cast<std::size_t>(rows * out), rng);
  const auto w = random_floats(static_cast<std::size_t>(out * in), rng);
  const auto x = random_floats(static_cast<std::size_t>(rows * in), rng);
  std::vector<float> dx(static_cast<std::size_t>(rows * in)),
      dw(static_cast<std::size_t>(out * in));
  const rig::cpu::GemmProduct dx_product{
      rows, in, out, 1.0F, {dz.data(), out, false}, {w.data(), in, false}, 0.0F, dx.data(), in};
  const rig::cpu::GemmProduct dw_product{
      out, in, rows, 1.0F, {dz.data(), out, true}, {x.data(), in, false}, 0.0F, dw.data(), in};
  const auto expected_dx = reference_product(dx_product);
  const auto expected_dw = reference_product(dw_product);
  const int threads = rig::cpu::num_threads();
  for (int t : {1, 2, 3}) {
    rig::cpu::set_num_threads(t);
    std::fill(dx.begin(), dx.end(), 7.0F);
    std::fill(dw.begin(), dw.end(), 7.0F);
    rig::cpu::gemm_pair(dx_product, dw_product, rig::cpu::GemmPrecision::f32);
    double worst = 0.0;
    for (std::size_t i = 0; i < dx.size(); ++i)
      worst = std::max(worst, std::abs(dx[i] - expected_dx[i]));
    for (std::size_t i = 0; i < dw.size(); ++i)
      worst = std::max(worst, std::abs(dw[i] - expected_dw[i]));
    EXPECT_LT(worst, 1e-4) << t << " threads";
  }
  rig::cpu::set_num_threads(threads);
}

TEST(CpuFusedKernels, ActivationBackwardMatchesAScalarLoopAtEveryThreadCount) {
  // dz = g * act'(saved) and db = column sums of dz, written as f32 or only
  // rounded to bf16; rows span several 64-row blocks plus a partial one, and
  // columns a partial 64-column chunk. db must be the same bits at every
  // thread count (fixed row blocks, reduced in order).
  using rig::ops::Activation;
  std::mt19937 rng(9);
  const std::int64_t rows = 200, cols = 150;
  const auto g = random_floats(static_cast<std::size_t>(rows * cols), rng);
  const auto saved = random_floats(static_cast<std::size_t>(rows * cols), rng, -0.2F, 1.0F);
  const float scale = 1.0F / 0.9F;
  const auto derivative = [&](Activation act, float gv, float s) -> double {
    switch (act) {
      case Activation::none:
        return gv;
      case Activation::relu:
        return s > 0.0F ? gv * scale : 0.0;
      case Activation::tanh:
        return gv * (1.0F - s * s);
      case Activation::sigmoid:
        return gv * s * (1.0F - s);
      case Activation::gelu:
        break;
    }
    return 0.0;
  };
  const int threads = rig::cpu::num_threads();
  for (const Activation act :
       {Activation::none, Activation::relu, Activation::tanh, Activation::sigmoid}) {
    std::vector<double> dz(static_cast<std::size_t>(rows * cols)),
        db(static_cast<std::size_t>(cols));
    for (std::size_t i = 0; i < dz.size(); ++i) {
      dz[i] = derivative(act, g[i], saved[i]);
      db[i % static_cast<std::size_t>(cols)] += dz[i];
    }
    std::vector<float> first_db;
    for (int t : {1, 2, 3}) {
      rig::cpu::set_num_threads(t);
      for (const bool bf16 : {false, true}) {
        std::vector<float> out(dz.size(), 7.0F), bias(static_cast<std::size_t>(cols), 7.0F);
        std::vector<std::uint16_t> out_bf16(dz.size(), 0);
        if (bf16) {
          rig::cpu::activation_backward_bf16(act, g.data(), saved.data(), out_bf16.data(),
                                             bias.data(), rows, cols, scale);
        } else {
          rig::cpu::activation_backward(act, g.data(), saved.data(), out.data(), bias.data(), rows,
                                        cols, scale);
        }
        double worst_dz = 0.0, worst_db = 0.0;
        for (std::size_t i = 0; i < dz.size(); ++i) {
          if (bf16) {
            // Exactly the rounding of the f32 value.
            const auto expected = rig::float_to_bfloat16_bits(static_cast<float>(dz[i]));
            worst_dz = std::max(worst_dz, out_bf16[i] == expected ? 0.0 : 1.0);
          } else if (act != Activation::none) {
            worst_dz = std::max(worst_dz, std::abs(out[i] - dz[i]));
          }
        }
        for (std::size_t c = 0; c < db.size(); ++c) {
          worst_db = std::max(worst_db, std::abs(bias[c] - db[c]));
        }
        EXPECT_LT(worst_dz, 1e-6) << static_cast<int>(act) << ", " << t << " threads, bf16 "
                                  << bf16;
        EXPECT_LT(worst_db, 1e-4) << static_cast<int>(act) << ", " << t << " threads, bf16 "
                                  << bf16;
        if (first_db.empty()) first_db = bias;
        EXPECT_EQ(bias, first_db) << "db differs with " << t << " threads";
      }
    }
  }
  rig::cpu::set_num_threads(threads);
}

struct AdamCase {
  bool amsgrad;
  float coupled_decay, shrink;
};

TEST(CpuFusedKernels, AdamUpdateMatchesScalarAdamAtEveryThreadCountAndWidth) {
  std::mt19937 rng(5);
  const std::int64_t n = 100'003;  // several tasks and a partial vector at the end
  const auto p0 = random_floats(n, rng), g = random_floats(n, rng);
  const auto m0 = random_floats(n, rng, -0.1F, 0.1F), v0 = random_floats(n, rng, 0.0F, 0.01F);
  const auto x0 = random_floats(n, rng, 0.0F, 0.02F);
  rig::ops::AdamUpdate u;
  u.beta1 = 0.9F;
  u.beta2 = 0.997F;
  u.epsilon = 1e-9F;
  u.step_size = 1e-3F;
  u.inv_bc2_sqrt = 3.0F;
  for (const AdamCase& c :
       {AdamCase{false, 0.0F, 1.0F}, AdamCase{true, 0.01F, 1.0F}, AdamCase{false, 0.0F, 0.999F}}) {
    u.coupled_decay = c.coupled_decay;
    u.shrink = c.shrink;
    std::vector<std::vector<float>> results;
    const int threads = rig::cpu::num_threads();
    const int width = rig::cpu::simd::simd_width();
    for (const auto& [t, w] : std::vector<std::pair<int, int>>{{1, 16}, {2, 16}, {2, 8}, {3, 4}}) {
      rig::cpu::set_num_threads(t);
      rig::cpu::simd::set_simd_width(w);
      Tensor p = Tensor::from_vector(p0, {n}), grad = Tensor::from_vector(g, {n});
      Tensor m = Tensor::from_vector(m0, {n}), v = Tensor::from_vector(v0, {n});
      Tensor vmax = c.amsgrad ? Tensor::from_vector(x0, {n}) : Tensor();
      rig::ops::adam_update(p, grad, m, v, vmax, u);
      const auto pv = p.to_vector(), mv = m.to_vector(), vv = v.to_vector();
      const auto xv = c.amsgrad ? vmax.to_vector() : std::vector<float>();
      double worst = 0.0;
      for (std::int64_t i = 0; i < n; ++i) {
        const double pi = static_cast<double>(p0[i]) * c.shrink;
        const double gi = g[i] + static_cast<double>(c.coupled_decay) * pi;
        const double mi = u.beta1 * static_cast<double>(m0[i]) + (1.0 - u.beta1) * gi;
        const double vi = u.beta2 * static_cast<double>(v0[i]) + (1.0 - u.beta2) * gi * gi;
        const double di = c.amsgrad ? std::max<double>(x0[i], vi) : vi;
        const double expected =
            pi - u.step_size * mi / (std::sqrt(di) * u.inv_bc2_sqrt + u.epsilon);
        worst = std::max({worst, std::abs(pv[i] - expected) / (1e-6 + std::abs(expected)),
                          std::abs(mv[i] - mi), std::abs(vv[i] - vi)});
        if (c.amsgrad) worst = std::max(worst, std::abs(xv[i] - di));
      }
      EXPECT_LT(worst, 1e-5) << "threads " << t << " width " << w << " amsgrad " << c.amsgrad;
      results.push_back(pv);
    }
    rig::cpu::set_num_threads(threads);
    rig::cpu::simd::set_simd_width(width);
    // The thread count never changes a bit; widths 16 and 8 both use FMA.
    EXPECT_EQ(results[0], results[1]);
    EXPECT_EQ(results[1], results[2]);
  }
}

TEST(CpuFusedKernels, AdamUpdateRefusesMismatchedBuffers) {
  Tensor p = Tensor::zeros({10}), g = Tensor::zeros({10}), m = Tensor::zeros({10});
  Tensor short_v = Tensor::zeros({9}), none;
  try {
    rig::ops::adam_update(p, g, m, short_v, none, {});
    FAIL() << "no exception";
  } catch (const std::invalid_argument& e) {
    EXPECT_STREQ(e.what(), "adam_update: exp_avg_sq must be contiguous with 10 elements, got [9]");
  }
}

// Mixed precision folded into the update (ops::MixedPrecisionStep): the
// 16-bit gradients read times the unscale and the new values written rounded
// give, bit for bit, the update of the f32 masters unscaling writes and the
// cast after it, over several tasks and blocks; so do the statistics.
TEST(CpuFusedKernels, MixedPrecisionStepHasTheBitsOfTheSeparatePasses) {
  std::mt19937 rng(9);
  const std::int64_t n = 100'003;
  const auto p0 = random_floats(n, rng), g = random_floats(n, rng, -1000.0F, 1000.0F);
  const auto m0 = random_floats(n, rng, -0.1F, 0.1F), v0 = random_floats(n, rng, 0.0F, 0.01F);
  const float unscale = 1.0F / 3000.0F;
  for (const rig::DType dtype : {rig::DType::bf16, rig::DType::f16}) {
    SCOPED_TRACE(rig::dtype_name(dtype));
    const Tensor g16 = Tensor::from_vector(g, {n}).to(dtype);
    const Tensor master = rig::ops::mul_scalar(g16.to(rig::DType::f32), unscale);
    rig::ops::AdamUpdate u;
    u.step_size = 1e-3F;
    u.inv_bc2_sqrt = 3.0F;
    u.coupled_decay = 0.01F;
    Tensor p = Tensor::from_vector(p0, {n}), m = Tensor::from_vector(m0, {n});
    Tensor v = Tensor::from_vector(v0, {n}), none;
    rig::ops::adam_update(p, master, m, v, none, u);
    Tensor fp = Tensor::from_vector(p0, {n}), fm = Tensor::from_vector(m0, {n});
    Tensor fv = Tensor::from_vector(v0, {n});
    rig::MixedPrecisionStep mixed{g16, unscale, Tensor::zeros({n}, dtype)};
    rig::ops::adam_update(fp, Tensor::zeros({n}), fm, fv, none, u, mixed);
    EXPECT_EQ(fp.to_vector(), p.to_vector());
    EXPECT_EQ(fm.to_vector(), m.to_vector());
    EXPECT_EQ(fv.to_vector(), v.to_vector());
    EXPECT_EQ(mixed.publish.to(rig::DType::f32).to_vector(),
              p.to(dtype).to(rig::DType::f32).to_vector());

    Tensor sp = Tensor::from_vector(p0, {n}), sb = Tensor::from_vector(m0, {n});
    const rig::ops::SgdUpdate s{0.1F, 1e-4F, 0.9F, true, false};
    rig::ops::sgd_update(sp, master, sb, s);
    Tensor fsp = Tensor::from_vector(p0, {n}), fsb = Tensor::from_vector(m0, {n});
    rig::ops::sgd_update(fsp, Tensor::zeros({n}), fsb, s, mixed);
    EXPECT_EQ(fsp.to_vector(), sp.to_vector());
    EXPECT_EQ(fsb.to_vector(), sb.to_vector());
    EXPECT_EQ(mixed.publish.to(rig::DType::f32).to_vector(),
              sp.to(dtype).to(rig::DType::f32).to_vector());

    const rig::GradientStats want = rig::ops::gradient_stats(master);
    const rig::GradientStats got = rig::ops::gradient_stats(g16, {}, unscale);
    EXPECT_EQ(got.norm, want.norm);
    EXPECT_EQ(got.amax, want.amax);
  }
}

TEST(CpuFusedKernels, MixedPrecisionStepRefusesWrongBuffers) {
  Tensor p = Tensor::zeros({10}), g = Tensor::zeros({10}), m = Tensor::zeros({10});
  Tensor v = Tensor::zeros({10}), none;
  const auto refused = [&](const rig::MixedPrecisionStep& mixed, const char* message) {
    try {
      rig::ops::adam_update(p, g, m, v, none, {}, mixed);
      ADD_FAILURE() << "no exception for " << message;
    } catch (const std::invalid_argument& e) {
      EXPECT_STREQ(e.what(), message);
    }
  };
  refused({Tensor::zeros({10}), 1.0F, {}},
          "adam_update: mixed.grads16 must be f16 or bf16, got f32 [10]");
  refused({Tensor::zeros({9}, rig::DType::bf16), 1.0F, {}},
          "adam_update: mixed.grads16 must be contiguous with 10 elements, got [9]");
  refused({{}, 1.0F, Tensor::zeros({10})},
          "adam_update: mixed.publish must be f16 or bf16, got f32 [10]");
}

}  // namespace
