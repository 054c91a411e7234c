// Layer normalisation over contiguous rows [rows, d] (Backend::layer_norm_*,
// core/cpu/layer_norm.cpp):
//   forward, one warp per row: mean, rstd = 1 / sqrt(mean((x - mean)^2) + eps)
//     (two passes: the squared deviations, not E[x^2] - mean^2), y = (x -
//     mean) rstd gamma + beta (gamma, beta may be null: 1, 0);
//   backward dx, one warp per row: dx = rstd (g gamma - mean(g gamma) - xhat
//     mean(g gamma xhat)) with xhat = (x - mean) rstd;
//   backward dgamma = sum_r g xhat, dbeta = sum_r g in two stages,
//     deterministic and without atomics: one thread per (block of 64 rows,
//     column; 8 columns as packs where aligned) sums its rows in order into
//     a partial row, then ColumnTotals
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
#include "cuda/kernels/packed.hpp"
#include "rig/math/device_math.hpp"
#include "simt/collectives.hpp"

namespace rig::kernels {

// A warp per row (plan_warp_rows, common.hpp). Lane l takes the
// row's chunks of kPack elements q = l, l + 32, ... (the last may be
// partial), each chunk's elements in order; the lanes' sums are combined by
// simt::warp_sum. The order depends on d only: a row's chunks move as packs
// (packed.hpp) where d % kPack == 0 and every operand is aligned, else
// element by element, with the same bits. No block-wide synchronisation: a
// row's mean and variance cost two warp reductions.
namespace layer_norm_detail {

// gamma or beta's chunk q (null: `fill`).
RIG_HD_INLINE Pack<kPack> param_chunk(const float* param, ElementType type, std::int64_t q,
                                      int valid, bool packed, float fill) {
  if (param == nullptr) {
    Pack<kPack> p;
    for (float& v : p.v) v = fill;
    return p;
  }
  return load_row_chunk(param, type, 0, q, valid, packed);
}

}  // namespace layer_norm_detail

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

  // Rows in packs (packed.hpp) where d and every operand allow.
  RIG_HD bool packed() const {
    return d % kPack == 0 && pack_aligned<kPack>(x, type) && pack_aligned<kPack>(y, type) &&
           pack_aligned<kPack>(gamma, param_type) && pack_aligned<kPack>(beta, param_type);
  }

  simt::LaunchShape plan(const simt::DeviceProperties& device) const {
    return plan_warp_rows(device, rows, 56);  // ptxas: 56
  }

  template <class Ctx>
  RIG_HD void operator()(Ctx& ctx) const {
    using M = math::DeviceMath;
    namespace ln = layer_norm_detail;
    const std::int64_t row = warp_row(ctx, rows);
    if (row < 0) return;  // the whole warp
    const bool pack = packed();
    const auto lanes = static_cast<std::int64_t>(simt::kWarpSize);
    const std::int64_t base = row * d;  // element offset of the row
    const float inv_d = 1.0F / static_cast<float>(d);
    float acc = 0.0F;
    for_chunks(d, ctx.lane(), lanes, [&](std::int64_t q, int valid) {
      const Pack<kPack> xv = load_row_chunk(x, type, base, q, valid, pack);
      for (int e = 0; e < kPack; ++e) {
        if (e < valid) acc += xv.v[e];
      }
    });
    const float mu = simt::warp_sum(ctx, acc) * inv_d;
    acc = 0.0F;
    for_chunks(d, ctx.lane(), lanes, [&](std::int64_t q, int valid) {
      const Pack<kPack> xv = load_row_chunk(x, type, base, q, valid, pack);
      for (int e = 0; e < kPack; ++e) {
        if (e >= valid) continue;
        const float c = xv.v[e] - mu;
        acc += c * c;
      }
    });
    const float rs = 1.0F / M::sqrt(simt::warp_sum(ctx, acc) * inv_d + eps);
    if (ctx.lane() == 0) {
      mean[row] = mu;
      rstd[row] = rs;
    }
    for_chunks(d, ctx.lane(), lanes, [&](std::int64_t q, int valid) {
      const Pack<kPack> xv = load_row_chunk(x, type, base, q, valid, pack);
      const Pack<kPack> gv = ln::param_chunk(gamma, param_type, q, valid, pack, 1.0F);
      const Pack<kPack> bv = ln::param_chunk(beta, param_type, q, valid, pack, 0.0F);
      Pack<kPack> out;
      for (int e = 0; e < kPack; ++e) {
        float v = (xv.v[e] - mu) * rs;
        if (gamma != nullptr) v = v * gv.v[e];
        if (beta != nullptr) v = v + bv.v[e];
        out.v[e] = v;
      }
      store_row_chunk(y, type, base, q, valid, pack, out);
    });
  }
};

// dx of every row (dx must not be null; launch nothing when it is), or
// added to what dx holds (accumulate), in f32 and rounded once. A warp per
// row, as LayerNormForward.
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

  // Rows in packs (packed.hpp) where d and every operand allow.
  RIG_HD bool packed() const {
    return d % kPack == 0 && pack_aligned<kPack>(x, type) && pack_aligned<kPack>(g, type) &&
           pack_aligned<kPack>(dx, type) && pack_aligned<kPack>(gamma, param_type);
  }

  simt::LaunchShape plan(const simt::DeviceProperties& device) const {
    return plan_warp_rows(device, rows, 72);  // ptxas: 72
  }

  template <class Ctx>
  RIG_HD void operator()(Ctx& ctx) const {
    namespace ln = layer_norm_detail;
    const std::int64_t row = warp_row(ctx, rows);
    if (row < 0) return;  // the whole warp
    const bool pack = packed();
    const auto lanes = static_cast<std::int64_t>(simt::kWarpSize);
    const std::int64_t base = row * d;  // element offset of the row
    const float mu = mean[row];
    const float rs = rstd[row];
    const float inv_d = 1.0F / static_cast<float>(d);
    float sa = 0.0F, sb = 0.0F;
    for_chunks(d, ctx.lane(), lanes, [&](std::int64_t q, int valid) {
      const Pack<kPack> gv = load_row_chunk(g, type, base, q, valid, pack);
      const Pack<kPack> xv = load_row_chunk(x, type, base, q, valid, pack);
      const Pack<kPack> wv = ln::param_chunk(gamma, param_type, q, valid, pack, 1.0F);
      for (int e = 0; e < kPack; ++e) {
        if (e >= valid) continue;
        const float dh = gamma != nullptr ? gv.v[e] * wv.v[e] : gv.v[e];
        sa += dh;
        sb += dh * (xv.v[e] - mu);
      }
    });
    const float mean_dh = simt::warp_sum(ctx, sa) * inv_d;
    const float mean_dh_xhat = simt::warp_sum(ctx, sb) * rs * inv_d;
    for_chunks(d, ctx.lane(), lanes, [&](std::int64_t q, int valid) {
      const Pack<kPack> gv = load_row_chunk(g, type, base, q, valid, pack);
      const Pack<kPack> xv = load_row_chunk(x, type, base, q, valid, pack);
      const Pack<kPack> wv = ln::param_chunk(gamma, param_type, q, valid, pack, 1.0F);
      const Pack<kPack> old =
          accumulate ? load_row_chunk(dx, type, base, q, valid, pack) : Pack<kPack>{};
      Pack<kPack> out;
      for (int e = 0; e < kPack; ++e) {
        const float dh = gamma != nullptr ? gv.v[e] * wv.v[e] : gv.v[e];
        const float v = rs * (dh - mean_dh - (xv.v[e] - mu) * rs * mean_dh_xhat);
        out.v[e] = accumulate ? old.v[e] + v : v;
      }
      store_row_chunk(dx, type, base, q, valid, pack, out);
    });
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

  // In packs of kPack columns (packed.hpp) where d and every operand allow:
  // a thread per (row block, kPack columns), its rows kUnroll at a time, all
  // loads before their adds. The same sums in the same order.
  RIG_HD bool packed() const {
    return d % kPack == 0 && pack_aligned<kPack>(x, type) && pack_aligned<kPack>(g, type) &&
           pack_aligned<kPack>(dgamma_partial, ElementType::f32) &&
           pack_aligned<kPack>(dbeta_partial, ElementType::f32);
  }

  simt::LaunchShape plan(const simt::DeviceProperties& device) const {
    return plan_grid_stride(device, layer_norm_row_blocks(rows) * (packed() ? d / kPack : d), 1,
                            116);  // ptxas: 116
  }

  template <class Ctx>
  RIG_HD void operator()(Ctx& ctx) const {
    if (packed()) {  // uniform over the launch
      packed_columns(ctx);
      return;
    }
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

  template <class Ctx>
  RIG_HD void packed_columns(Ctx& ctx) const {
    constexpr int kRows = kUnroll;
    const std::int64_t packs = d / kPack;
    const std::int64_t items = layer_norm_row_blocks(rows) * packs;
    for (std::int64_t t = global_thread(ctx); t < items; t += grid_threads(ctx)) {
      const auto [block, pc] = div_mod(t, packs);
      const std::int64_t r0 = block * kLayerNormRowBlock;
      const std::int64_t r1 = r0 + kLayerNormRowBlock < rows ? r0 + kLayerNormRowBlock : rows;
      Pack<kPack> sg{}, sb{};
      for (std::int64_t r = r0; r < r1; r += kRows) {
        Pack<kPack> gv[kRows]{}, xv[kRows]{};
        RIG_UNROLL for (int u = 0; u < kRows; ++u) {
          if (r + u >= r1) continue;
          gv[u] = load_pack<kPack>(g, type, (r + u) * packs + pc);
          xv[u] = load_pack<kPack>(x, type, (r + u) * packs + pc);
        }
        RIG_UNROLL for (int u = 0; u < kRows; ++u) {
          if (r + u >= r1) continue;
          const float mu = mean[r + u], rs = rstd[r + u];
          for (int e = 0; e < kPack; ++e) {
            sg.v[e] += gv[u].v[e] * (xv[u].v[e] - mu) * rs;
            sb.v[e] += gv[u].v[e];
          }
        }
      }
      if (dgamma_partial != nullptr) store_pack<kPack>(dgamma_partial, ElementType::f32, t, sg);
      if (dbeta_partial != nullptr) store_pack<kPack>(dbeta_partial, ElementType::f32, t, sb);
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
  // Both totals in one launch where both are wanted.
  ColumnTotals totals{dgamma != nullptr ? k.dgamma_partial : k.dbeta_partial,
                      dgamma != nullptr ? dgamma : dbeta,
                      blocks,
                      k.d,
                      param_type,
                      dgamma != nullptr ? accumulate.dgamma : accumulate.dbeta};
  if (dgamma != nullptr && dbeta != nullptr) {
    totals.partial2 = k.dbeta_partial;
    totals.out2 = dbeta;
    totals.accumulate2 = accumulate.dbeta;
  }
  run(totals);
}

}  // namespace rig::kernels
