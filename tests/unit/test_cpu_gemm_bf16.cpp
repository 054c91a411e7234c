// GEMMs at bfloat16 precision (cpu::set_gemm_precision): every product must
// equal the f32 product of its operands rounded to bfloat16 (nearest even),
// up to f32 summation error, and differ from the unrounded product by the
// rounding's own error, on every path: oneDNN's bf16 panels, the rounded-f32
// fallback for small products, the tall transposed product, gemm_pair with a
// shared operand, and batched products, at one and two threads.
#include <gtest/gtest.h>

#include <array>
#include <bit>
#include <cmath>
#include <cstdint>
#include <iostream>
#include <random>
#include <string>
#include <vector>

#include "cpu/gemm.hpp"
#include "cpu/gemm_dnnl.hpp"
#include "cpu/parallel.hpp"

namespace {

using rig::cpu::GemmOperand;
using rig::cpu::GemmPrecision;
using rig::cpu::GemmProduct;

// Round to nearest even, written independently of cpu/half.hpp.
float to_bf16(float x) {
  const std::uint32_t bits = std::bit_cast<std::uint32_t>(x);
  const std::uint32_t lsb = (bits >> 16U) & 1U;
  return std::bit_cast<float>((bits + 0x7FFFU + lsb) & 0xFFFF0000U);
}

class PrecisionScope {
 public:
  explicit PrecisionScope(GemmPrecision p) : saved_(rig::cpu::gemm_precision()) {
    rig::cpu::set_gemm_precision(p);
  }
  ~PrecisionScope() { rig::cpu::set_gemm_precision(saved_); }
  PrecisionScope(const PrecisionScope&) = delete;
  PrecisionScope& operator=(const PrecisionScope&) = delete;

 private:
  GemmPrecision saved_;
};

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
  const PrecisionScope bf16(GemmPrecision::bf16);
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
            rig::cpu::gemm(t.product(c));
            expect_bf16_product(t, c, describe(t, threads));
          }
        }
      }
    }
  }
}

TEST(CpuGemmBf16, PairWithASharedOperandRoundsBoth) {
  // A linear layer's backward: dX = dY W and dW = dY^T X share dY.
  const PrecisionScope bf16(GemmPrecision::bf16);
  std::mt19937 rng(5);
  for (int threads : {1, 2, 3}) {
    const ThreadsScope scope(threads);
    const Case dx(256, 96, 128, false, false, 1.0F, 0.0F, rng);
    Case dw(128, 96, 256, true, false, 1.0F, 1.0F, rng);
    dw.a = dx.a;  // dY^T: the same buffer, read transposed
    dw.lda = dx.lda;
    std::vector<float> c1 = dx.c0, c2 = dw.c0;
    rig::cpu::gemm_pair(dx.product(c1), dw.product(c2));
    expect_bf16_product(dx, c1, "dX of the pair, threads " + std::to_string(threads));
    expect_bf16_product(dw, c2, "dW of the pair, threads " + std::to_string(threads));
  }
}

TEST(CpuGemmBf16, BatchedProductsAreRoundedToo) {
  const PrecisionScope bf16(GemmPrecision::bf16);
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
                           c_size);
    for (std::int64_t i = 0; i < batch; ++i) {
      const std::vector<float> ci(c.begin() + i * c_size, c.begin() + (i + 1) * c_size);
      expect_bf16_product(
          cases[static_cast<std::size_t>(i)], ci,
          "batch item " + std::to_string(i) + ", threads " + std::to_string(threads));
    }
  }
}

TEST(CpuGemmBf16, Float32PrecisionLeavesOperandsAlone) {
  // The default: a product that bf16 rounding would visibly change is exact to f32.
  ASSERT_EQ(rig::cpu::gemm_precision(), GemmPrecision::f32);
  std::mt19937 rng(2);
  const Case t(96, 200, 150, false, false, 1.0F, 0.0F, rng);
  std::vector<float> c = t.c0;
  rig::cpu::gemm(t.product(c));
  const std::vector<double> exact = t.reference(false);
  double worst = 0.0;
  for (std::size_t i = 0; i < c.size(); ++i) worst = std::max(worst, std::abs(c[i] - exact[i]));
  EXPECT_LT(worst, 1e-4);
}

}  // namespace
