#include "cpu/elementwise.hpp"

#include <algorithm>
#include <cmath>

#include "cpu/parallel.hpp"
#include "cpu/scratch.hpp"
#include "cpu/simd.hpp"
#include "rig/half.hpp"
#include "rig/kernel_attributes.hpp"
#include "rig/math/activations.hpp"

namespace rig::cpu {

namespace {

// Elements per task: enough work to pay for waking a pool thread.
constexpr std::int64_t kGrain = 16384;

// pow with the common exponents done exactly and without a libm call.
inline float pow_scalar(float x, float p) {
  if (p == 2.0F) return x * x;
  if (p == 1.0F) return x;
  if (p == 0.5F) return std::sqrt(x);
  if (p == -1.0F) return 1.0F / x;
  if (p == 3.0F) return x * x * x;
  if (p == -0.5F) return 1.0F / std::sqrt(x);
  return std::pow(x, p);
}

// The maps with compares or transcendental functions, in explicit SIMD
// (cpu/simd.hpp); the rest are plain loops that GCC vectorises.
template <int W>
struct UnaryKernel {
  using V = simd::Vec<W>;
  using F = typename V::F;

  // y = f(x) over n elements, the tail through a partial vector.
  template <class Fn>
  static RIG_SIMD_INLINE void map(const float* x, float* y, std::int64_t n, Fn f) {
    std::int64_t i = 0;
    for (; i + W <= n; i += W) V::store(y + i, f(V::load(x + i)));
    if (i < n) V::store_partial(y + i, f(V::load_partial(x + i, n - i, 0.0F)), n - i);
  }
  // d = g * f'(u) over n elements.
  template <class Fn>
  static RIG_SIMD_INLINE void map2(const float* g, const float* u, float* d, std::int64_t n, Fn f) {
    std::int64_t i = 0;
    for (; i + W <= n; i += W) V::store(d + i, f(V::load(g + i), V::load(u + i)));
    if (i < n) {
      const F gv = V::load_partial(g + i, n - i, 0.0F);
      const F uv = V::load_partial(u + i, n - i, 0.0F);
      V::store_partial(d + i, f(gv, uv), n - i);
    }
  }

  static RIG_SIMD_INLINE void run(Unary op, const float* x, float* y, std::int64_t n, float s) {
    switch (op) {
      case Unary::neg:
        for (std::int64_t i = 0; i < n; ++i) y[i] = -x[i];
        return;
      case Unary::exp:
        map(x, y, n, [](const F& v) RIG_SIMD_LAMBDA { return V::exp(v); });
        return;
      case Unary::log:
        for (std::int64_t i = 0; i < n; ++i) y[i] = std::log(x[i]);
        return;
      case Unary::sqrt:
        for (std::int64_t i = 0; i < n; ++i) y[i] = std::sqrt(x[i]);
        return;
      case Unary::rsqrt:
        for (std::int64_t i = 0; i < n; ++i) y[i] = 1.0F / std::sqrt(x[i]);
        return;
      case Unary::relu:
        // NaN < 0 is false, so NaN propagates as in torch.
        map(x, y, n, [](const F& v) RIG_SIMD_LAMBDA { return v < 0.0F ? F{} : v; });
        return;
      case Unary::gelu:
        map(x, y, n, [](const F& v) RIG_SIMD_LAMBDA { return V::gelu(v); });
        return;
      case Unary::gelu_tanh:
        map(x, y, n, [](const F& v) RIG_SIMD_LAMBDA { return V::gelu_tanh(v); });
        return;
      case Unary::tanh:
        map(x, y, n, [](const F& v) RIG_SIMD_LAMBDA { return V::tanh(v); });
        return;
      case Unary::sigmoid:
        map(x, y, n, [](const F& v) RIG_SIMD_LAMBDA { return V::sigmoid(v); });
        return;
      case Unary::add_scalar:
        for (std::int64_t i = 0; i < n; ++i) y[i] = x[i] + s;
        return;
      case Unary::mul_scalar:
        for (std::int64_t i = 0; i < n; ++i) y[i] = x[i] * s;
        return;
      case Unary::pow_scalar:
        if (s == 2.0F) {
          for (std::int64_t i = 0; i < n; ++i) y[i] = x[i] * x[i];
        } else {
          for (std::int64_t i = 0; i < n; ++i) y[i] = pow_scalar(x[i], s);
        }
        return;
    }
  }

  static RIG_SIMD_INLINE void backward(Unary op, const float* g, const float* x, const float* y,
                                       float* dx, std::int64_t n, float s) {
    switch (op) {
      case Unary::neg:
        for (std::int64_t i = 0; i < n; ++i) dx[i] = -g[i];
        return;
      case Unary::exp:
        for (std::int64_t i = 0; i < n; ++i) dx[i] = g[i] * y[i];
        return;
      case Unary::log:
        for (std::int64_t i = 0; i < n; ++i) dx[i] = g[i] / x[i];
        return;
      case Unary::sqrt:  // 1 / (2 sqrt x)
        for (std::int64_t i = 0; i < n; ++i) dx[i] = g[i] * 0.5F / y[i];
        return;
      case Unary::rsqrt:  // -x^-1.5 / 2 = -y^3 / 2
        for (std::int64_t i = 0; i < n; ++i) dx[i] = g[i] * -0.5F * y[i] * y[i] * y[i];
        return;
      case Unary::relu:  // y > 0 exactly where x > 0 (NaN and -0 included)
        map2(g, y, dx, n,
             [](const F& gv, const F& yv) RIG_SIMD_LAMBDA { return yv > 0.0F ? gv : F{}; });
        return;
      case Unary::gelu:
        map2(g, x, dx, n,
             [](const F& gv, const F& xv) RIG_SIMD_LAMBDA { return gv * V::gelu_grad(xv); });
        return;
      case Unary::gelu_tanh:
        map2(g, x, dx, n,
             [](const F& gv, const F& xv) RIG_SIMD_LAMBDA { return gv * V::gelu_tanh_grad(xv); });
        return;
      case Unary::tanh:
        for (std::int64_t i = 0; i < n; ++i) dx[i] = math::tanh_backward(g[i], y[i]);
        return;
      case Unary::sigmoid:
        for (std::int64_t i = 0; i < n; ++i) dx[i] = math::sigmoid_backward(g[i], y[i]);
        return;
      case Unary::add_scalar:
        for (std::int64_t i = 0; i < n; ++i) dx[i] = g[i];
        return;
      case Unary::mul_scalar:
        for (std::int64_t i = 0; i < n; ++i) dx[i] = g[i] * s;
        return;
      case Unary::pow_scalar:
        if (s == 2.0F) {
          for (std::int64_t i = 0; i < n; ++i) dx[i] = g[i] * 2.0F * x[i];
        } else if (s == 0.0F) {
          for (std::int64_t i = 0; i < n; ++i) dx[i] = 0.0F;
        } else {
          for (std::int64_t i = 0; i < n; ++i) dx[i] = g[i] * s * pow_scalar(x[i], s - 1.0F);
        }
        return;
    }
  }
};

template <int W>
struct UnaryForward {
  static RIG_SIMD_INLINE void run(Unary op, const float* x, float* y, std::int64_t n, float s) {
    UnaryKernel<W>::run(op, x, y, n, s);
  }
};
template <int W>
struct UnaryBackward {
  static RIG_SIMD_INLINE void run(Unary op, const float* g, const float* x, const float* y,
                                  float* dx, std::int64_t n, float s) {
    UnaryKernel<W>::backward(op, g, x, y, dx, n, s);
  }
};

template <class F>
inline __attribute__((always_inline)) void binary_row(const float* a, std::int64_t sa,
                                                      const float* b, std::int64_t sb, float* y,
                                                      std::int64_t n, F f) {
  if (sa == 1 && sb == 1) {
    for (std::int64_t i = 0; i < n; ++i) y[i] = f(a[i], b[i]);
  } else if (sa == 1 && sb == 0) {
    const float bv = *b;
    for (std::int64_t i = 0; i < n; ++i) y[i] = f(a[i], bv);
  } else if (sa == 0 && sb == 1) {
    const float av = *a;
    for (std::int64_t i = 0; i < n; ++i) y[i] = f(av, b[i]);
  } else {
    for (std::int64_t i = 0; i < n; ++i) y[i] = f(a[i * sa], b[i * sb]);
  }
}

RIG_CPU_KERNEL void binary_range(Binary op, const float* a, std::int64_t sa, const float* b,
                                 std::int64_t sb, float* y, std::int64_t n) {
  switch (op) {
    case Binary::add:
      binary_row(a, sa, b, sb, y, n, [](float u, float v) { return u + v; });
      return;
    case Binary::sub:
      binary_row(a, sa, b, sb, y, n, [](float u, float v) { return u - v; });
      return;
    case Binary::mul:
      binary_row(a, sa, b, sb, y, n, [](float u, float v) { return u * v; });
      return;
    case Binary::div:
      binary_row(a, sa, b, sb, y, n, [](float u, float v) { return u / v; });
      return;
  }
}

RIG_CPU_KERNEL void copy_range(const float* x, std::int64_t sx, float* y, std::int64_t n) {
  if (sx == 1) {
    std::copy(x, x + n, y);
  } else if (sx == 0) {
    std::fill(y, y + n, *x);
  } else {
    for (std::int64_t i = 0; i < n; ++i) y[i] = x[i * sx];
  }
}

// Runs row(offsets, begin, end) over a plan: rows of the inner axis in
// parallel, or chunks of the inner axis when there is only one row.
template <int N, class Row>
void run_plan(const StridedPlan<N>& plan, Row row) {
  const std::int64_t inner = plan.inner();
  const std::int64_t outer = plan.outer();
  if (outer == 1) {
    parallel_for(inner, kGrain, [&](std::int64_t begin, std::int64_t end) {
      std::array<std::int64_t, N> offsets{};
      row(offsets, begin, end);
    });
    return;
  }
  const std::int64_t grain = std::max<std::int64_t>(1, kGrain / std::max<std::int64_t>(1, inner));
  parallel_for(outer, grain, [&](std::int64_t begin, std::int64_t end) {
    for_each_row(plan, begin, end,
                 [&](const std::array<std::int64_t, N>& offsets) { row(offsets, 0, inner); });
  });
}

// Rows of y: y = act(y + bias) (pre = y + bias kept for gelu when asked).
template <int W>
struct BiasActivation {
  using V = simd::Vec<W>;
  using F = typename V::F;
  static RIG_SIMD_INLINE void run(float* y, float* pre, const float* bias, std::int64_t rows,
                                  std::int64_t cols, Activation act) {
    for (std::int64_t r = 0; r < rows; ++r) {
      float* yr = y + r * cols;
      if (bias != nullptr) {
        for (std::int64_t c = 0; c < cols; ++c) yr[c] += bias[c];
      }
      switch (act) {
        case Activation::none:
          break;
        case Activation::relu:
          UnaryKernel<W>::map(yr, yr, cols,
                              [](const F& v) RIG_SIMD_LAMBDA { return v < 0.0F ? F{} : v; });
          break;
        case Activation::gelu:
          if (pre != nullptr) std::copy(yr, yr + cols, pre + r * cols);
          UnaryKernel<W>::map(yr, yr, cols, [](const F& v) RIG_SIMD_LAMBDA { return V::gelu(v); });
          break;
        case Activation::tanh:
          UnaryKernel<W>::map(yr, yr, cols, [](const F& v) RIG_SIMD_LAMBDA { return V::tanh(v); });
          break;
        case Activation::sigmoid:
          UnaryKernel<W>::map(yr, yr, cols,
                              [](const F& v) RIG_SIMD_LAMBDA { return V::sigmoid(v); });
          break;
      }
    }
  }
};

// ActivationBackward's column chunk (its scratch row).
constexpr std::int64_t kActivationChunk = 64;

// Rows [r0, r1) of dz = g * act'(saved), with db_rows[c] += dz[r, c]. dz is
// written as f32 (dz) or only rounded to bf16 (dz_bf16), one of them or
// neither (activation none, db only).
template <int W>
struct ActivationBackward {
  using V = simd::Vec<W>;
  using F = typename V::F;
  // One row's dz into d (w columns); not called for none, whose dz is g.
  static RIG_SIMD_INLINE void row(Activation act, float relu_scale, const float* gr,
                                  const float* sr, float* d, std::int64_t w) {
    switch (act) {
      case Activation::none:
        break;
      case Activation::relu:
        // g * 1 is g exactly: the plain relu pays one multiply, not a second loop.
        UnaryKernel<W>::map2(gr, sr, d, w, [relu_scale](const F& gv, const F& yv) RIG_SIMD_LAMBDA {
          return yv > 0.0F ? gv * relu_scale : F{};
        });
        break;
      case Activation::gelu:
        UnaryKernel<W>::map2(gr, sr, d, w, [](const F& gv, const F& zv) RIG_SIMD_LAMBDA {
          return gv * V::gelu_grad(zv);
        });
        break;
      case Activation::tanh:
        for (std::int64_t c = 0; c < w; ++c) d[c] = math::tanh_backward(gr[c], sr[c]);
        break;
      case Activation::sigmoid:
        for (std::int64_t c = 0; c < w; ++c) d[c] = math::sigmoid_backward(gr[c], sr[c]);
        break;
    }
  }

  static RIG_SIMD_INLINE void run(Activation act, float relu_scale, const float* g,
                                  const float* saved, float* dz, std::uint16_t* dz_bf16,
                                  float* db_rows, std::int64_t r0, std::int64_t r1,
                                  std::int64_t cols) {
    alignas(64) float scratch[kActivationChunk];
    for (std::int64_t r = r0; r < r1; ++r) {
      for (std::int64_t c0 = 0; c0 < cols; c0 += kActivationChunk) {
        const std::int64_t w = std::min(kActivationChunk, cols - c0);
        const std::int64_t at = r * cols + c0;
        // dz's values: g itself for none, else computed into dz's row or scratch.
        const float* values = g + at;
        if (act != Activation::none) {
          float* d = dz == nullptr ? scratch : dz + at;
          row(act, relu_scale, g + at, saved == nullptr ? nullptr : saved + at, d, w);
          values = d;
        }
        if (dz_bf16 != nullptr) {
          std::uint16_t* out = dz_bf16 + at;
          for (std::int64_t c = 0; c < w; ++c) out[c] = float_to_bfloat16_bits(values[c]);
        }
        if (db_rows != nullptr) {
          float* out = db_rows + c0;
          for (std::int64_t c = 0; c < w; ++c) out[c] += values[c];
        }
      }
    }
  }
};

}  // namespace

void unary(Unary op, const float* x, float* y, std::int64_t n, float scalar) {
  parallel_for(n, kGrain, [&](std::int64_t begin, std::int64_t end) {
    simd::dispatch<UnaryForward>(op, x + begin, y + begin, end - begin, scalar);
  });
}

void unary_backward(Unary op, const float* g, const float* x, const float* y, float* dx,
                    std::int64_t n, float scalar) {
  parallel_for(n, kGrain, [&](std::int64_t begin, std::int64_t end) {
    simd::dispatch<UnaryBackward>(op, g + begin, x == nullptr ? nullptr : x + begin,
                                  y == nullptr ? nullptr : y + begin, dx + begin, end - begin,
                                  scalar);
  });
}

void binary(Binary op, const StridedPlan<3>& plan, const float* a, const float* b, float* out) {
  const std::int64_t so = plan.inner_stride(0);
  const std::int64_t sa = plan.inner_stride(1);
  const std::int64_t sb = plan.inner_stride(2);
  run_plan(plan, [&](const std::array<std::int64_t, 3>& off, std::int64_t begin, std::int64_t end) {
    // The output is contiguous (so == 1) for every caller.
    binary_range(op, a + off[1] + begin * sa, sa, b + off[2] + begin * sb, sb,
                 out + off[0] + begin * so, end - begin);
  });
}

void strided_copy(const StridedPlan<2>& plan, const float* x, float* out) {
  const std::int64_t so = plan.inner_stride(0);
  const std::int64_t sx = plan.inner_stride(1);
  run_plan(plan, [&](const std::array<std::int64_t, 2>& off, std::int64_t begin, std::int64_t end) {
    copy_range(x + off[1] + begin * sx, sx, out + off[0] + begin * so, end - begin);
  });
}

void bias_activation(float* y, float* pre, const float* bias, std::int64_t rows, std::int64_t cols,
                     Activation activation) {
  if (bias == nullptr && activation == Activation::none) return;
  const std::int64_t grain = std::max<std::int64_t>(1, kGrain / std::max<std::int64_t>(1, cols));
  parallel_for(rows, grain, [&](std::int64_t begin, std::int64_t end) {
    simd::dispatch<BiasActivation>(y + begin * cols, pre == nullptr ? nullptr : pre + begin * cols,
                                   bias, end - begin, cols, activation);
  });
}

namespace {

// Tasks of whole rows, read and written in order: the column-block split
// this replaced strode through memory a row apart, and the FFN's relu
// backward took 2.5 times as long (its share of the bf16 Transformer step in
// perf: 2.7 % before, 1.1 % after). db sums each block of kRowBlock rows
// into its own partial row, then the partials in block order: the same bits
// whatever the thread count.
void activation_backward_blocks(Activation activation, const float* g, const float* saved,
                                float* dz, std::uint16_t* dz_bf16, float* db, std::int64_t rows,
                                std::int64_t cols, float relu_scale) {
  constexpr std::int64_t kRowBlock = 64;
  const std::int64_t blocks = (rows + kRowBlock - 1) / kRowBlock;
  // The partials come from the caching allocator: a fresh heap block of this
  // size would be mapped and page-faulted on every call.
  const bool blocked_db = db != nullptr && blocks > 1;
  const Scratch partials =
      blocked_db ? Scratch(static_cast<std::size_t>(blocks * cols) * sizeof(float)) : Scratch();
  float* partial = blocked_db ? partials.as<float>() : nullptr;
  if (blocked_db) std::fill(partial, partial + blocks * cols, 0.0F);
  if (db != nullptr && !blocked_db) std::fill(db, db + cols, 0.0F);
  const std::int64_t grain =
      std::max<std::int64_t>(1, kGrain / std::max<std::int64_t>(1, kRowBlock * cols));
  parallel_for(blocks, grain, [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t blk = begin; blk < end; ++blk) {
      float* db_rows = !blocked_db ? db : partial + blk * cols;
      simd::dispatch<ActivationBackward>(activation, relu_scale, g, saved, dz, dz_bf16, db_rows,
                                         blk * kRowBlock, std::min(rows, (blk + 1) * kRowBlock),
                                         cols);
    }
  });
  if (!blocked_db) return;
  parallel_for(cols, kGrain / blocks + 1, [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t c = begin; c < end; ++c) {
      float total = 0.0F;
      for (std::int64_t blk = 0; blk < blocks; ++blk) total += partial[blk * cols + c];
      db[c] = total;
    }
  });
}

}  // namespace

void activation_backward(Activation activation, const float* g, const float* saved, float* dz,
                         float* db, std::int64_t rows, std::int64_t cols, float relu_scale) {
  if (activation == Activation::none && db == nullptr) return;
  activation_backward_blocks(activation, g, saved, activation == Activation::none ? nullptr : dz,
                             nullptr, db, rows, cols, relu_scale);
}

void activation_backward_bf16(Activation activation, const float* g, const float* saved,
                              std::uint16_t* dz_bf16, float* db, std::int64_t rows,
                              std::int64_t cols, float relu_scale) {
  activation_backward_blocks(activation, g, saved, nullptr, dz_bf16, db, rows, cols, relu_scale);
}

}  // namespace rig::cpu
