// Layer normalisation over contiguous rows [rows, d] (Backend::layer_norm_*,
// core/cpu/layer_norm.cpp):
//   forward, one block per row: mean, rstd = 1 / sqrt(mean((x - mean)^2) + eps)
//     (two passes: the squared deviations, not E[x^2] - mean^2), y = (x -
//     mean) rstd gamma + beta (gamma, beta may be null: 1, 0);
//   backward dx, one block per row: dx = rstd (g gamma - mean(g gamma) - xhat
//     mean(g gamma xhat)) with xhat = (x - mean) rstd;
//   backward dgamma = sum_r g xhat, dbeta = sum_r g: one thread per column
//     summing the rows in order (grid-stride over columns), deterministic and
//     without atomics.
// Storage type: `type` (f32, f16 or bf16) is the type of x, y, g and dx;
// gamma, beta, mean, rstd, dgamma and dbeta stay f32. The pointers keep their
// float* types, and for f16/bf16 x, y, g, dx hold 16-bit values (read and
// written through load_element/store_element). The math is f32 throughout;
// each output is rounded once, at its store.
#pragma once

#include <cstdint>

#include "cuda/kernels/common.hpp"
#include "cuda/kernels/element_type.hpp"
#include "rig/math/device_math.hpp"
#include "simt/collectives.hpp"

namespace rig::kernels {

struct LayerNormForward {
  const float* x = nullptr;
  const float* gamma = nullptr;  // [d] or null
  const float* beta = nullptr;   // [d] or null
  float* y = nullptr;            // [rows, d]
  float* mean = nullptr;         // [rows]
  float* rstd = nullptr;         // [rows]
  std::int64_t rows = 0, d = 0;
  float eps = 1e-5F;
  ElementType type = ElementType::f32;  // of x and y

  simt::LaunchShape plan(const simt::DeviceProperties& device) const {
    return plan_row_kernel(device, rows, d);
  }

  template <class Ctx>
  RIG_HD void operator()(Ctx& ctx) const {
    using M = math::DeviceMath;
    const std::int64_t row = block_row(ctx);
    if (row >= rows) return;
    const std::int64_t first = ctx.thread_rank();
    const std::int64_t step = ctx.block_threads();
    const std::int64_t base = row * d;  // element offset of the row
    const float inv_d = 1.0F / static_cast<float>(d);
    float acc = 0.0F;
    for (std::int64_t j = first; j < d; j += step) acc += load_element(x, type, base + j);
    const float mu = simt::block_sum(ctx, acc) * inv_d;
    acc = 0.0F;
    for (std::int64_t j = first; j < d; j += step) {
      const float c = load_element(x, type, base + j) - mu;
      acc += c * c;
    }
    const float rs = 1.0F / M::sqrt(simt::block_sum(ctx, acc) * inv_d + eps);
    if (ctx.thread_rank() == 0) {
      mean[row] = mu;
      rstd[row] = rs;
    }
    for (std::int64_t j = first; j < d; j += step) {
      float v = (load_element(x, type, base + j) - mu) * rs;
      if (gamma != nullptr) v = v * gamma[j];
      if (beta != nullptr) v = v + beta[j];
      store_element(y, type, base + j, v);
    }
  }
};

// dx of every row (dx must not be null; launch nothing when it is).
struct LayerNormBackwardDx {
  const float* x = nullptr;
  const float* gamma = nullptr;  // [d] or null
  const float* mean = nullptr;
  const float* rstd = nullptr;
  const float* g = nullptr;  // upstream gradient [rows, d]
  float* dx = nullptr;       // [rows, d]
  std::int64_t rows = 0, d = 0;
  ElementType type = ElementType::f32;  // of x, g and dx

  simt::LaunchShape plan(const simt::DeviceProperties& device) const {
    return plan_row_kernel(device, rows, d);
  }

  template <class Ctx>
  RIG_HD void operator()(Ctx& ctx) const {
    const std::int64_t row = block_row(ctx);
    if (row >= rows) return;
    const std::int64_t first = ctx.thread_rank();
    const std::int64_t step = ctx.block_threads();
    const std::int64_t base = row * d;  // element offset of the row
    const float mu = mean[row];
    const float rs = rstd[row];
    const float inv_d = 1.0F / static_cast<float>(d);
    float sa = 0.0F, sb = 0.0F;
    for (std::int64_t j = first; j < d; j += step) {
      const float gj = load_element(g, type, base + j);
      const float dh = gamma != nullptr ? gj * gamma[j] : gj;
      sa += dh;
      sb += dh * (load_element(x, type, base + j) - mu);
    }
    const float mean_dh = simt::block_sum(ctx, sa) * inv_d;
    const float mean_dh_xhat = simt::block_sum(ctx, sb) * rs * inv_d;
    for (std::int64_t j = first; j < d; j += step) {
      const float gj = load_element(g, type, base + j);
      const float dh = gamma != nullptr ? gj * gamma[j] : gj;
      const float xj = load_element(x, type, base + j);
      store_element(dx, type, base + j, rs * (dh - mean_dh - (xj - mu) * rs * mean_dh_xhat));
    }
  }
};

// dgamma and dbeta (either may be null): thread per column, rows in order.
struct LayerNormBackwardParams {
  const float* x = nullptr;
  const float* mean = nullptr;
  const float* rstd = nullptr;
  const float* g = nullptr;
  float* dgamma = nullptr;  // [d] or null
  float* dbeta = nullptr;   // [d] or null
  std::int64_t rows = 0, d = 0;
  ElementType type = ElementType::f32;  // of x and g

  simt::LaunchShape plan(const simt::DeviceProperties& device) const {
    return plan_grid_stride(device, d);
  }

  template <class Ctx>
  RIG_HD void operator()(Ctx& ctx) const {
    for (std::int64_t j = global_thread(ctx); j < d; j += grid_threads(ctx)) {
      float sg = 0.0F, sb = 0.0F;
      for (std::int64_t r = 0; r < rows; ++r) {
        const float gv = load_element(g, type, r * d + j);
        sg += gv * (load_element(x, type, r * d + j) - mean[r]) * rstd[r];
        sb += gv;
      }
      if (dgamma != nullptr) dgamma[j] = sg;
      if (dbeta != nullptr) dbeta[j] = sb;
    }
  }
};

}  // namespace rig::kernels
