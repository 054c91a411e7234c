#include "cpu/cross_entropy.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

#include "cpu/parallel.hpp"
#include "cpu/simd.hpp"
#include "rig/math/cross_entropy.hpp"

namespace rig::cpu {

namespace {

constexpr std::int64_t kGrain = 8192;  // elements per task

template <int W>
struct Forward {
  using V = simd::Vec<W>;
  using F = typename V::F;
  static RIG_SIMD_INLINE void run(const float* x, const std::int64_t* labels, std::int64_t rows,
                                  std::int64_t c, float on, float off, float* loss, float* lse) {
    constexpr float kNegInf = -std::numeric_limits<float>::infinity();
    for (std::int64_t r = 0; r < rows; ++r) {
      const float* xr = x + r * c;
      F mv = V::splat(kNegInf);
      std::int64_t i = 0;
      for (; i + W <= c; i += W) mv = V::max(mv, V::load(xr + i));
      if (i < c) mv = V::max(mv, V::load_partial(xr + i, c - i, kNegInf));
      const float m = V::max_of(mv);
      F es{};
      F xs{};
      for (i = 0; i + W <= c; i += W) {
        const F v = V::load(xr + i);
        es += V::exp(v - m);
        xs += v;
      }
      if (i < c) {
        es += V::exp(V::load_partial(xr + i, c - i, kNegInf) - m);
        xs += V::load_partial(xr + i, c - i, 0.0F);
      }
      const float row_lse = m + std::log(V::sum(es));
      lse[r] = row_lse;
      const float target = xr[labels[r]];
      loss[r] =
          math::smoothed_row_loss(row_lse, target, off != 0.0F ? V::sum(xs) : 0.0F, {on, off});
    }
  }
};

template <int W>
struct Backward {
  using V = simd::Vec<W>;
  using F = typename V::F;
  static RIG_SIMD_INLINE void run(const float* x, const std::int64_t* labels, const float* lse,
                                  const float* row_scale, float scale, std::int64_t rows,
                                  std::int64_t c, float on, float off, float* dx) {
    for (std::int64_t r = 0; r < rows; ++r) {
      const float* xr = x + r * c;
      float* dr = dx + r * c;
      const float s = row_scale != nullptr ? scale * row_scale[r] : scale;
      const float shift = lse[r];
      std::int64_t j = 0;
      for (; j + W <= c; j += W) {
        V::store(dr + j, math::smoothed_grad(V::exp(V::load(xr + j) - shift), off, s));
      }
      if (j < c) {
        const F v = V::load_partial(xr + j, c - j, 0.0F);
        V::store_partial(dr + j, math::smoothed_grad(V::exp(v - shift), off, s), c - j);
      }
      dr[labels[r]] -= math::smoothed_label_correction({on, off}, s);
    }
  }
};

}  // namespace

void cross_entropy_forward(const float* x, const std::int64_t* labels, std::int64_t rows,
                           std::int64_t c, float on, float off, float* loss, float* lse) {
  const std::int64_t grain = std::max<std::int64_t>(1, kGrain / std::max<std::int64_t>(1, c));
  parallel_for(rows, grain, [&](std::int64_t begin, std::int64_t end) {
    simd::dispatch<Forward>(x + begin * c, labels + begin, end - begin, c, on, off, loss + begin,
                            lse + begin);
  });
}

void cross_entropy_backward(const float* x, const std::int64_t* labels, const float* lse,
                            const float* row_scale, float scale, std::int64_t rows, std::int64_t c,
                            float on, float off, float* dx) {
  const std::int64_t grain = std::max<std::int64_t>(1, kGrain / std::max<std::int64_t>(1, c));
  parallel_for(rows, grain, [&](std::int64_t begin, std::int64_t end) {
    simd::dispatch<Backward>(x + begin * c, labels + begin, lse + begin,
                             row_scale == nullptr ? nullptr : row_scale + begin, scale, end - begin,
                             c, on, off, dx + begin * c);
  });
}

namespace {

struct PaddedSums {
  double numerator = 0.0;
  double denominator = 0.0;
};

PaddedSums padded_sums(const float* xent, const float* w, std::int64_t rows, double constant) {
  PaddedSums sums;
  for (std::int64_t i = 0; i < rows; ++i) {
    const double wi = w[i];
    sums.numerator += (static_cast<double>(xent[i]) - constant) * wi * wi;
    sums.denominator += wi;
  }
  return sums;
}

}  // namespace

void padded_loss(const float* xent, const float* w, std::int64_t rows, double constant,
                 float* loss) {
  const PaddedSums s = padded_sums(xent, w, rows, constant);
  loss[0] = static_cast<float>(s.denominator != 0.0 ? s.numerator / s.denominator : 0.0);
}

void padded_loss_backward(const float* xent, const float* w, std::int64_t rows, double constant,
                          const float* upstream, float* row_scale, float* x_scale, float* dw) {
  const PaddedSums s = padded_sums(xent, w, rows, constant);
  const float g = upstream[0];
  if (s.denominator == 0.0) {
    x_scale[0] = 0.0F;
    for (std::int64_t i = 0; i < rows; ++i) row_scale[i] = 0.0F;
    if (dw != nullptr) std::fill(dw, dw + rows, 0.0F);
    return;
  }
  // d/dx of w_r^2 xent_r / W: (softmax - q) w_r^2 / W.
  x_scale[0] = static_cast<float>(g / s.denominator);
  for (std::int64_t i = 0; i < rows; ++i) row_scale[i] = w[i] * w[i];
  if (dw == nullptr) return;
  // L = sum_i w_i^2 t_i / W with t_i = xent_i - constant, W = sum_i w_i:
  // dL/dw_i = (2 w_i t_i - L) / W.
  const double l = s.numerator / s.denominator;
  for (std::int64_t i = 0; i < rows; ++i) {
    const double t = static_cast<double>(xent[i]) - constant;
    dw[i] = static_cast<float>(g * (2.0 * w[i] * t - l) / s.denominator);
  }
}

}  // namespace rig::cpu
