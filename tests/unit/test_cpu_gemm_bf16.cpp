// GEMMs at bfloat16 precision (cpu::gemm's GemmPrecision::bf16, which the ops
// pass inside an ops::MatmulPrecisionScope): every product must
// equal the f32 product of its operands rounded to bfloat16 (nearest even),
// up to f32 summation error, and differ from the unrounded product by the
// rounding's own error, on every path: oneDNN's bf16 panels, the rounded-f32
// fallback for small products, the tall transposed product, gemm_pair with a
// shared operand, and batched products, at one and two threads; and the
// attention's small in-cache products (cpu/small_gemm_bf16.hpp), whose
// AVX512_BF16 kernel must give the portable kernel's bits.
#include <gtest/gtest.h>

#include <array>
#include <bit>
#include <cmath>
#include <cstdint>
#include <iostream>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "cpu/gemm.hpp"
#include "cpu/gemm_dnnl.hpp"
#include "cpu/parallel.hpp"
#include "cpu/small_gemm_bf16.hpp"
#include "golden.hpp"
#include "rig/ops.hpp"

namespace {

using rig::cpu::GemmOperand;
using rig::cpu::GemmPrecision;
using rig::cpu::GemmProduct;
using rig_test::tensors_close;

// Round to nearest even, written independently of cpu/half.hpp.
float to_bf16(float x) {
  const std::uint32_t bits = std::bit_cast<std::uint32_t>(x);
  const std::uint32_t lsb = (bits >> 16U) & 1U;
  return std::bit_cast<float>((bits + 0x7FFFU + lsb) & 0xFFFF0000U);
}

// Sets the CPU pool's thread count for a scope and restores it afterwards.
class ThreadsScope {
 public:
  explicit ThreadsScope(int threads) : saved_(rig::cpu::num_threads()) {
    rig::cpu::set_num_threads(threads);
  }
  ~ThreadsScope() { rig::cpu::set_num_threads(saved_); }
  ThreadsScope(const ThreadsScope&) = delete;
  ThreadsScope& operator=(const ThreadsScope&) = delete;

 private:
  int saved_;
};
using PrecisionScope = rig::ops::MatmulPrecisionScope;
constexpr GemmPrecision kBf16 = GemmPrecision::bf16;

// A product's data with padded leading dimensions, and its reference results.
struct Case {
  std::int64_t m, n, k;
  bool ta, tb;
  float alpha, beta;
  std::int64_t lda, ldb, ldc;
  std::vector<float> a, b, c0;

  Case(std::int64_t m_, std::int64_t n_, std::int64_t k_, bool ta_, bool tb_, float alpha_,
       float beta_, std::mt19937& rng)
      : m(m_), n(n_), k(k_), ta(ta_), tb(tb_), alpha(alpha_), beta(beta_) {
    lda = (ta ? m : k) + 3;
    ldb = (tb ? k : n) + 1;
    ldc = n + 2;
    std::uniform_real_distribution<float> dist(-1.0F, 1.0F);
    a.resize(static_cast<std::size_t>((ta ? k : m) * lda));
    b.resize(static_cast<std::size_t>((tb ? n : k) * ldb));
    c0.resize(static_cast<std::size_t>(m * ldc));
    for (auto* v : {&a, &b, &c0}) {
      for (float& x : *v) x = dist(rng);
    }
  }
  float at_a(std::int64_t i, std::int64_t p) const { return ta ? a[p * lda + i] : a[i * lda + p]; }
  float at_b(std::int64_t p, std::int64_t j) const { return tb ? b[j * ldb + p] : b[p * ldb + j]; }

  // alpha op(A) op(B) + beta C0 in double, operands rounded or not; `scale`
  // gets alpha * sum |a b| + |beta c0| per element, the size of f32's error.
  std::vector<double> reference(bool rounded, std::vector<double>* scale = nullptr) const {
    std::vector<double> out(c0.begin(), c0.end());
    if (scale) scale->assign(out.size(), 0.0);
    for (std::int64_t i = 0; i < m; ++i) {
      for (std::int64_t j = 0; j < n; ++j) {
        double s = 0.0, s_abs = 0.0;
        for (std::int64_t p = 0; p < k; ++p) {
          const double x = rounded ? to_bf16(at_a(i, p)) : at_a(i, p);
          const double y = rounded ? to_bf16(at_b(p, j)) : at_b(p, j);
          s += x * y;
          s_abs += std::abs(x * y);
        }
        const std::size_t at = static_cast<std::size_t>(i * ldc + j);
        if (scale) (*scale)[at] = std::abs(alpha) * s_abs + std::abs(beta * out[at]);
        out[at] = alpha * s + beta * out[at];
      }
    }
    return out;
  }

  GemmProduct product(std::vector<float>& c) const {
    return {m, n, k, alpha, {a.data(), lda, ta}, {b.data(), ldb, tb}, beta, c.data(), ldc};
  }
};

// c must match the rounded reference to f32 accuracy, untouched padding
// included, and must be measurably off the unrounded one.
void expect_bf16_product(const Case& t, const std::vector<float>& c, const std::string& what) {
  std::vector<double> scale;
  const std::vector<double> rounded = t.reference(true, &scale);
  const std::vector<double> exact = t.reference(false);
  double worst = 0.0, off_exact = 0.0;
  for (std::size_t i = 0; i < c.size(); ++i) {
    // f32 accumulation: at most ~k ulps of the absolute sum, far less in practice.
    const double tolerance = 1e-6 * static_cast<double>(t.k) * scale[i] + 1e-7;
    worst = std::max(worst, std::abs(c[i] - rounded[i]) / tolerance);
    off_exact = std::max(off_exact, std::abs(c[i] - exact[i]));
  }
  EXPECT_LE(worst, 1.0) << what << ": not the product of the bf16-rounded operands";
  // bf16 keeps 8 significant bits: products of uniform(-1, 1) data move by ~1e-3.
  EXPECT_GT(off_exact, 1e-4) << what << ": the operands were not rounded to bf16";
}

std::string describe(const Case& t, int threads) {
  return std::to_string(t.m) + "x" + std::to_string(t.n) + "x" + std::to_string(t.k) +
         (t.ta ? " A^T" : "") + (t.tb ? " B^T" : "") + " alpha " + std::to_string(t.alpha) +
         " beta " + std::to_string(t.beta) + " threads " + std::to_string(threads);
}

TEST(CpuGemmBf16, EveryProductIsThatOfTheRoundedOperands) {
  std::cout << "bf16 dot-product kernels: "
            << (rig::cpu::gemm_dnnl_bf16_available() ? "yes, oneDNN's bf16 matmul\n"
                                                     : "no, rounded operands through f32 GEMMs\n");
  std::mt19937 rng(11);
  // 96 x 200 x 150: oneDNN's bf16 panels (where the CPU has bf16 dot
  // products); 9 x 7 x 5: the rounded operands through OpenBLAS; 576 x 64 x
  // 456 with A^T: the tall product computed as its transpose.
  const std::vector<std::array<std::int64_t, 3>> shapes{{96, 200, 150}, {9, 7, 5}, {576, 64, 456}};
  for (int threads : {1, 2}) {
    const ThreadsScope scope(threads);
    for (const auto& [m, n, k] : shapes) {
      for (bool ta : {false, true}) {
        for (bool tb : {false, true}) {
          for (const auto& [alpha, beta] :
               std::vector<std::pair<float, float>>{{1.0F, 0.0F}, {-0.5F, 1.0F}}) {
            const Case t(m, n, k, ta, tb, alpha, beta, rng);
            std::vector<float> c = t.c0;
            rig::cpu::gemm(t.product(c), kBf16);
            expect_bf16_product(t, c, describe(t, threads));
          }
        }
      }
    }
  }
}

TEST(CpuGemmBf16, PairWithASharedOperandRoundsBoth) {
  // A linear layer's backward: dX = dY W and dW = dY^T X share dY.
  std::mt19937 rng(5);
  for (int threads : {1, 2, 3}) {
    const ThreadsScope scope(threads);
    const Case dx(256, 96, 128, false, false, 1.0F, 0.0F, rng);
    Case dw(128, 96, 256, true, false, 1.0F, 1.0F, rng);
    dw.a = dx.a;  // dY^T: the same buffer, read transposed
    dw.lda = dx.lda;
    std::vector<float> c1 = dx.c0, c2 = dw.c0;
    rig::cpu::gemm_pair(dx.product(c1), dw.product(c2), kBf16);
    expect_bf16_product(dx, c1, "dX of the pair, threads " + std::to_string(threads));
    expect_bf16_product(dw, c2, "dW of the pair, threads " + std::to_string(threads));
  }
}

TEST(CpuGemmBf16, BatchedProductsAreRoundedToo) {
  std::mt19937 rng(9);
  const std::int64_t batch = 6, m = 40, n = 48, k = 64;  // one oneDNN-sized product each
  for (int threads : {1, 2}) {
    const ThreadsScope scope(threads);
    std::vector<Case> cases;
    for (std::int64_t i = 0; i < batch; ++i)
      cases.emplace_back(m, n, k, false, true, 1.0F, 0.0F, rng);
    // Pack the batch contiguously: product i's A, B and C at i * (size).
    const std::int64_t a_size = static_cast<std::int64_t>(cases[0].a.size());
    const std::int64_t b_size = static_cast<std::int64_t>(cases[0].b.size());
    const std::int64_t c_size = static_cast<std::int64_t>(cases[0].c0.size());
    std::vector<float> a, b, c;
    for (const Case& t : cases) {
      a.insert(a.end(), t.a.begin(), t.a.end());
      b.insert(b.end(), t.b.begin(), t.b.end());
      c.insert(c.end(), t.c0.begin(), t.c0.end());
    }
    rig::cpu::GemmBatchOffsets offsets;
    offsets.ndim = 1;
    offsets.shape[0] = batch;
    offsets.a_strides[0] = a_size;
    offsets.b_strides[0] = b_size;
    rig::cpu::gemm_batched(batch, m, n, k, 1.0F, {a.data(), cases[0].lda, false},
                           {b.data(), cases[0].ldb, true}, offsets, 0.0F, c.data(), cases[0].ldc,
                           c_size, kBf16);
    for (std::int64_t i = 0; i < batch; ++i) {
      const std::vector<float> ci(c.begin() + i * c_size, c.begin() + (i + 1) * c_size);
      expect_bf16_product(
          cases[static_cast<std::size_t>(i)], ci,
          "batch item " + std::to_string(i) + ", threads " + std::to_string(threads));
    }
  }
}

TEST(CpuGemmBf16, PreRoundedOperandsAreUsedAsGiven) {
  // round_bf16's copy (densely packed, in the operand's stored orientation)
  // stands in for the f32 data (which may then be null), in large products
  // (the bf16 kernels) and small ones (widened to f32).
  std::mt19937 rng(4);
  for (const auto& [m, n, k] :
       std::vector<std::array<std::int64_t, 3>>{{96, 200, 150}, {9, 7, 5}}) {
    for (bool ta : {false, true}) {
      const Case t(m, n, k, ta, true, 1.0F, 0.5F, rng);
      std::vector<std::uint16_t> a(static_cast<std::size_t>(m * k));
      std::vector<std::uint16_t> b(static_cast<std::size_t>(k * n));
      rig::cpu::round_bf16({t.a.data(), t.lda, ta}, m, k, a.data());
      rig::cpu::round_bf16({t.b.data(), t.ldb, true}, k, n, b.data());
      // Stored [ta ? k : m, ta ? m : k], leading dimension its column count.
      std::vector<float> c = t.c0;
      rig::cpu::gemm(m, n, k, t.alpha, {nullptr, ta ? m : k, ta, a.data()},
                     {nullptr, k, true, b.data()}, t.beta, c.data(), t.ldc, kBf16);
      expect_bf16_product(t, c, describe(t, rig::cpu::num_threads()) + ", pre-rounded");
    }
  }
}

TEST(CpuGemmBf16, LinearComputesWithRoundedInputAndWeightBothWays) {
  // y = x W^T + b, dx = dy W, dW = dy^T x with x, W and dy rounded to bf16:
  // the same as a float32-precision linear layer given the rounded tensors.
  // dy is rounded beforehand (the upstream of sum(y * up) is up), so both
  // sides see the same numbers.
  std::mt19937 rng(8);
  std::uniform_real_distribution<float> dist(-1.0F, 1.0F);
  const auto random = [&](rig::Shape shape, bool round) {
    std::vector<float> v(static_cast<std::size_t>(rig::shape_numel(shape)));
    for (float& x : v) x = round ? to_bf16(dist(rng)) : dist(rng);
    return rig::Tensor::from_vector(v, shape);
  };
  const rig::Tensor x = random({2, 48, 200}, false), w = random({150, 200}, false);
  const rig::Tensor b = random({150}, false), up = random({2, 48, 150}, true);
  struct Result {
    rig::Tensor y, dx, dw, db;
  };
  const auto run = [&](const rig::Tensor& x0, const rig::Tensor& w0) {
    rig::Tensor xl = x0.clone(), wl = w0.clone(), bl = b.clone();
    for (rig::Tensor* t : {&xl, &wl, &bl}) t->set_requires_grad(true);
    const rig::Tensor y = rig::ops::linear(xl, wl, bl, rig::ops::Activation::none);
    rig::ops::sum(rig::ops::mul(y, up)).backward();
    return Result{y.detach(), xl.grad(), wl.grad(), bl.grad()};
  };
  const auto rounded = [](const rig::Tensor& t) {
    std::vector<float> v = t.to_vector();
    for (float& x : v) x = to_bf16(x);
    return rig::Tensor::from_vector(v, t.shape());
  };
  Result at_bf16;
  {
    const PrecisionScope bf16(rig::MatmulPrecision::bf16);
    at_bf16 = run(x, w);
  }
  const Result expected = run(rounded(x), rounded(w));
  const Result unrounded = run(x, w);
  EXPECT_TRUE(tensors_close(at_bf16.y, expected.y, 1e-5, 1e-4));
  EXPECT_TRUE(tensors_close(at_bf16.dx, expected.dx, 1e-5, 1e-4));
  EXPECT_TRUE(tensors_close(at_bf16.dw, expected.dw, 1e-5, 1e-4));
  EXPECT_TRUE(tensors_close(at_bf16.db, expected.db, 1e-6, 1e-6));
  EXPECT_FALSE(tensors_close(at_bf16.y, unrounded.y, 1e-5, 1e-4)) << "x and W were not rounded";
  EXPECT_FALSE(tensors_close(at_bf16.dw, unrounded.dw, 1e-5, 1e-4)) << "x was not rounded";
}

TEST(CpuGemmBf16, LinearRoundsItsActivationGradientOnce) {
  // With relu (and with a bias but no activation) linear's backward forms
  // dz = g * act'(y) itself and, at bf16 precision, writes it only rounded:
  // dx = round(dz) round(W), dW = round(dz)^T round(x), db = sum of the
  // unrounded dz. The upstream g is not bf16-representable here, so an
  // unrounded dz would move dx and dW by ~1e-3.
  std::mt19937 rng(11);
  std::uniform_real_distribution<float> dist(-1.0F, 1.0F);
  const std::int64_t rows = 70, in = 90, out = 130;  // the bf16 kernels' sizes, odd tails
  const auto random = [&](std::int64_t n) {
    std::vector<float> v(static_cast<std::size_t>(n));
    for (float& x : v) x = dist(rng);
    return v;
  };
  const std::vector<float> x = random(rows * in), w = random(out * in), b = random(out);
  const std::vector<float> up = random(rows * out);
  const auto at = [](const std::vector<float>& v, std::int64_t i) {
    return v[static_cast<std::size_t>(i)];
  };
  for (const auto activation : {rig::ops::Activation::relu, rig::ops::Activation::none}) {
    rig::Tensor xl = rig::Tensor::from_vector(x, {rows, in});
    rig::Tensor wl = rig::Tensor::from_vector(w, {out, in});
    rig::Tensor bl = rig::Tensor::from_vector(b, {out});
    for (rig::Tensor* t : {&xl, &wl, &bl}) t->set_requires_grad(true);
    {
      const PrecisionScope bf16(rig::MatmulPrecision::bf16);
      const rig::Tensor y = rig::ops::linear(xl, wl, bl, activation);
      rig::ops::sum(rig::ops::mul(y, rig::Tensor::from_vector(up, {rows, out}))).backward();
      const std::vector<float> yv = y.to_vector();
      // The reference in double from the rounded operands and the y rig gave.
      std::vector<double> dz(static_cast<std::size_t>(rows * out));
      std::vector<double> db(static_cast<std::size_t>(out), 0.0);
      for (std::int64_t i = 0; i < rows * out; ++i) {
        const bool pass = activation == rig::ops::Activation::none || at(yv, i) > 0.0F;
        const float d = pass ? at(up, i) : 0.0F;
        db[static_cast<std::size_t>(i % out)] += d;
        dz[static_cast<std::size_t>(i)] = to_bf16(d);
      }
      // out[i, c] = sum over t of dz(i, t) * rounded operand (t, c), c < in.
      const auto reference = [&](std::int64_t out_rows, std::int64_t inner, auto dz_at,
                                 const std::vector<float>& operand) {
        std::vector<float> result(static_cast<std::size_t>(out_rows * in));
        for (std::int64_t i = 0; i < out_rows; ++i) {
          for (std::int64_t c = 0; c < in; ++c) {
            double sum = 0.0;
            for (std::int64_t t = 0; t < inner; ++t) {
              sum += dz_at(i, t) * to_bf16(at(operand, t * in + c));
            }
            result[static_cast<std::size_t>(i * in + c)] = static_cast<float>(sum);
          }
        }
        return result;
      };
      const auto dz_at = [&](std::int64_t r, std::int64_t o) {
        return dz[static_cast<std::size_t>(r * out + o)];
      };
      const std::vector<float> dx = reference(rows, out, dz_at, w);
      const std::vector<float> dw = reference(
          out, rows, [&](std::int64_t o, std::int64_t r) { return dz_at(r, o); }, x);
      const std::vector<float> dbf(db.begin(), db.end());
      const std::string what = activation == rig::ops::Activation::relu ? "relu" : "none + bias";
      EXPECT_TRUE(tensors_close(xl.grad(), rig::Tensor::from_vector(dx, {rows, in}), 1e-5, 1e-5))
          << what << ": dx is not round(dz) round(W)";
      EXPECT_TRUE(tensors_close(wl.grad(), rig::Tensor::from_vector(dw, {out, in}), 1e-5, 1e-5))
          << what << ": dW is not round(dz)^T round(x)";
      EXPECT_TRUE(tensors_close(bl.grad(), rig::Tensor::from_vector(dbf, {out}), 1e-5, 1e-5))
          << what << ": db is not the sum of the unrounded dz";
    }
  }
}

TEST(CpuGemmBf16, LinearOnBf16TensorsGivesTheBitsOfItsFloat32Copies) {
  // bf16 x and W go to the products as they are (no f32 copies): y and every
  // gradient equal, bit for bit, those of f32 tensors holding the same
  // values, rounded to the inputs' dtypes.
  std::mt19937 rng(12);
  std::uniform_real_distribution<float> dist(-1.0F, 1.0F);
  const auto random = [&](rig::Shape shape) {
    std::vector<float> v(static_cast<std::size_t>(rig::shape_numel(shape)));
    for (float& x : v) x = to_bf16(dist(rng));
    return rig::Tensor::from_vector(v, shape);
  };
  const rig::Tensor x = random({3, 17, 40}), w = random({50, 40}), b = random({50});
  const rig::Tensor up = random({3, 17, 50}).to(rig::DType::bf16);
  const PrecisionScope bf16(rig::MatmulPrecision::bf16);
  for (const auto activation :
       {rig::ops::Activation::none, rig::ops::Activation::relu, rig::ops::Activation::gelu}) {
    for (const rig::DType bias_dtype : {rig::DType::bf16, rig::DType::f32}) {
      SCOPED_TRACE(::testing::Message() << "activation " << static_cast<int>(activation) << " bias "
                                        << rig::dtype_name(bias_dtype));
      const auto leaf = [](const rig::Tensor& t, rig::DType dtype) {
        rig::Tensor l = t.detach().clone().to(dtype);
        l.set_requires_grad(true);
        return l;
      };
      rig::Tensor x16 = leaf(x, rig::DType::bf16), w16 = leaf(w, rig::DType::bf16);
      rig::Tensor b16 = leaf(b, bias_dtype);
      const rig::Tensor y16 = rig::ops::linear(x16, w16, b16, activation);
      rig::ops::sum(rig::ops::mul(y16, up)).backward();
      rig::Tensor x32 = leaf(x, rig::DType::f32), w32 = leaf(w, rig::DType::f32);
      rig::Tensor b32 = leaf(b, rig::DType::f32);
      const rig::Tensor y32 = rig::ops::linear(x32, w32, b32, activation);
      rig::ops::sum(rig::ops::mul(y32.to(rig::DType::bf16), up)).backward();
      EXPECT_EQ(y16.dtype(), rig::DType::bf16);
      EXPECT_EQ(x16.grad().dtype(), rig::DType::bf16);
      EXPECT_EQ(b16.grad().dtype(), bias_dtype);
      const auto same = [](const rig::Tensor& got, const rig::Tensor& want) {
        return got.to(rig::DType::f32).to_vector() ==
               want.to(got.dtype()).to(rig::DType::f32).to_vector();
      };
      EXPECT_TRUE(same(y16.detach(), y32.detach())) << "y";
      EXPECT_TRUE(same(x16.grad(), x32.grad())) << "dx";
      EXPECT_TRUE(same(w16.grad(), w32.grad())) << "dW";
      EXPECT_TRUE(same(b16.grad(), b32.grad())) << "db";
    }
  }
}

TEST(CpuGemmBf16, Float32PrecisionLeavesOperandsAlone) {
  // The default: a product that bf16 rounding would visibly change is exact to f32.
  ASSERT_EQ(rig::ops::matmul_precision(), rig::MatmulPrecision::f32);
  std::mt19937 rng(2);
  const Case t(96, 200, 150, false, false, 1.0F, 0.0F, rng);
  std::vector<float> c = t.c0;
  rig::cpu::gemm(t.product(c), GemmPrecision::f32);
  const std::vector<double> exact = t.reference(false);
  double worst = 0.0;
  for (std::size_t i = 0; i < c.size(); ++i) worst = std::max(worst, std::abs(c[i] - exact[i]));
  EXPECT_LT(worst, 1e-4);
}

// ---- the attention's small products ----------------------------------------

using rig::cpu::SmallGemmKernel;

std::vector<float> small_product(const Case& t, SmallGemmKernel kernel) {
  std::vector<float> c = t.c0;
  std::vector<std::uint32_t> scratch(
      static_cast<std::size_t>(rig::cpu::small_gemm_bf16_scratch(t.m, t.n, t.k)));
  rig::cpu::small_gemm_bf16(t.m, t.n, t.k, t.alpha, {t.a.data(), t.lda, t.ta},
                            {t.b.data(), t.ldb, t.tb}, c.data(), t.ldc, scratch.data(), kernel);
  return c;
}

// The benchmark's per-head shapes (32 x 32 x 64, 32 x 64 x 32), odd sizes
// (odd k leaves a half-empty pair), one row, and more than 64 columns.
const std::vector<std::array<std::int64_t, 3>> kSmallShapes{{32, 32, 64}, {32, 64, 32}, {5, 7, 3},
                                                            {1, 33, 17},  {13, 70, 9},  {6, 16, 1}};

TEST(CpuSmallGemmBf16, PortableKernelIsTheProductOfTheRoundedOperands) {
  std::mt19937 rng(17);
  for (const auto& [m, n, k] : kSmallShapes) {
    for (bool ta : {false, true}) {
      for (bool tb : {false, true}) {
        const Case t(m, n, k, ta, tb, 0.125F, 0.0F, rng);
        const std::vector<float> c = small_product(t, SmallGemmKernel::portable);
        if (k > 1) {
          expect_bf16_product(t, c, "portable " + describe(t, 1));
        } else {  // one product per element: exactly that of the rounded operands
          const std::vector<double> rounded = t.reference(true);
          for (std::size_t i = 0; i < c.size(); ++i) EXPECT_EQ(c[i], rounded[i]) << i;
        }
      }
    }
  }
}

TEST(CpuSmallGemmBf16, NativeKernelGivesThePortableBits) {
  if (!rig::cpu::small_gemm_bf16_native_available()) {
    GTEST_SKIP() << "this CPU has no AVX512_BF16; the portable kernel is the one in use";
  }
  std::mt19937 rng(23);
  for (const auto& [m, n, k] : kSmallShapes) {
    for (bool ta : {false, true}) {
      for (bool tb : {false, true}) {
        const Case t(m, n, k, ta, tb, -0.7F, 0.0F, rng);
        const std::vector<float> native = small_product(t, SmallGemmKernel::native);
        const std::vector<float> portable = small_product(t, SmallGemmKernel::portable);
        EXPECT_EQ(native, portable) << describe(t, 1);
        EXPECT_EQ(small_product(t, SmallGemmKernel::best), native) << describe(t, 1);
      }
    }
  }
}

TEST(CpuSmallGemmBf16, RoundsToNearestEvenAndKeepsNaN) {
  // 1 + 2^-8 lies halfway between bf16's 1 and 1 + 2^-7: it goes to 1 (even);
  // 1 + 3 * 2^-8 halfway between 1 + 2^-7 and 1 + 2^-6: it goes to 1 + 2^-6.
  const float tie_down = 1.0F + 0x1.0p-8F, tie_up = 1.0F + 3.0F * 0x1.0p-8F;
  const float nan = std::numeric_limits<float>::quiet_NaN();
  for (SmallGemmKernel kernel : {SmallGemmKernel::portable, SmallGemmKernel::best}) {
    for (bool ta : {false, true}) {
      for (bool tb : {false, true}) {
        // C [1 x 3] = [x] [1 1 1] with k = 1, and the same through k = 2.
        const float a[2] = {tie_down, tie_up};
        const float ones[6] = {1.0F, 1.0F, 1.0F, 1.0F, 1.0F, 1.0F};
        float c[3] = {};
        std::uint32_t scratch[64];
        rig::cpu::small_gemm_bf16(1, 3, 1, 1.0F, {a, 1, ta}, {ones, tb ? 1 : 3, tb}, c, 3, scratch,
                                  kernel);
        EXPECT_EQ(c[0], 1.0F);
        rig::cpu::small_gemm_bf16(1, 3, 1, 1.0F, {a + 1, 1, ta}, {ones, tb ? 1 : 3, tb}, c, 3,
                                  scratch, kernel);
        EXPECT_EQ(c[2], 1.0F + 0x1.0p-6F);
        // k = 2 (one full pair): 1 + (1 + 2^-6).
        rig::cpu::small_gemm_bf16(1, 3, 2, 1.0F, {a, ta ? 1 : 2, ta}, {ones, tb ? 2 : 3, tb}, c, 3,
                                  scratch, kernel);
        EXPECT_EQ(c[1], 2.0F + 0x1.0p-6F);
        const float with_nan[2] = {nan, 1.0F};
        rig::cpu::small_gemm_bf16(1, 3, 2, 1.0F, {with_nan, ta ? 1 : 2, ta}, {ones, tb ? 2 : 3, tb},
                                  c, 3, scratch, kernel);
        EXPECT_TRUE(std::isnan(c[0]));
      }
    }
  }
}

}  // namespace
