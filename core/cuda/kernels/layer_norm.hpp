// Layer normalisation over contiguous rows [rows, d] (Backend::layer_norm_*,
// core/cpu/layer_norm.cpp):
//   forward, one block per row: mean, rstd = 1 / sqrt(mean((x - mean)^2) + eps)
//     (two passes: the squared deviations, not E[x^2] - mean^2), y = (x -
//     mean) rstd gamma + beta (gamma, beta may be null: 1, 0);
//   backward dx, one block per row: dx = rstd (g gamma - mean(g gamma) - xhat
//     mean(g gamma xhat)) with xhat = (x - mean) rstd;
//   backward dgamma = sum_r g xhat, dbeta = sum_r g in two stages,
//     deterministic and without atomics: one thread per (block of 64 rows,
//     column) sums its rows in order into a partial row, then ColumnTotals
//     (elementwise.hpp) adds the partial rows in order. (One thread per
//     column over all the rows took 1.7 ms for 8000 x 512 on an H100: 512
//     threads cannot fill the GPU.)
// Storage type: `type` (f32, f16 or bf16) is the type of x, y, g and dx;
// `param_type` that of gamma, beta, dgamma and dbeta (f32, or a 16-bit
// model's own: read as they are, the gradients rounded once by
// ColumnTotals); mean and rstd stay f32. The pointers keep their float*
// types, and 16-bit tensors hold 16-bit values (read and written through
// load_element/store_element). The math is f32 throughout; each output is
// rounded once, at its store.
#pragma once

#include <cstdint>

#include "cuda/kernels/common.hpp"
#include "cuda/kernels/element_type.hpp"
#include "cuda/kernels/elementwise.hpp"
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
  ElementType type = ElementType::f32;        // of x and y
  ElementType param_type = ElementType::f32;  // of gamma and beta

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
      if (gamma != nullptr) v = v * load_element(gamma, param_type, j);
      if (beta != nullptr) v = v + load_element(beta, param_type, j);
      store_element(y, type, base + j, v);
    }
  }
};

// dx of every row (dx must not be null; launch nothing when it is), or
// added to what dx holds (accumulate), in f32 and rounded once.
struct LayerNormBackwardDx {
  const float* x = nullptr;
  const float* gamma = nullptr;  // [d] or null
  const float* mean = nullptr;
  const float* rstd = nullptr;
  const float* g = nullptr;  // upstream gradient [rows, d]
  float* dx = nullptr;       // [rows, d]
  std::int64_t rows = 0, d = 0;
  ElementType type = ElementType::f32;        // of x, g and dx
  ElementType param_type = ElementType::f32;  // of gamma
  bool accumulate = false;

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
      const float dh = gamma != nullptr ? gj * load_element(gamma, param_type, j) : gj;
      sa += dh;
      sb += dh * (load_element(x, type, base + j) - mu);
    }
    const float mean_dh = simt::block_sum(ctx, sa) * inv_d;
    const float mean_dh_xhat = simt::block_sum(ctx, sb) * rs * inv_d;
    for (std::int64_t j = first; j < d; j += step) {
      const float gj = load_element(g, type, base + j);
      const float dh = gamma != nullptr ? gj * load_element(gamma, param_type, j) : gj;
      const float xj = load_element(x, type, base + j);
      const float v = rs * (dh - mean_dh - (xj - mu) * rs * mean_dh_xhat);
      store_element(dx, type, base + j, accumulate ? load_element(dx, type, base + j) + v : v);
    }
  }
};

// Rows per partial row of dgamma / dbeta.
inline constexpr std::int64_t kLayerNormRowBlock = 64;

RIG_HD_INLINE std::int64_t layer_norm_row_blocks(std::int64_t rows) {
  return (rows + kLayerNormRowBlock - 1) / kLayerNormRowBlock;
}

// The first stage of dgamma and dbeta (either may be null): one thread per
// (row block, column), the block's rows in order from 0, into
// dgamma_partial[block * d + column] (and dbeta_partial). With one row block
// (rows <= 64) and f32 parameters pass dgamma / dbeta themselves; else pass
// layer_norm_row_blocks(rows) * d floats of scratch each and run ColumnTotals
// (run_layer_norm_params does).
struct LayerNormBackwardParams {
  const float* x = nullptr;
  const float* mean = nullptr;
  const float* rstd = nullptr;
  const float* g = nullptr;
  float* dgamma_partial = nullptr;  // [row blocks, d] or null
  float* dbeta_partial = nullptr;   // [row blocks, d] or null
  std::int64_t rows = 0, d = 0;
  ElementType type = ElementType::f32;  // of x and g

  simt::LaunchShape plan(const simt::DeviceProperties& device) const {
    return plan_grid_stride(device, layer_norm_row_blocks(rows) * d);
  }

  template <class Ctx>
  RIG_HD void operator()(Ctx& ctx) const {
    const std::int64_t items = layer_norm_row_blocks(rows) * d;
    for (std::int64_t t = global_thread(ctx); t < items; t += grid_threads(ctx)) {
      const auto [block, j] = div_mod(t, d);
      const std::int64_t r0 = block * kLayerNormRowBlock;
      const std::int64_t r1 = r0 + kLayerNormRowBlock < rows ? r0 + kLayerNormRowBlock : rows;
      float sg = 0.0F, sb = 0.0F;
      for (std::int64_t r = r0; r < r1; ++r) {
        const float gv = load_element(g, type, r * d + j);
        sg += gv * (load_element(x, type, r * d + j) - mean[r]) * rstd[r];
        sb += gv;
      }
      if (dgamma_partial != nullptr) dgamma_partial[t] = sg;
      if (dbeta_partial != nullptr) dbeta_partial[t] = sb;
    }
  }
};

// Floats of scratch that run_layer_norm_params needs: the partial rows of
// both gradients (f32 parameters with one row block use none of it).
RIG_HD_INLINE std::int64_t layer_norm_params_scratch(std::int64_t rows, std::int64_t d) {
  return 2 * layer_norm_row_blocks(rows) * d;
}

// Which of dgamma and dbeta are added to instead of written.
struct ParamsAccumulation {
  bool dgamma = false, dbeta = false;
};

// Both stages of dgamma and dbeta (either may be null; of param_type) through
// RUN (a callable taking a kernel), the partial rows in SCRATCH
// (layer_norm_params_scratch floats): k's partial pointers are set here.
template <class Run>
void run_layer_norm_params(Run&& run, LayerNormBackwardParams k, void* dgamma, void* dbeta,
                           float* scratch, ElementType param_type = ElementType::f32,
                           ParamsAccumulation accumulate = {}) {
  if (dgamma == nullptr && dbeta == nullptr) return;
  const std::int64_t blocks = layer_norm_row_blocks(k.rows);
  const bool direct =
      blocks == 1 && param_type == ElementType::f32 && !accumulate.dgamma && !accumulate.dbeta;
  k.dgamma_partial = static_cast<float*>(dgamma);
  k.dbeta_partial = static_cast<float*>(dbeta);
  if (!direct) {
    if (dgamma != nullptr) k.dgamma_partial = scratch;
    if (dbeta != nullptr) k.dbeta_partial = scratch + blocks * k.d;
  }
  run(k);
  if (direct) return;
  if (dgamma != nullptr) {
    run(ColumnTotals{k.dgamma_partial, dgamma, blocks, k.d, param_type, accumulate.dgamma});
  }
  if (dbeta != nullptr) {
    run(ColumnTotals{k.dbeta_partial, dbeta, blocks, k.d, param_type, accumulate.dbeta});
  }
}

}  // namespace rig::kernels
