// f32 reductions (backend.hpp "Reductions", core/cpu/reduce.cpp):
//   SumPartials + SumFinish: Backend::sum_all / sum_squares. out[0] =
//     sum(x) / divisor (or of x^2), summed and divided in f64 in a fixed
//     order that depends on neither the grid nor the device: block b of
//     SumPartials sums chunk b (kSumChunk elements; thread t its elements t,
//     t + 256, ... in order, then the block's collective sum) into
//     partial[b]; SumFinish (one block) sums the partials the same way and
//     writes float(total / divisor). The CPU sums float lanes in blocks of
//     2048 into f64, so the two agree to about 1e-7 of sum |x|, not in bits.
//   SumAxis: Backend::sum_axis, x [outer, r, inner] -> y [outer, inner] =
//     scale * sum over r. inner > 1: one thread per output summing r in
//     order from 0, then times scale when scale != 1 (the CPU's order: the
//     same bits). inner == 1: one block per row, the block's collective sum
//     times scale (the CPU's SIMD lanes give other roundings).
//   MaxAxis: Backend::max_axis, one thread per output walking r in order:
//     the first maximum, NaN largest (the first NaN). Launch nothing for r 0.
//   MaxAxisBackward: dx [outer, r, inner] = g at index, 0 elsewhere; one
//     thread per element of dx (no scatter).
#pragma once

#include <cstdint>

#include "cuda/kernels/common.hpp"
#include "simt/collectives.hpp"

namespace rig::kernels {

// Elements per block of SumPartials.
inline constexpr std::int64_t kSumChunk = 16 * kBlockThreads;

RIG_HD_INLINE std::int64_t sum_chunks(std::int64_t n) {
  return (n + kSumChunk - 1) / kSumChunk;
}

// Block b: partial[b] = the sum of x[b * kSumChunk, ...) (of x^2 when squares).
struct SumPartials {
  const float* x = nullptr;
  std::int64_t n = 0;
  bool squares = false;
  double* partial = nullptr;  // [sum_chunks(n)]

  simt::LaunchShape plan(const simt::DeviceProperties& device) const {
    return simt::plan_rows(device, sum_chunks(n), simt::KernelResources{kBlockThreads, 0, 32});
  }

  template <class Ctx>
  RIG_HD void operator()(Ctx& ctx) const {
    const std::int64_t chunk = block_row(ctx);
    if (chunk >= sum_chunks(n)) return;
    const std::int64_t begin = chunk * kSumChunk;
    const std::int64_t end = begin + kSumChunk < n ? begin + kSumChunk : n;
    double s = 0.0;
    for (std::int64_t i = begin + ctx.thread_rank(); i < end; i += ctx.block_threads()) {
      const double v = x[i];
      s += squares ? v * v : v;
    }
    s = simt::block_sum(ctx, s);
    if (ctx.thread_rank() == 0) partial[chunk] = s;
  }
};

// One block: *out = float(sum of partial[0, chunks) / divisor); chunks 0 gives 0.
struct SumFinish {
  const double* partial = nullptr;
  std::int64_t chunks = 0;  // sum_chunks(n)
  double divisor = 1.0;
  float* out = nullptr;  // one f32

  simt::LaunchShape plan(const simt::DeviceProperties&) const {
    return simt::LaunchShape{{1, 1, 1}, {kBlockThreads, 1, 1}, 0};
  }

  template <class Ctx>
  RIG_HD void operator()(Ctx& ctx) const {
    double s = 0.0;
    for (std::int64_t b = ctx.thread_rank(); b < chunks; b += ctx.block_threads()) s += partial[b];
    s = simt::block_sum(ctx, s);
    if (ctx.thread_rank() == 0) *out = static_cast<float>(s / divisor);
  }
};

struct SumAxis {
  const float* x = nullptr;
  float* y = nullptr;
  std::int64_t outer = 0, r = 0, inner = 0;
  float scale = 1.0F;

  simt::LaunchShape plan(const simt::DeviceProperties& device) const {
    if (inner == 1) return plan_row_kernel(device, outer, r);
    return plan_grid_stride(device, outer * inner);
  }

  template <class Ctx>
  RIG_HD void operator()(Ctx& ctx) const {
    if (inner == 1) {  // uniform over the launch
      const std::int64_t row = block_row(ctx);
      if (row >= outer) return;
      const float* xr = x + row * r;
      float s = 0.0F;
      for (std::int64_t j = ctx.thread_rank(); j < r; j += ctx.block_threads()) s += xr[j];
      s = simt::block_sum(ctx, s);
      if (ctx.thread_rank() == 0) y[row] = r == 0 ? 0.0F : s * scale;
      return;
    }
    const std::int64_t n = outer * inner;
    for (std::int64_t t = global_thread(ctx); t < n; t += grid_threads(ctx)) {
      const std::int64_t o = t / inner, i = t % inner;
      // An offset, not a pointer: x may be null when r == 0.
      const std::int64_t first = o * r * inner + i;
      float s = 0.0F;
      for (std::int64_t j = 0; j < r; ++j) s += x[first + j * inner];
      if (r != 0 && scale != 1.0F) s *= scale;
      y[t] = s;
    }
  }
};

struct MaxAxis {
  const float* x = nullptr;
  float* y = nullptr;
  std::int64_t* index = nullptr;
  std::int64_t outer = 0, r = 0, inner = 0;

  simt::LaunchShape plan(const simt::DeviceProperties& device) const {
    return plan_grid_stride(device, r == 0 ? 0 : outer * inner);
  }

  template <class Ctx>
  RIG_HD void operator()(Ctx& ctx) const {
    const std::int64_t n = outer * inner;
    for (std::int64_t t = global_thread(ctx); t < n; t += grid_threads(ctx)) {
      const std::int64_t o = t / inner, i = t % inner;
      const float* xc = x + o * r * inner + i;
      float best = xc[0];
      std::int64_t at = 0;
      for (std::int64_t j = 1; j < r; ++j) {
        const float v = xc[j * inner];
        // Strictly greater keeps the first maximum; a NaN wins once and stays.
        if (v > best || (v != v && best == best)) {
          best = v;
          at = j;
        }
      }
      y[t] = best;
      index[t] = at;
    }
  }
};

struct MaxAxisBackward {
  const float* g = nullptr;             // [outer, inner]
  const std::int64_t* index = nullptr;  // [outer, inner]
  float* dx = nullptr;                  // [outer, r, inner]
  std::int64_t outer = 0, r = 0, inner = 0;

  simt::LaunchShape plan(const simt::DeviceProperties& device) const {
    return plan_grid_stride(device, outer * r * inner);
  }

  template <class Ctx>
  RIG_HD void operator()(Ctx& ctx) const {
    const std::int64_t n = outer * r * inner;
    for (std::int64_t t = global_thread(ctx); t < n; t += grid_threads(ctx)) {
      const std::int64_t i = t % inner;
      const std::int64_t j = (t / inner) % r;
      const std::int64_t k = (t / (inner * r)) * inner + i;
      dx[t] = index[k] == j ? g[k] : 0.0F;
    }
  }
};

}  // namespace rig::kernels
