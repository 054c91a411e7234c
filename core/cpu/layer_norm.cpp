#include "cpu/layer_norm.hpp"

#include <algorithm>
#include <cmath>

#include "cpu/parallel.hpp"
#include "cpu/simd.hpp"

namespace rig::cpu {

namespace {

constexpr std::int64_t kGrain = 8192;  // elements per task
// dgamma/dbeta are summed in this many fixed row blocks (then reduced), so the
// result does not depend on the thread count.
constexpr std::int64_t kMaxBlocks = 16;

std::int64_t param_blocks(std::int64_t rows) {
  return std::clamp<std::int64_t>(rows, 1, kMaxBlocks);
}

template <int W>
struct Forward {
  using V = simd::Vec<W>;
  using F = typename V::F;
  static RIG_SIMD_INLINE void run(const float* x, const float* gamma, const float* beta, float* y,
                                  float* mean, float* rstd, std::int64_t rows, std::int64_t d,
                                  float eps) {
    const float inv_d = 1.0F / static_cast<float>(d);
    for (std::int64_t r = 0; r < rows; ++r) {
      const float* xr = x + r * d;
      float* yr = y + r * d;
      F acc{};
      std::int64_t i = 0;
      for (; i + W <= d; i += W) acc += V::load(xr + i);
      if (i < d) acc += V::load_partial(xr + i, d - i, 0.0F);
      const float mu = V::sum(acc) * inv_d;
      // Two passes over the row (in L1): the sum of squared deviations is
      // exact where E[x^2] - mu^2 would cancel.
      acc = F{};
      for (i = 0; i + W <= d; i += W) {
        const F c = V::load(xr + i) - mu;
        acc += c * c;
      }
      if (i < d) {
        const F c = V::load_partial(xr + i, d - i, mu) - mu;
        acc += c * c;
      }
      const float rs = 1.0F / std::sqrt(V::sum(acc) * inv_d + eps);
      mean[r] = mu;
      rstd[r] = rs;
      if (gamma != nullptr && beta != nullptr) {
        for (std::int64_t j = 0; j < d; ++j) yr[j] = (xr[j] - mu) * rs * gamma[j] + beta[j];
      } else if (gamma != nullptr) {
        for (std::int64_t j = 0; j < d; ++j) yr[j] = (xr[j] - mu) * rs * gamma[j];
      } else if (beta != nullptr) {
        for (std::int64_t j = 0; j < d; ++j) yr[j] = (xr[j] - mu) * rs + beta[j];
      } else {
        for (std::int64_t j = 0; j < d; ++j) yr[j] = (xr[j] - mu) * rs;
      }
    }
  }
};

// Rows [r0, r1): dx, and this block's partial dgamma/dbeta.
template <int W>
struct Backward {
  using V = simd::Vec<W>;
  using F = typename V::F;
  static RIG_SIMD_INLINE void run(const float* x, const float* gamma, const float* mean,
                                  const float* rstd, const float* g, float* dx, float* pgamma,
                                  float* pbeta, std::int64_t r0, std::int64_t r1, std::int64_t d) {
    const float inv_d = 1.0F / static_cast<float>(d);
    if (pgamma != nullptr) std::fill(pgamma, pgamma + d, 0.0F);
    if (pbeta != nullptr) std::fill(pbeta, pbeta + d, 0.0F);
    for (std::int64_t r = r0; r < r1; ++r) {
      const float* xr = x + r * d;
      const float* gr = g + r * d;
      const float mu = mean[r];
      const float rs = rstd[r];
      if (pgamma != nullptr) {
        for (std::int64_t j = 0; j < d; ++j) pgamma[j] += gr[j] * (xr[j] - mu) * rs;
      }
      if (pbeta != nullptr) {
        for (std::int64_t j = 0; j < d; ++j) pbeta[j] += gr[j];
      }
      if (dx == nullptr) continue;
      // dxhat = g * gamma; dx = rstd (dxhat - mean(dxhat) - xhat mean(dxhat xhat)).
      F sa{};
      F sb{};
      std::int64_t i = 0;
      for (; i + W <= d; i += W) {
        const F dh = gamma != nullptr ? V::load(gr + i) * V::load(gamma + i) : V::load(gr + i);
        sa += dh;
        sb += dh * (V::load(xr + i) - mu);
      }
      if (i < d) {
        const std::int64_t k = d - i;
        const F gv = V::load_partial(gr + i, k, 0.0F);
        const F dh = gamma != nullptr ? gv * V::load_partial(gamma + i, k, 0.0F) : gv;
        sa += dh;
        sb += dh * (V::load_partial(xr + i, k, mu) - mu);
      }
      const float mean_dh = V::sum(sa) * inv_d;
      const float mean_dh_xhat = V::sum(sb) * rs * inv_d;
      float* dr = dx + r * d;
      if (gamma != nullptr) {
        for (std::int64_t j = 0; j < d; ++j) {
          dr[j] = rs * (gr[j] * gamma[j] - mean_dh - (xr[j] - mu) * rs * mean_dh_xhat);
        }
      } else {
        for (std::int64_t j = 0; j < d; ++j) {
          dr[j] = rs * (gr[j] - mean_dh - (xr[j] - mu) * rs * mean_dh_xhat);
        }
      }
    }
  }
};

}  // namespace

void layer_norm_forward(const float* x, const float* gamma, const float* beta, float* y,
                        float* mean, float* rstd, std::int64_t rows, std::int64_t d, float eps) {
  const std::int64_t grain = std::max<std::int64_t>(1, kGrain / std::max<std::int64_t>(1, d));
  parallel_for(rows, grain, [&](std::int64_t begin, std::int64_t end) {
    simd::dispatch<Forward>(x + begin * d, gamma, beta, y + begin * d, mean + begin, rstd + begin,
                            end - begin, d, eps);
  });
}

std::int64_t layer_norm_scratch_size(std::int64_t rows, std::int64_t d) {
  return 2 * param_blocks(rows) * d;
}

void layer_norm_backward(const float* x, const float* gamma, const float* mean, const float* rstd,
                         const float* g, float* dx, float* dgamma, float* dbeta, std::int64_t rows,
                         std::int64_t d, float* scratch) {
  const std::int64_t blocks = param_blocks(rows);
  float* pgamma = scratch;
  float* pbeta = scratch + blocks * d;
  parallel_for(blocks, 1, [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t b = begin; b < end; ++b) {
      const std::int64_t r0 = rows * b / blocks;
      const std::int64_t r1 = rows * (b + 1) / blocks;
      simd::dispatch<Backward>(x, gamma, mean, rstd, g, dx,
                               dgamma != nullptr ? pgamma + b * d : nullptr,
                               dbeta != nullptr ? pbeta + b * d : nullptr, r0, r1, d);
    }
  });
  // Reduce the block partials in a fixed order.
  for (float* out : {dgamma, dbeta}) {
    if (out == nullptr) continue;
    const float* partial = out == dgamma ? pgamma : pbeta;
    std::copy(partial, partial + d, out);
    for (std::int64_t b = 1; b < blocks; ++b) {
      const float* p = partial + b * d;
      for (std::int64_t j = 0; j < d; ++j) out[j] += p[j];
    }
  }
}

}  // namespace rig::cpu
