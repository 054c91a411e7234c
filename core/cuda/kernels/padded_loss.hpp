// OpenSeq2Seq's padded loss (Backend::padded_loss / padded_loss_backward,
// core/cpu/cross_entropy.cpp) from the rows' cross-entropies xent and
// weights w: numerator = sum_r (f64(xent_r) - constant) w_r w_r, denominator
// = sum_r w_r, both in f64, summed in a fixed order that depends on neither
// the grid nor the device: block b of PaddedLossPartials sums chunk b
// (kPaddedLossChunk rows; thread t its rows t, t + 256, ... in order, then
// the block's collective sum), PaddedLossFinish (one block) sums the chunks'
// partials the same way. The CPU sums in row order, so the f64 sums can
// differ in their last bits and the f32 results rarely in their last bit.
//
// Wiring, per entry point (chunks = padded_loss_chunks(rows); scratch: one
// device buffer of padded_loss_scratch_bytes(rows) bytes, 8-byte aligned,
// partial = (double*)scratch, sums = partial + 2 * chunks):
//   padded_loss: PaddedLossPartials{xent, w, rows, constant, partial}, then
//     PaddedLossFinish{partial, chunks, loss, nullptr}. loss[0] is written
//     (0 when the weights sum to 0, and for rows 0). No host copies.
//   padded_loss_backward: PaddedLossPartials{xent, w, rows, constant,
//     partial}, PaddedLossFinish{partial, chunks, nullptr, sums}, then
//     PaddedLossBackward{xent, w, rows, constant, sums, upstream, row_scale,
//     x_scale, dw}. upstream is the device f32 the Backend gets; no host
//     copies. PaddedLossBackward always launches (it writes x_scale, also
//     for rows 0).
// PaddedLossPartials launches nothing for rows 0; PaddedLossFinish always
// launches. Compile all three with -fmad=false (the CPU's roundings of each
// term; a contracted multiply-add would round once).
#pragma once

#include <cstddef>
#include <cstdint>

#include "cuda/kernels/common.hpp"
#include "simt/collectives.hpp"

namespace rig::kernels {

// Rows per block of PaddedLossPartials.
inline constexpr std::int64_t kPaddedLossChunk = 16 * kBlockThreads;

RIG_HD_INLINE std::int64_t padded_loss_chunks(std::int64_t rows) {
  return (rows + kPaddedLossChunk - 1) / kPaddedLossChunk;
}

// Device scratch of both entry points: 2 * chunks partials, then 2 sums (f64).
inline std::size_t padded_loss_scratch_bytes(std::int64_t rows) {
  return static_cast<std::size_t>(2 * padded_loss_chunks(rows) + 2) * sizeof(double);
}

// Block b: partial[b] = the numerator over chunk b, partial[chunks + b] = its
// denominator.
struct PaddedLossPartials {
  const float* xent = nullptr;
  const float* w = nullptr;
  std::int64_t rows = 0;
  double constant = 0.0;
  double* partial = nullptr;  // [2 * padded_loss_chunks(rows)]

  simt::LaunchShape plan(const simt::DeviceProperties& device) const {
    return simt::plan_rows(device, padded_loss_chunks(rows),
                           simt::KernelResources{kBlockThreads, 0, 32});
  }

  template <class Ctx>
  RIG_HD void operator()(Ctx& ctx) const {
    const std::int64_t chunks = padded_loss_chunks(rows);
    const std::int64_t chunk = block_row(ctx);
    if (chunk >= chunks) return;
    const std::int64_t begin = chunk * kPaddedLossChunk;
    const std::int64_t end = begin + kPaddedLossChunk < rows ? begin + kPaddedLossChunk : rows;
    double numerator = 0.0, denominator = 0.0;
    for (std::int64_t i = begin + ctx.thread_rank(); i < end; i += ctx.block_threads()) {
      const double wi = w[i];
      numerator += (static_cast<double>(xent[i]) - constant) * wi * wi;
      denominator += wi;
    }
    numerator = simt::block_sum(ctx, numerator);
    denominator = simt::block_sum(ctx, denominator);
    if (ctx.thread_rank() == 0) {
      partial[chunk] = numerator;
      partial[chunks + chunk] = denominator;
    }
  }
};

// One block over the partials: loss[0] = f32(numerator / denominator), or 0
// when the denominator is 0 (loss may be null); sums[0] = numerator,
// sums[1] = denominator (sums may be null).
struct PaddedLossFinish {
  const double* partial = nullptr;
  std::int64_t chunks = 0;  // padded_loss_chunks(rows)
  float* loss = nullptr;    // one f32 of the device, or null
  double* sums = nullptr;   // two f64 of the device, or null

  simt::LaunchShape plan(const simt::DeviceProperties&) const {
    return simt::LaunchShape{{1, 1, 1}, {kBlockThreads, 1, 1}, 0};
  }

  template <class Ctx>
  RIG_HD void operator()(Ctx& ctx) const {
    double numerator = 0.0, denominator = 0.0;
    for (std::int64_t b = ctx.thread_rank(); b < chunks; b += ctx.block_threads()) {
      numerator += partial[b];
      denominator += partial[chunks + b];
    }
    numerator = simt::block_sum(ctx, numerator);
    denominator = simt::block_sum(ctx, denominator);
    if (ctx.thread_rank() != 0) return;
    if (loss != nullptr) {
      *loss = static_cast<float>(denominator != 0.0 ? numerator / denominator : 0.0);
    }
    if (sums != nullptr) {
      sums[0] = numerator;
      sums[1] = denominator;
    }
  }
};

// The gradient pieces for the upstream gradient g (one device f32):
// row_scale[r] = w_r^2, *x_scale = f32(g / W), dw[r] (dw may be null) =
// f32(g (2 w_r t_r - L) / W) with t_r = f64(xent_r) - constant, L = N / W;
// all zero when W == 0. Grid-stride per row.
struct PaddedLossBackward {
  const float* xent = nullptr;
  const float* w = nullptr;
  std::int64_t rows = 0;
  double constant = 0.0;
  const double* sums = nullptr;     // PaddedLossFinish's: numerator, denominator
  const float* upstream = nullptr;  // one f32 of the device
  float* row_scale = nullptr;       // [rows]
  float* x_scale = nullptr;         // one f32 of the device
  float* dw = nullptr;              // [rows] or null

  simt::LaunchShape plan(const simt::DeviceProperties& device) const {
    return plan_grid_stride(device, rows > 0 ? rows : 1, 1, 48);  // ptxas: 48
  }

  template <class Ctx>
  RIG_HD void operator()(Ctx& ctx) const {
    const double numerator = sums[0];
    const double denominator = sums[1];
    const float g = *upstream;
    const bool zero = denominator == 0.0;
    if (global_thread(ctx) == 0) *x_scale = zero ? 0.0F : static_cast<float>(g / denominator);
    const double l = zero ? 0.0 : numerator / denominator;
    for (std::int64_t i = global_thread(ctx); i < rows; i += grid_threads(ctx)) {
      if (zero) {
        row_scale[i] = 0.0F;
        if (dw != nullptr) dw[i] = 0.0F;
        continue;
      }
      const float wi = w[i];
      row_scale[i] = wi * wi;
      if (dw == nullptr) continue;
      const double t = static_cast<double>(xent[i]) - constant;
      dw[i] = static_cast<float>(g * (2.0 * wi * t - l) / denominator);
    }
  }
};

}  // namespace rig::kernels
