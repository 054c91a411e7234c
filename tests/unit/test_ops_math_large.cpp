// The core math ops at sizes that take the threaded and split paths (GEMM
// panels, batched GEMM tasks, column-block reductions, row-parallel softmax,
// layer-norm and cross-entropy), against plain double-precision loops; and
// results that must not depend on the thread count.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "cpu/parallel.hpp"
#include "golden.hpp"
#include "gradcheck.hpp"
#include "rig/ops.hpp"

namespace {

using rig::Shape;
using rig::Tensor;
using namespace rig_test;
namespace ops = rig::ops;

class OpsMathLarge : public ::testing::Test {
 protected:
  std::mt19937 rng{7};
  Tensor rand(Shape shape, float low = -1.0F, float high = 1.0F) {
    return uniform_tensor(std::move(shape), rng, low, high);
  }
};

// Row-major C = op(A) op(B) in double for 2-D tensors given as vectors.
std::vector<float> naive_matmul(const std::vector<float>& a, const std::vector<float>& b,
                                std::int64_t m, std::int64_t n, std::int64_t k, bool ta, bool tb) {
  std::vector<float> c(static_cast<std::size_t>(m * n));
  for (std::int64_t i = 0; i < m; ++i) {
    for (std::int64_t j = 0; j < n; ++j) {
      double s = 0.0;
      for (std::int64_t p = 0; p < k; ++p) {
        const double x = ta ? a[p * m + i] : a[i * k + p];
        const double y = tb ? b[j * k + p] : b[p * n + j];
        s += x * y;
      }
      c[i * n + j] = static_cast<float>(s);
    }
  }
  return c;
}

TEST_F(OpsMathLarge, SplitGemmMatchesNaive) {
  const std::int64_t m = 130, n = 70, k = 300;
  for (bool ta : {false, true}) {
    for (bool tb : {false, true}) {
      Tensor a = ta ? rand({k, m}) : rand({m, k});
      Tensor b = tb ? rand({n, k}) : rand({k, n});
      const auto expected = naive_matmul(a.to_vector(), b.to_vector(), m, n, k, ta, tb);
      EXPECT_TRUE(tensors_close(ops::matmul(a, b, ta, tb), Tensor::from_vector(expected, {m, n}),
                                1e-4, 1e-4))
          << ta << tb;
    }
  }
  // Wide rather than tall: split by columns.
  Tensor a = rand({20, 300});
  Tensor b = rand({300, 500});
  EXPECT_TRUE(tensors_close(
      ops::matmul(a, b),
      Tensor::from_vector(naive_matmul(a.to_vector(), b.to_vector(), 20, 500, 300, false, false),
                          {20, 500}),
      1e-4, 1e-4));
}

TEST_F(OpsMathLarge, BatchedGemmMatchesNaive) {
  // Many small products (one task each) and a few large ones (split).
  for (const auto& [batch, m, n, k] :
       std::vector<std::array<std::int64_t, 4>>{{24, 17, 9, 31}, {3, 90, 80, 70}}) {
    Tensor a = rand({batch, m, k});
    Tensor b = rand({batch, n, k});
    const Tensor c = ops::matmul(a, b, false, true);
    for (std::int64_t i = 0; i < batch; ++i) {
      const auto expected = naive_matmul(a.slice(0, i, i + 1).to_vector(),
                                         b.slice(0, i, i + 1).to_vector(), m, n, k, false, true);
      EXPECT_TRUE(tensors_close(c.slice(0, i, i + 1).reshape({m, n}),
                                Tensor::from_vector(expected, {m, n}), 1e-4, 1e-4))
          << "batch " << i;
    }
  }
}

TEST_F(OpsMathLarge, LinearForwardAndBackwardMatchNaive) {
  const std::int64_t rows = 96, in = 200, out = 150;
  Tensor x = rand({2, rows / 2, in});
  Tensor w = rand({out, in}, -0.1F, 0.1F);
  Tensor b = rand({out});
  x.set_requires_grad(true);
  w.set_requires_grad(true);
  b.set_requires_grad(true);
  const Tensor y = ops::linear(x, w, b, ops::Activation::gelu);
  const Tensor up = rand({2, rows / 2, out});
  ops::sum(ops::mul(y, up)).backward();

  const auto xv = x.to_vector(), wv = w.to_vector(), bv = b.to_vector(), uv = up.to_vector();
  std::vector<double> dz(static_cast<std::size_t>(rows * out));
  std::vector<float> yv(static_cast<std::size_t>(rows * out));
  for (std::int64_t r = 0; r < rows; ++r) {
    for (std::int64_t o = 0; o < out; ++o) {
      double z = bv[o];
      for (std::int64_t i = 0; i < in; ++i)
        z += static_cast<double>(xv[r * in + i]) * wv[o * in + i];
      const double cdf = 0.5 * (1.0 + std::erf(z / std::sqrt(2.0)));
      yv[r * out + o] = static_cast<float>(z * cdf);
      const double pdf = std::exp(-0.5 * z * z) / std::sqrt(2.0 * M_PI);
      dz[r * out + o] = uv[r * out + o] * (cdf + z * pdf);
    }
  }
  std::vector<float> dx(static_cast<std::size_t>(rows * in)),
      dw(static_cast<std::size_t>(out * in)), db(static_cast<std::size_t>(out));
  for (std::int64_t r = 0; r < rows; ++r) {
    for (std::int64_t i = 0; i < in; ++i) {
      double s = 0.0;
      for (std::int64_t o = 0; o < out; ++o) s += dz[r * out + o] * wv[o * in + i];
      dx[r * in + i] = static_cast<float>(s);
    }
  }
  for (std::int64_t o = 0; o < out; ++o) {
    double sb = 0.0;
    for (std::int64_t r = 0; r < rows; ++r) sb += dz[r * out + o];
    db[o] = static_cast<float>(sb);
    for (std::int64_t i = 0; i < in; ++i) {
      double s = 0.0;
      for (std::int64_t r = 0; r < rows; ++r) s += dz[r * out + o] * xv[r * in + i];
      dw[o * in + i] = static_cast<float>(s);
    }
  }
  EXPECT_TRUE(tensors_close(y, Tensor::from_vector(yv, y.shape()), 1e-4, 1e-5));
  EXPECT_TRUE(tensors_close(x.grad(), Tensor::from_vector(dx, x.shape()), 1e-4, 1e-4));
  EXPECT_TRUE(tensors_close(w.grad(), Tensor::from_vector(dw, w.shape()), 1e-4, 1e-4));
  EXPECT_TRUE(tensors_close(b.grad(), Tensor::from_vector(db, b.shape()), 1e-4, 1e-4));
}

TEST_F(OpsMathLarge, MaskedSoftmaxMatchesNaive) {
  const std::int64_t rows = 300, n = 517;
  Tensor x = rand({3, rows / 3, n}, -5, 5);
  std::vector<std::uint8_t> mv(static_cast<std::size_t>(3 * n));
  for (auto& v : mv) v = rng() % 4 != 0;
  const Tensor mask = Tensor::from_vector(mv, {3, 1, n});
  for (bool log : {false, true}) {
    const Tensor y = log ? ops::log_softmax(x, -1, mask) : ops::softmax(x, -1, mask);
    const auto xv = x.to_vector();
    auto yv = y.to_vector();
    std::vector<float> expected(yv.size());
    for (std::int64_t r = 0; r < rows; ++r) {
      const std::uint8_t* m = mv.data() + (r / (rows / 3)) * n;
      double mx = -INFINITY;
      for (std::int64_t j = 0; j < n; ++j) {
        if (m[j]) mx = std::max(mx, static_cast<double>(xv[r * n + j]));
      }
      double s = 0.0;
      for (std::int64_t j = 0; j < n; ++j) {
        if (m[j]) s += std::exp(xv[r * n + j] - mx);
      }
      for (std::int64_t j = 0; j < n; ++j) {
        const std::size_t i = static_cast<std::size_t>(r * n + j);
        if (log) {
          // -inf compared as a large negative number on both sides.
          expected[i] = m[j] ? static_cast<float>(xv[i] - mx - std::log(s)) : -1e30F;
          if (!m[j]) {
            EXPECT_TRUE(std::isinf(yv[i]));
            yv[i] = -1e30F;
          }
        } else {
          expected[i] = m[j] ? static_cast<float>(std::exp(xv[i] - mx) / s) : 0.0F;
        }
      }
    }
    EXPECT_TRUE(tensors_close(Tensor::from_vector(yv, y.shape()),
                              Tensor::from_vector(expected, y.shape()), 1e-5, 1e-6))
        << "log " << log;
  }
}

TEST_F(OpsMathLarge, LayerNormMatchesNaive) {
  const std::int64_t rows = 1000, d = 256;
  Tensor x = rand({rows, d}, -2, 4);
  Tensor g = rand({d}, 0.5, 1.5);
  Tensor b = rand({d});
  x.set_requires_grad(true);
  g.set_requires_grad(true);
  b.set_requires_grad(true);
  const Tensor y = ops::layer_norm(x, g, b);
  const Tensor up = rand({rows, d});
  ops::sum(ops::mul(y, up)).backward();
  const auto xv = x.to_vector(), gv = g.to_vector(), uv = up.to_vector();
  std::vector<float> yv(xv.size()), dx(xv.size()), dg(static_cast<std::size_t>(d)),
      dbv(static_cast<std::size_t>(d));
  std::vector<double> dgd(static_cast<std::size_t>(d)), dbd(static_cast<std::size_t>(d));
  for (std::int64_t r = 0; r < rows; ++r) {
    const float* xr = xv.data() + r * d;
    double mu = 0.0, var = 0.0;
    for (std::int64_t j = 0; j < d; ++j) mu += xr[j];
    mu /= static_cast<double>(d);
    for (std::int64_t j = 0; j < d; ++j) var += (xr[j] - mu) * (xr[j] - mu);
    var /= static_cast<double>(d);
    const double rs = 1.0 / std::sqrt(var + 1e-5);
    double sa = 0.0, sb = 0.0;
    for (std::int64_t j = 0; j < d; ++j) {
      const double xh = (xr[j] - mu) * rs;
      const double u = uv[r * d + j];
      yv[r * d + j] = static_cast<float>(xh * gv[j]);  // compared with y - beta
      dgd[j] += u * xh;
      dbd[j] += u;
      sa += u * gv[j];
      sb += u * gv[j] * xh;
    }
    for (std::int64_t j = 0; j < d; ++j) {
      const double xh = (xr[j] - mu) * rs;
      dx[r * d + j] = static_cast<float>(rs * (uv[r * d + j] * gv[j] - sa / d - xh * sb / d));
    }
  }
  for (std::int64_t j = 0; j < d; ++j) {
    dg[j] = static_cast<float>(dgd[j]);
    dbv[j] = static_cast<float>(dbd[j]);
  }
  EXPECT_TRUE(tensors_close(ops::sub(y, b), Tensor::from_vector(yv, y.shape()), 1e-4, 1e-5));
  EXPECT_TRUE(tensors_close(x.grad(), Tensor::from_vector(dx, x.shape()), 1e-3, 1e-4));
  EXPECT_TRUE(tensors_close(g.grad(), Tensor::from_vector(dg, g.shape()), 1e-4, 1e-3));
  EXPECT_TRUE(tensors_close(b.grad(), Tensor::from_vector(dbv, b.shape()), 1e-4, 1e-3));
}

TEST_F(OpsMathLarge, CrossEntropyMatchesNaive) {
  const std::int64_t n = 500, c = 1000;
  Tensor logits = rand({n, c}, -6, 6);
  std::vector<std::int64_t> lv(static_cast<std::size_t>(n));
  for (auto& l : lv) l = static_cast<std::int64_t>(rng() % c);
  const Tensor labels = Tensor::from_vector(lv, {n});
  const float s = 0.1F;
  const auto xv = logits.to_vector();
  double total = 0.0;
  for (std::int64_t r = 0; r < n; ++r) {
    double mx = -INFINITY;
    for (std::int64_t j = 0; j < c; ++j) mx = std::max(mx, static_cast<double>(xv[r * c + j]));
    double z = 0.0, sx = 0.0;
    for (std::int64_t j = 0; j < c; ++j) {
      z += std::exp(xv[r * c + j] - mx);
      sx += xv[r * c + j];
    }
    const double lse = mx + std::log(z);
    total += (1.0 - s) * (lse - xv[r * c + lv[r]]) + s / c * (c * lse - sx);
  }
  EXPECT_NEAR(ops::cross_entropy(logits, labels, s).item(), total / n, 1e-4);
}

TEST_F(OpsMathLarge, ReductionsAndBroadcastMatchNaive) {
  const std::int64_t r = 1000, c = 700;
  Tensor x = rand({r, c});
  const auto xv = x.to_vector();
  std::vector<float> cols(static_cast<std::size_t>(c)), rows(static_cast<std::size_t>(r));
  double all = 0.0;
  for (std::int64_t j = 0; j < c; ++j) {
    double s = 0.0;
    for (std::int64_t i = 0; i < r; ++i) s += xv[i * c + j];
    cols[j] = static_cast<float>(s);
  }
  for (std::int64_t i = 0; i < r; ++i) {
    double s = 0.0;
    for (std::int64_t j = 0; j < c; ++j) s += xv[i * c + j];
    rows[i] = static_cast<float>(s);
    all += s;
  }
  EXPECT_TRUE(tensors_close(ops::sum(x, {0}), Tensor::from_vector(cols, {c}), 1e-4, 1e-4));
  EXPECT_TRUE(tensors_close(ops::sum(x, {1}), Tensor::from_vector(rows, {r}), 1e-4, 1e-4));
  EXPECT_NEAR(ops::sum(x).item(), all, 1e-2);
  // Broadcast add over a strided middle axis.
  Tensor a = rand({64, 128, 33});
  Tensor col = rand({128, 1});
  const auto av = a.to_vector(), cv = col.to_vector();
  std::vector<float> expected(av.size());
  for (std::size_t i = 0; i < av.size(); ++i) expected[i] = av[i] + cv[(i / 33) % 128];
  EXPECT_TRUE(tensors_close(ops::add(a, col), Tensor::from_vector(expected, a.shape()), 0, 0));
}

TEST_F(OpsMathLarge, ResultsDoNotDependOnTheThreadCount) {
  Tensor x = rand({1 << 20});
  Tensor m = rand({300, 256});
  auto run = [&] {
    Tensor mg = m.clone();
    mg.set_requires_grad(true);
    Tensor g = Tensor::ones({256});
    g.set_requires_grad(true);
    ops::sum(ops::mul(ops::layer_norm(mg, g, {}), ops::sigmoid(m))).backward();
    return std::make_pair(ops::sum(x).item(), g.grad().to_vector());
  };
  const int threads = rig::cpu::num_threads();
  rig::cpu::set_num_threads(1);
  const auto one = run();
  rig::cpu::set_num_threads(std::max(2, threads));
  const auto many = run();
  rig::cpu::set_num_threads(threads);
  EXPECT_EQ(one.first, many.first);
  EXPECT_EQ(one.second, many.second);
}

}  // namespace
