#include "cpu/layer_norm.hpp"

#include <algorithm>
#include <cmath>

#include "cpu/kernel_attributes.hpp"
#include "cpu/parallel.hpp"
#include "cpu/vec_math.hpp"

namespace rig::cpu {

namespace {

constexpr std::int64_t kGrain = 8192;  // elements per task
// dgamma/dbeta are summed in this many fixed row blocks (then reduced), so the
// result does not depend on the thread count.
constexpr std::int64_t kMaxBlocks = 16;

std::int64_t param_blocks(std::int64_t rows) {
  return std::clamp<std::int64_t>(rows, 1, kMaxBlocks);
}

inline float lane_sum(const float* x, std::int64_t n) {
  float lanes[16] = {};
  std::int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    for (int l = 0; l < 16; ++l) lanes[l] += x[i + l];
  }
  float s = 0.0F;
  for (; i < n; ++i) s += x[i];
  return s + vec::tree_sum16(lanes);
}

RIG_CPU_KERNEL void forward_rows(const float* x, const float* gamma, const float* beta, float* y,
                                 float* mean, float* rstd, std::int64_t rows, std::int64_t d,
                                 float eps) {
  const float inv_d = 1.0F / static_cast<float>(d);
  for (std::int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * d;
    float* yr = y + r * d;
    const float mu = lane_sum(xr, d) * inv_d;
    // Two passes over the row (in L1): sum of squared deviations is exact
    // where E[x^2] - mu^2 would cancel.
    float lanes[16] = {};
    std::int64_t i = 0;
    for (; i + 16 <= d; i += 16) {
      for (int l = 0; l < 16; ++l) {
        const float c = xr[i + l] - mu;
        lanes[l] += c * c;
      }
    }
    float var = 0.0F;
    for (; i < d; ++i) var += (xr[i] - mu) * (xr[i] - mu);
    var += vec::tree_sum16(lanes);
    var *= inv_d;
    const float rs = 1.0F / std::sqrt(var + eps);
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

// Rows [r0, r1): dx, and this block's partial dgamma/dbeta.
RIG_CPU_KERNEL void backward_rows(const float* x, const float* gamma, const float* mean,
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
    float lane_a[16] = {};
    float lane_b[16] = {};
    std::int64_t i = 0;
    for (; i + 16 <= d; i += 16) {
      for (int l = 0; l < 16; ++l) {
        const float dh = gamma != nullptr ? gr[i + l] * gamma[i + l] : gr[i + l];
        lane_a[l] += dh;
        lane_b[l] += dh * (xr[i + l] - mu);
      }
    }
    float sa = 0.0F;
    float sb = 0.0F;
    for (; i < d; ++i) {
      const float dh = gamma != nullptr ? gr[i] * gamma[i] : gr[i];
      sa += dh;
      sb += dh * (xr[i] - mu);
    }
    sa += vec::tree_sum16(lane_a);
    sb += vec::tree_sum16(lane_b);
    const float mean_dh = sa * inv_d;
    const float mean_dh_xhat = sb * rs * inv_d;
    float* dr = dx + r * d;
    for (std::int64_t j = 0; j < d; ++j) {
      const float dh = gamma != nullptr ? gr[j] * gamma[j] : gr[j];
      dr[j] = rs * (dh - mean_dh - (xr[j] - mu) * rs * mean_dh_xhat);
    }
  }
}

}  // namespace

void layer_norm_forward(const float* x, const float* gamma, const float* beta, float* y,
                        float* mean, float* rstd, std::int64_t rows, std::int64_t d, float eps) {
  const std::int64_t grain = std::max<std::int64_t>(1, kGrain / std::max<std::int64_t>(1, d));
  parallel_for(rows, grain, [&](std::int64_t begin, std::int64_t end) {
    forward_rows(x + begin * d, gamma, beta, y + begin * d, mean + begin, rstd + begin, end - begin,
                 d, eps);
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
      backward_rows(x, gamma, mean, rstd, g, dx, dgamma != nullptr ? pgamma + b * d : nullptr,
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
