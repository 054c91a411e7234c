#include "cpu/softmax.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

#include "cpu/parallel.hpp"
#include "cpu/simd.hpp"

namespace rig::cpu {

namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();
constexpr std::int64_t kGrain = 8192;  // elements per task

template <int W>
struct SoftmaxRow {
  using V = simd::Vec<W>;
  using F = typename V::F;

  static RIG_SIMD_INLINE float max_of(const float* x, std::int64_t n) {
    F m = V::splat(kNegInf);
    std::int64_t i = 0;
    for (; i + W <= n; i += W) m = V::max(m, V::load(x + i));
    if (i < n) m = V::max(m, V::load_partial(x + i, n - i, kNegInf));
    return V::max_of(m);
  }

  // y = e^(x - shift) (y may alias x); returns the sum.
  static RIG_SIMD_INLINE float exp_sum(const float* x, float* y, std::int64_t n, float shift) {
    F s{};
    std::int64_t i = 0;
    for (; i + W <= n; i += W) {
      const F e = V::exp(V::load(x + i) - shift);
      V::store(y + i, e);
      s += e;
    }
    if (i < n) {
      const F e = V::exp(V::load_partial(x + i, n - i, kNegInf) - shift);
      V::store_partial(y + i, e, n - i);
      s += e;
    }
    return V::sum(s);
  }

  static RIG_SIMD_INLINE void run(const float* x, const std::uint8_t* mask,
                                  std::int64_t mask_stride, float* y, std::int64_t n, bool log) {
    const float* src = x;
    if (mask != nullptr) {
      if (mask_stride == 0) {
        if (*mask == 0) {  // the whole row is excluded
          std::fill(y, y + n, log ? kNegInf : 0.0F);
          return;
        }
      } else {
        for (std::int64_t i = 0; i < n; ++i) y[i] = mask[i] != 0 ? x[i] : kNegInf;
        src = y;
      }
    }
    const float m = max_of(src, n);
    if (m == kNegInf) {  // nothing kept
      std::fill(y, y + n, log ? kNegInf : 0.0F);
      return;
    }
    if (log) {
      // y = x - (m + log sum e^(x - m)); excluded entries stay -inf.
      const float shift = m + std::log(exp_sum(src, y, n, m));
      if (src == x) {
        for (std::int64_t i = 0; i < n; ++i) y[i] = x[i] - shift;
      } else {
        for (std::int64_t i = 0; i < n; ++i) y[i] = mask[i] != 0 ? x[i] - shift : kNegInf;
      }
      return;
    }
    const float inv = 1.0F / exp_sum(src, y, n, m);
    for (std::int64_t i = 0; i < n; ++i) y[i] *= inv;
  }
};

template <int W>
struct SoftmaxBackward {
  using V = simd::Vec<W>;
  using F = typename V::F;
  static RIG_SIMD_INLINE void run(const float* y, const float* g, float* dx, std::int64_t rows,
                                  std::int64_t n, bool log) {
    for (std::int64_t r = 0; r < rows; ++r) {
      const float* yr = y + r * n;
      const float* gr = g + r * n;
      float* dr = dx + r * n;
      F acc{};
      std::int64_t i = 0;
      if (log) {
        // Sum of g over the kept entries (y > -inf).
        for (; i + W <= n; i += W) {
          acc += V::load(yr + i) == kNegInf ? F{} : V::load(gr + i);
        }
        if (i < n) {
          const F yv = V::load_partial(yr + i, n - i, kNegInf);
          acc += yv == kNegInf ? F{} : V::load_partial(gr + i, n - i, 0.0F);
        }
        const float s = V::sum(acc);
        i = 0;
        for (; i + W <= n; i += W) {
          const F yv = V::load(yr + i);
          const F d = V::load(gr + i) - V::exp(yv) * s;
          V::store(dr + i, yv == kNegInf ? F{} : d);
        }
        for (; i < n; ++i) dr[i] = yr[i] == kNegInf ? 0.0F : gr[i] - std::exp(yr[i]) * s;
      } else {
        for (; i + W <= n; i += W) acc += V::load(gr + i) * V::load(yr + i);
        if (i < n)
          acc += V::load_partial(gr + i, n - i, 0.0F) * V::load_partial(yr + i, n - i, 0.0F);
        const float dot = V::sum(acc);
        for (std::int64_t j = 0; j < n; ++j) dr[j] = yr[j] * (gr[j] - dot);
      }
    }
  }
};

}  // namespace

void softmax_forward(const StridedPlan<2>& plan, const float* x, const std::uint8_t* mask, float* y,
                     bool log) {
  const std::int64_t n = plan.inner();
  const std::int64_t mask_stride = plan.inner_stride(1);
  const std::int64_t grain = std::max<std::int64_t>(1, kGrain / std::max<std::int64_t>(1, n));
  parallel_for(plan.outer(), grain, [&](std::int64_t begin, std::int64_t end) {
    // One dispatch per row: the row loop (for_each_row) stays outside the
    // SIMD code, where nothing but forced inlining may happen.
    for_each_row(plan, begin, end, [&](const std::array<std::int64_t, 2>& off) {
      simd::dispatch<SoftmaxRow>(x + off[0], mask == nullptr ? nullptr : mask + off[1], mask_stride,
                                 y + off[0], n, log);
    });
  });
}

void softmax_backward(const float* y, const float* g, float* dx, std::int64_t rows, std::int64_t n,
                      bool log) {
  const std::int64_t grain = std::max<std::int64_t>(1, kGrain / std::max<std::int64_t>(1, n));
  parallel_for(rows, grain, [&](std::int64_t begin, std::int64_t end) {
    simd::dispatch<SoftmaxBackward>(y + begin * n, g + begin * n, dx + begin * n, end - begin, n,
                                    log);
  });
}

}  // namespace rig::cpu
