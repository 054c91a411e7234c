// LARC (Backend::larc, core/cpu/gradient_stats.cpp, OpenSeq2Seq's
// larc_params) over `count` parameter slices of the flat f32 buffers: per
// slice, v_norm = ||values||_2 and g_norm = ||grads||_2 in f64, the trust
// ratio of rig::LarcOptions (larc_ratio below, the CPU's expressions), then
// grads *= f32(ratio) in place (nothing when the ratio is 1).
//
// The slices are split into chunks of kLarcChunk elements; chunk j of the
// whole launch belongs to the slice k with chunk_starts[k] <= j <
// chunk_starts[k + 1] (larc_chunk_starts, computed on the host from the
// host slices). The sums have a fixed order: block j of LarcPartials sums
// chunk j (thread t its elements t, t + 256, ..., then the block's
// collective sum); LarcRatios sums a slice's chunk partials lane-strided
// over one warp, then the warp's butterfly. The CPU sums in its own order,
// so the norms agree to about 1e-15 relative and the f32 ratio can differ
// from the CPU's in its last bit; the scaling itself is the CPU's.
//
// Wiring, per entry point (count 0: nothing to do):
//   larc: on the host, std::vector<std::int64_t> starts(count + 1);
//     chunks = larc_chunk_starts(slices, count, starts.data()); upload the
//     host slices (count FlatSlice, slices_dev) and starts (count + 1 i64,
//     starts_dev). Scratch: larc_scratch_bytes(count, chunks) device bytes,
//     8-byte aligned: partial = (double*)scratch [2 * chunks], ratio =
//     (float*)(partial + 2 * chunks) [count]. Then
//       LarcPartials{values, grads, slices_dev, starts_dev, count, chunks, partial},
//       LarcRatios{partial, starts_dev, count, options, ratio},
//       LarcScale{grads, slices_dev, starts_dev, count, chunks, ratio}.
//     No copies back. LarcPartials and LarcScale launch nothing for chunks
//     0. The host buffers uploaded must stay alive until the copies are done
//     (pinned staging, or a synchronous upload).
// Compile with -fmad=false (larc_ratio's roundings as on the CPU).
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>

#include "cuda/kernels/common.hpp"
#include "rig/op_types.hpp"
#include "simt/collectives.hpp"

namespace rig::kernels {

// Elements per chunk (and per block of LarcPartials and LarcScale).
inline constexpr std::int64_t kLarcChunk = 16 * kBlockThreads;

// starts[k] = the first chunk of slice k, starts[count] = the number of chunks
// (returned); a slice of size 0 has no chunk.
inline std::int64_t larc_chunk_starts(const FlatSlice* slices, std::int64_t count,
                                      std::int64_t* starts) {
  std::int64_t chunks = 0;
  for (std::int64_t k = 0; k < count; ++k) {
    starts[k] = chunks;
    chunks += (slices[k].size + kLarcChunk - 1) / kLarcChunk;
  }
  starts[count] = chunks;
  return chunks;
}

inline std::size_t larc_scratch_bytes(std::int64_t count, std::int64_t chunks) {
  return static_cast<std::size_t>(2 * chunks) * sizeof(double) +
         static_cast<std::size_t>(count) * sizeof(float);
}

// The slice of chunk j: the k with starts[k] <= j < starts[k + 1].
RIG_HD_INLINE std::int64_t larc_slice_of(const std::int64_t* starts, std::int64_t count,
                                         std::int64_t j) {
  std::int64_t lo = 0, hi = count;  // starts[lo] <= j < starts[hi]
  while (hi - lo > 1) {
    const std::int64_t mid = lo + (hi - lo) / 2;
    if (starts[mid] <= j) {
      lo = mid;
    } else {
      hi = mid;
    }
  }
  return lo;
}

// std::max / std::min's choices (NaN handling included).
RIG_HD_INLINE double std_max(double a, double b) {
  return a < b ? b : a;
}
RIG_HD_INLINE double std_min(double a, double b) {
  return b < a ? b : a;
}

// The CPU's ratio from the f64 sums of squares; 1 means "leave g alone".
RIG_HD_INLINE float larc_ratio(double v_squares, double g_squares, const LarcOptions& o) {
  const double v_norm = ::sqrt(v_squares);
  const double g_norm = ::sqrt(g_squares);
  double ratio = 1.0;
  if (o.clip) {
    const double denominator = o.learning_rate * (g_norm + o.epsilon);
    if (denominator > 0.0) {
      ratio = std_min(std_max(o.eta * v_norm / denominator, o.min_update), 1.0);
    }
  } else {
    ratio = std_max(o.eta * v_norm / (g_norm + o.epsilon), o.min_update);
  }
  if (ratio == 1.0) return 1.0F;
  return static_cast<float>(std_min(ratio, 3.4028234663852886e38));  // saturated to f32
}

// Block j over chunk j: partial[2 j] = sum of values^2, partial[2 j + 1] =
// sum of grads^2 (f64).
struct LarcPartials {
  const float* values = nullptr;
  const float* grads = nullptr;
  const FlatSlice* slices = nullptr;           // [count], device memory
  const std::int64_t* chunk_starts = nullptr;  // [count + 1], device memory
  std::int64_t count = 0;
  std::int64_t chunks = 0;    // chunk_starts[count]
  double* partial = nullptr;  // [2 * chunks]

  simt::LaunchShape plan(const simt::DeviceProperties& device) const {
    return simt::plan_rows(device, count > 0 ? chunks : 0,
                           simt::KernelResources{kBlockThreads, 0, 32});
  }

  template <class Ctx>
  RIG_HD void operator()(Ctx& ctx) const {
    const std::int64_t j = block_row(ctx);
    if (j >= chunks) return;
    const std::int64_t k = larc_slice_of(chunk_starts, count, j);
    const FlatSlice s = slices[k];
    const std::int64_t begin = (j - chunk_starts[k]) * kLarcChunk;
    const std::int64_t end = begin + kLarcChunk < s.size ? begin + kLarcChunk : s.size;
    double vs = 0.0, gs = 0.0;
    for (std::int64_t i = begin + ctx.thread_rank(); i < end; i += ctx.block_threads()) {
      const double v = values[s.offset + i];
      const double g = grads[s.offset + i];
      vs += v * v;
      gs += g * g;
    }
    vs = simt::block_sum(ctx, vs);
    gs = simt::block_sum(ctx, gs);
    if (ctx.thread_rank() == 0) {
      partial[2 * j] = vs;
      partial[2 * j + 1] = gs;
    }
  }
};

// One warp per slice: ratio[k] = larc_ratio of the slice's summed partials.
struct LarcRatios {
  const double* partial = nullptr;             // LarcPartials'
  const std::int64_t* chunk_starts = nullptr;  // [count + 1], device memory
  std::int64_t count = 0;
  LarcOptions options{};
  float* ratio = nullptr;  // [count]

  simt::LaunchShape plan(const simt::DeviceProperties& device) const {
    return plan_grid_stride(device, count * simt::kWarpSize);
  }

  template <class Ctx>
  RIG_HD void operator()(Ctx& ctx) const {
    const std::int64_t warps = grid_threads(ctx) / simt::kWarpSize;
    // Warp-uniform loop: every lane of a warp runs the same iterations.
    for (std::int64_t k = global_thread(ctx) / simt::kWarpSize; k < count; k += warps) {
      const std::int64_t begin = chunk_starts[k], end = chunk_starts[k + 1];
      double vs = 0.0, gs = 0.0;
      for (std::int64_t j = begin + ctx.lane(); j < end; j += simt::kWarpSize) {
        vs += partial[2 * j];
        gs += partial[2 * j + 1];
      }
      vs = simt::warp_sum(ctx, vs);
      gs = simt::warp_sum(ctx, gs);
      if (ctx.lane() == 0) ratio[k] = larc_ratio(vs, gs, options);
    }
  }
};

// Block j over chunk j: grads *= ratio of its slice, unless that is 1.
struct LarcScale {
  float* grads = nullptr;
  const FlatSlice* slices = nullptr;           // [count], device memory
  const std::int64_t* chunk_starts = nullptr;  // [count + 1], device memory
  std::int64_t count = 0;
  std::int64_t chunks = 0;
  const float* ratio = nullptr;  // LarcRatios'

  simt::LaunchShape plan(const simt::DeviceProperties& device) const {
    return simt::plan_rows(device, count > 0 ? chunks : 0,
                           simt::KernelResources{kBlockThreads, 0, 32});
  }

  template <class Ctx>
  RIG_HD void operator()(Ctx& ctx) const {
    const std::int64_t j = block_row(ctx);
    if (j >= chunks) return;
    const std::int64_t k = larc_slice_of(chunk_starts, count, j);
    const float r = ratio[k];
    if (r == 1.0F) return;
    const FlatSlice s = slices[k];
    const std::int64_t begin = (j - chunk_starts[k]) * kLarcChunk;
    const std::int64_t end = begin + kLarcChunk < s.size ? begin + kLarcChunk : s.size;
    for (std::int64_t i = begin + ctx.thread_rank(); i < end; i += ctx.block_threads()) {
      grads[s.offset + i] *= r;
    }
  }
};

}  // namespace rig::kernels
