// Differentiable CPU ops on contiguous f32 tensors.
#include "rig/ops.hpp"

#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <stdexcept>

#include <fmt/format.h>

#include "rig/autograd.hpp"

namespace rig::ops {

namespace {

void require_f32(const char* op, const Tensor& t, const char* role) {
  if (!t.defined()) throw std::invalid_argument(fmt::format("{}: {} is undefined", op, role));
  if (t.dtype() != DType::f32) {
    throw std::invalid_argument(fmt::format("{}: {} must be f32, got {} {}", op, role,
                                            dtype_name(t.dtype()), to_string(t.shape())));
  }
}

void require_same_shape(const char* op, const char* symbol, const Tensor& a, const Tensor& b) {
  require_f32(op, a, "a");
  require_f32(op, b, "b");
  if (a.shape() != b.shape()) {
    throw std::invalid_argument(fmt::format("{}: {} {} {}: shapes differ", op, to_string(a.shape()),
                                            symbol, to_string(b.shape())));
  }
}

// out[i] = f(a[i]) into a fresh tensor of a's shape.
template <class F>
Tensor map(const Tensor& a, F f) {
  Tensor out = Tensor::empty(a.shape());
  const float* x = a.data<float>();
  float* y = out.data<float>();
  const auto n = a.numel();
  for (std::int64_t i = 0; i < n; ++i) y[i] = f(x[i]);
  return out;
}

// out[i] = f(a[i], b[i]) into a fresh tensor of a's shape (same numel assumed).
template <class F>
Tensor zip(const Tensor& a, const Tensor& b, F f) {
  Tensor out = Tensor::empty(a.shape());
  const float* x = a.data<float>();
  const float* z = b.data<float>();
  float* y = out.data<float>();
  const auto n = a.numel();
  for (std::int64_t i = 0; i < n; ++i) y[i] = f(x[i], z[i]);
  return out;
}

std::string shape_t(const Tensor& t, bool transposed) {
  return to_string(t.shape()) + (transposed ? "^T" : "");
}

// op(x) op(y) for 2-D f32 tensors, without recording history. Shapes checked by the caller.
Tensor gemm(const Tensor& x, bool tx, const Tensor& y, bool ty) {
  const auto m = x.size(tx ? 1 : 0);
  const auto k = x.size(tx ? 0 : 1);
  const auto n = y.size(ty ? 0 : 1);
  Tensor out = Tensor::empty({m, n});
  if (m == 0 || n == 0) return out;
  if (k == 0) {
    out.fill_(0.0F);
    return out;
  }
  cblas_sgemm(CblasRowMajor, tx ? CblasTrans : CblasNoTrans, ty ? CblasTrans : CblasNoTrans,
              static_cast<blasint>(m), static_cast<blasint>(n), static_cast<blasint>(k), 1.0F,
              x.data<float>(), static_cast<blasint>(x.size(1)), y.data<float>(),
              static_cast<blasint>(y.size(1)), 0.0F, out.data<float>(), static_cast<blasint>(n));
  return out;
}

// Wraps a single-input op whose gradient is grad * local(x, y) elementwise.
template <class Local>
Tensor unary(const char* op, const Tensor& a, Tensor out, Local local) {
  Tensor x = a.detach();
  Tensor y = out.detach();  // the output without its history: no reference cycle
  return autograd::record(std::move(out), op, {a},
                          [x, y, local](const Tensor& g) -> std::vector<Tensor> {
                            Tensor dx = Tensor::empty(x.shape());
                            const float* xs = x.data<float>();
                            const float* ys = y.data<float>();
                            const float* gs = g.data<float>();
                            float* d = dx.data<float>();
                            const auto n = x.numel();
                            for (std::int64_t i = 0; i < n; ++i) d[i] = gs[i] * local(xs[i], ys[i]);
                            return {dx};
                          });
}

void require_nonempty(const char* op, const Tensor& a) {
  if (a.numel() == 0) {
    throw std::invalid_argument(fmt::format("{}: empty tensor {}", op, to_string(a.shape())));
  }
}

}  // namespace

Tensor matmul(const Tensor& a, const Tensor& b, bool transpose_a, bool transpose_b) {
  require_f32("matmul", a, "a");
  require_f32("matmul", b, "b");
  if (a.dim() != 2 || b.dim() != 2) {
    throw std::invalid_argument(fmt::format("matmul: {} x {}: both operands must be 2-D",
                                            shape_t(a, transpose_a), shape_t(b, transpose_b)));
  }
  const auto ka = a.size(transpose_a ? 0 : 1);
  const auto kb = b.size(transpose_b ? 1 : 0);
  if (ka != kb) {
    throw std::invalid_argument(fmt::format("matmul: {} x {}: inner dimensions {} and {} differ",
                                            shape_t(a, transpose_a), shape_t(b, transpose_b), ka,
                                            kb));
  }
  Tensor out = gemm(a, transpose_a, b, transpose_b);
  return autograd::record(
      std::move(out), "matmul", {a, b},
      [a = a.detach(), b = b.detach(), ta = transpose_a, tb = transpose_b,
       need_a = a.requires_grad(), need_b = b.requires_grad()](const Tensor& g) {
        // C = A'B' with A' = op(A), B' = op(B): dA' = dC B'^T, dB' = A'^T dC.
        Tensor da = !need_a ? Tensor() : !ta ? gemm(g, false, b, !tb) : gemm(b, tb, g, true);
        Tensor db = !need_b ? Tensor() : !tb ? gemm(a, !ta, g, false) : gemm(g, true, a, ta);
        return std::vector<Tensor>{da, db};
      });
}

Tensor add(const Tensor& a, const Tensor& b) {
  require_f32("add", a, "a");
  require_f32("add", b, "b");
  if (a.shape() == b.shape()) {
    Tensor out = zip(a, b, [](float x, float y) { return x + y; });
    return autograd::record(std::move(out), "add", {a, b}, [](const Tensor& g) {
      return std::vector<Tensor>{g, g};
    });
  }
  // A bias: b of shape [N] against a of shape [..., N], added to every row.
  if (b.dim() != 1 || a.dim() < 1 || a.size(-1) != b.size(0)) {
    throw std::invalid_argument(fmt::format(
        "add: {} + {}: shapes differ (b must have a's shape or be a bias of shape [{}])",
        to_string(a.shape()), to_string(b.shape()), a.dim() >= 1 ? a.size(-1) : 1));
  }
  const auto cols = b.numel();
  const auto rows = cols == 0 ? 0 : a.numel() / cols;
  Tensor out = Tensor::empty(a.shape());
  {
    const float* x = a.data<float>();
    const float* bias = b.data<float>();
    float* y = out.data<float>();
    for (std::int64_t r = 0; r < rows; ++r) {
      for (std::int64_t c = 0; c < cols; ++c) y[r * cols + c] = x[r * cols + c] + bias[c];
    }
  }
  return autograd::record(std::move(out), "add", {a, b}, [rows, cols](const Tensor& g) {
    Tensor db = Tensor::zeros({cols});
    const float* gs = g.data<float>();
    float* d = db.data<float>();
    for (std::int64_t r = 0; r < rows; ++r) {
      for (std::int64_t c = 0; c < cols; ++c) d[c] += gs[r * cols + c];
    }
    return std::vector<Tensor>{g, db};
  });
}

Tensor sub(const Tensor& a, const Tensor& b) {
  require_same_shape("sub", "-", a, b);
  Tensor out = zip(a, b, [](float x, float y) { return x - y; });
  return autograd::record(std::move(out), "sub", {a, b}, [](const Tensor& g) {
    return std::vector<Tensor>{g, map(g, [](float x) { return -x; })};
  });
}

Tensor mul(const Tensor& a, const Tensor& b) {
  require_same_shape("mul", "*", a, b);
  Tensor out = zip(a, b, [](float x, float y) { return x * y; });
  return autograd::record(std::move(out), "mul", {a, b},
                          [a = a.detach(), b = b.detach(), need_a = a.requires_grad(),
                           need_b = b.requires_grad()](const Tensor& g) {
                            auto times = [](float x, float y) { return x * y; };
                            return std::vector<Tensor>{need_a ? zip(g, b, times) : Tensor(),
                                                       need_b ? zip(g, a, times) : Tensor()};
                          });
}

Tensor mul_scalar(const Tensor& a, float scalar) {
  require_f32("mul_scalar", a, "a");
  Tensor out = map(a, [scalar](float x) { return x * scalar; });
  return autograd::record(std::move(out), "mul_scalar", {a}, [scalar](const Tensor& g) {
    return std::vector<Tensor>{map(g, [scalar](float x) { return x * scalar; })};
  });
}

Tensor relu(const Tensor& a) {
  require_f32("relu", a, "a");
  return unary("relu", a, map(a, [](float x) { return x > 0.0F ? x : 0.0F; }),
               [](float x, float) { return x > 0.0F ? 1.0F : 0.0F; });
}

Tensor tanh(const Tensor& a) {
  require_f32("tanh", a, "a");
  return unary("tanh", a, map(a, [](float x) { return std::tanh(x); }),
               [](float, float y) { return 1.0F - y * y; });
}

Tensor sigmoid(const Tensor& a) {
  require_f32("sigmoid", a, "a");
  // Both branches avoid exp of a large positive number.
  auto f = [](float x) {
    if (x >= 0.0F) return 1.0F / (1.0F + std::exp(-x));
    const float e = std::exp(x);
    return e / (1.0F + e);
  };
  return unary("sigmoid", a, map(a, f), [](float, float y) { return y * (1.0F - y); });
}

Tensor sum(const Tensor& a) {
  require_f32("sum", a, "a");
  const float* x = a.data<float>();
  double total = 0.0;
  for (std::int64_t i = 0, n = a.numel(); i < n; ++i) total += x[i];
  return autograd::record(Tensor::scalar(static_cast<float>(total)), "sum", {a},
                          [shape = a.shape()](const Tensor& g) {
                            return std::vector<Tensor>{Tensor::full(shape, g.item())};
                          });
}

Tensor mean(const Tensor& a) {
  require_f32("mean", a, "a");
  require_nonempty("mean", a);
  const auto n = a.numel();
  const float* x = a.data<float>();
  double total = 0.0;
  for (std::int64_t i = 0; i < n; ++i) total += x[i];
  return autograd::record(
      Tensor::scalar(static_cast<float>(total / static_cast<double>(n))), "mean", {a},
      [shape = a.shape(), n](const Tensor& g) {
        return std::vector<Tensor>{Tensor::full(shape, g.item() / static_cast<float>(n))};
      });
}

Tensor mse_loss(const Tensor& prediction, const Tensor& target) {
  require_f32("mse_loss", prediction, "prediction");
  require_f32("mse_loss", target, "target");
  if (prediction.shape() != target.shape()) {
    throw std::invalid_argument(fmt::format("mse_loss: prediction {} vs target {}: shapes differ",
                                            to_string(prediction.shape()),
                                            to_string(target.shape())));
  }
  require_nonempty("mse_loss", prediction);
  Tensor diff = zip(prediction, target, [](float p, float t) { return p - t; });
  const float* d = diff.data<float>();
  const auto n = diff.numel();
  double total = 0.0;
  for (std::int64_t i = 0; i < n; ++i) total += static_cast<double>(d[i]) * d[i];
  return autograd::record(Tensor::scalar(static_cast<float>(total / static_cast<double>(n))),
                          "mse_loss", {prediction, target},
                          [diff, n, need_t = target.requires_grad()](const Tensor& g) {
                            const float scale = 2.0F * g.item() / static_cast<float>(n);
                            Tensor dp = map(diff, [scale](float x) { return scale * x; });
                            Tensor dt = need_t ? map(dp, [](float x) { return -x; }) : Tensor();
                            return std::vector<Tensor>{dp, dt};
                          });
}

Tensor cross_entropy(const Tensor& logits, const Tensor& labels) {
  require_f32("cross_entropy", logits, "logits");
  if (!labels.defined() || labels.dtype() != DType::i64 || logits.dim() != 2 || labels.dim() != 1 ||
      labels.size(0) != logits.size(0)) {
    throw std::invalid_argument(fmt::format(
        "cross_entropy: logits {} and labels {} {}: expected f32 [N,C] logits and i64 [N] labels",
        to_string(logits.shape()), labels.defined() ? dtype_name(labels.dtype()) : "undefined",
        labels.defined() ? to_string(labels.shape()) : ""));
  }
  const auto rows = logits.size(0);
  const auto classes = logits.size(1);
  if (rows == 0 || classes == 0) {
    throw std::invalid_argument(
        fmt::format("cross_entropy: empty logits {}", to_string(logits.shape())));
  }
  const float* x = logits.data<float>();
  const std::int64_t* y = labels.data<std::int64_t>();
  // Softmax probabilities, kept for backward; loss via a stable log-sum-exp.
  Tensor probs = Tensor::empty(logits.shape());
  float* p = probs.data<float>();
  double total = 0.0;
  for (std::int64_t r = 0; r < rows; ++r) {
    if (y[r] < 0 || y[r] >= classes) {
      throw std::invalid_argument(fmt::format(
          "cross_entropy: label {} of sample {} is out of range [0,{})", y[r], r, classes));
    }
    const float* row = x + r * classes;
    float* prow = p + r * classes;
    const float max = *std::max_element(row, row + classes);
    double z = 0.0;
    for (std::int64_t c = 0; c < classes; ++c) {
      prow[c] = std::exp(row[c] - max);
      z += prow[c];
    }
    const auto inv = static_cast<float>(1.0 / z);
    for (std::int64_t c = 0; c < classes; ++c) prow[c] *= inv;
    total += std::log(z) + max - row[y[r]];
  }
  return autograd::record(Tensor::scalar(static_cast<float>(total / static_cast<double>(rows))),
                          "cross_entropy", {logits, labels},
                          [probs, labels, rows, classes](const Tensor& g) {
                            // d/dlogits = (softmax - one_hot(label)) / N
                            const float scale = g.item() / static_cast<float>(rows);
                            Tensor dx = Tensor::empty(probs.shape());
                            const float* ps = probs.data<float>();
                            const std::int64_t* ys = labels.data<std::int64_t>();
                            float* d = dx.data<float>();
                            for (std::int64_t r = 0; r < rows; ++r) {
                              for (std::int64_t c = 0; c < classes; ++c)
                                d[r * classes + c] = scale * ps[r * classes + c];
                              d[r * classes + ys[r]] -= scale;
                            }
                            return std::vector<Tensor>{dx, Tensor()};
                          });
}

Tensor argmax(const Tensor& a) {
  require_f32("argmax", a, "a");
  if (a.dim() < 1 || a.size(-1) == 0) {
    throw std::invalid_argument(
        fmt::format("argmax: {}: needs a non-empty last axis", to_string(a.shape())));
  }
  const auto cols = a.size(-1);
  const auto rows = a.numel() / cols;
  Shape shape(a.shape().begin(), a.shape().end() - 1);
  Tensor out = Tensor::empty(shape, DType::i64);
  const float* x = a.data<float>();
  std::int64_t* idx = out.data<std::int64_t>();
  for (std::int64_t r = 0; r < rows; ++r) {
    const float* row = x + r * cols;
    idx[r] = std::max_element(row, row + cols) - row;
  }
  return out;
}

}  // namespace rig::ops
