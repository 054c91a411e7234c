// The entry points that read the device back to the host: index range checks
// (Backend::first_out_of_range, core/cpu/indexing.cpp) and the gradient
// statistics of a step (Backend::gradient_stats, core/cpu/gradient_stats.cpp).
// Both reduce in two stages over fixed chunks of kCheckChunk elements (block
// b of the first kernel takes chunk b, grid.y past max_grid_x), so scratch
// sizes are functions of n alone and the results do not depend on the grid,
// the device or scheduling.
//
// Wiring, per entry point (chunks = check_chunks(n)):
//   first_out_of_range: IndexCheckPartials{index, dtype, n, limit, partial},
//     then IndexCheckFinish{partial, chunks, result}; the host copies the one
//     i64 at `result` back and returns it (the smallest position i with
//     index[i] < 0 or >= limit, -1 if none). Scratch: one device buffer of
//     index_check_scratch_bytes(n) bytes, 8-byte aligned: partial =
//     (std::int64_t*)scratch [chunks], result = partial + chunks.
//   gradient_stats: GradStatsPartials{grads, n, partial_squares,
//     partial_amax_bits, type, scale}, then GradStatsFinish{partial_squares,
//     partial_amax_bits, chunks, loss, out}; the host copies the one
//     rig::GradientStats at `out` (8-byte aligned, anywhere on the device:
//     the back end keeps it behind its queued index checks' results, so one
//     copy brings back both) and returns it. Scratch: one device buffer of
//     grad_stats_scratch_bytes(n) bytes, 8-byte aligned: partial_squares =
//     (double*)scratch [chunks], partial_amax_bits =
//     (std::uint32_t*)(partial_squares + chunks) [chunks].
// The first kernels launch nothing for n 0; the finishing kernels always
// launch (they write the result). Integer reductions and f64 sums, no
// contracted operations to differ in: they may go in either kernel_runs file.
//
// gradient_stats against the CPU: norm = sqrt(sum g^2) with each square
// rounded to f32 (as the CPU's) and summed in f64; the CPU sums the f32
// squares in f32 runs of 1024 (8 interleaved lanes each), so the norms
// agree to about 1e-6 relative, not in bits; amax (max |g|) is exact. Both
// are +inf when the norm is not finite (any inf or NaN, or a square beyond
// the f32 range), as on the CPU; the CPU's f32 runs also overflow when a
// run's squares sum past 3.4e38, where the f64 sum here stays finite.
// loss_finite = loss is null or *loss is finite (read on the device).
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>

#include "cuda/kernels/common.hpp"
#include "cuda/kernels/packed.hpp"
#include "rig/dtype.hpp"
#include "rig/math/bits.hpp"
#include "rig/op_types.hpp"
#include "simt/collectives.hpp"

namespace rig::kernels {

// Elements per block of the first stages.
inline constexpr std::int64_t kCheckChunk = 16 * kBlockThreads;

RIG_HD_INLINE std::int64_t check_chunks(std::int64_t n) {
  return (n + kCheckChunk - 1) / kCheckChunk;
}

// No offending position in a chunk.
inline constexpr std::int64_t kNoPosition = 0x7FFFFFFFFFFFFFFFLL;

struct Min {
  template <class T>
  RIG_HD_INLINE T operator()(T a, T b) const {
    return b < a ? b : a;
  }
};

// ---- first_out_of_range ------------------------------------------------------

inline std::size_t index_check_scratch_bytes(std::int64_t n) {
  return static_cast<std::size_t>(check_chunks(n) + 1) * sizeof(std::int64_t);
}

// Block b: partial[b] = the smallest i of chunk b with index[i] outside
// [0, limit), or kNoPosition.
struct IndexCheckPartials {
  const void* index = nullptr;
  DType dtype = DType::i64;  // i32 or i64
  std::int64_t n = 0;
  std::int64_t limit = 0;
  std::int64_t* partial = nullptr;  // [check_chunks(n)]

  simt::LaunchShape plan(const simt::DeviceProperties& device) const {
    return simt::plan_rows(device, check_chunks(n), simt::KernelResources{kBlockThreads, 0, 32});
  }

  template <class Ctx>
  RIG_HD void operator()(Ctx& ctx) const {
    const std::int64_t chunk = block_row(ctx);
    if (chunk >= check_chunks(n)) return;
    const std::int64_t begin = chunk * kCheckChunk;
    const std::int64_t end = begin + kCheckChunk < n ? begin + kCheckChunk : n;
    std::int64_t first = kNoPosition;
    for (std::int64_t i = begin + ctx.thread_rank(); i < end; i += ctx.block_threads()) {
      const std::int64_t v = dtype == DType::i32 ? static_cast<const std::int32_t*>(index)[i]
                                                 : static_cast<const std::int64_t*>(index)[i];
      if ((v < 0 || v >= limit) && i < first) first = i;
    }
    first = simt::block_reduce(ctx, first, Min{});
    if (ctx.thread_rank() == 0) partial[chunk] = first;
  }
};

// One block: *result = the smallest partial, or -1 when there is none.
struct IndexCheckFinish {
  const std::int64_t* partial = nullptr;
  std::int64_t chunks = 0;         // check_chunks(n)
  std::int64_t* result = nullptr;  // one i64 of the device

  simt::LaunchShape plan(const simt::DeviceProperties&) const {
    return simt::LaunchShape{{1, 1, 1}, {kBlockThreads, 1, 1}, 0};
  }

  template <class Ctx>
  RIG_HD void operator()(Ctx& ctx) const {
    std::int64_t first = kNoPosition;
    for (std::int64_t b = ctx.thread_rank(); b < chunks; b += ctx.block_threads()) {
      first = partial[b] < first ? partial[b] : first;
    }
    first = simt::block_reduce(ctx, first, Min{});
    if (ctx.thread_rank() == 0) *result = first == kNoPosition ? -1 : first;
  }
};

// ---- gradient_stats ------------------------------------------------------------

// Bytes of gradient_stats' scratch: the partial squares, then the partial maxima.
inline std::size_t grad_stats_scratch_bytes(std::int64_t n) {
  const auto chunks = static_cast<std::size_t>(check_chunks(n));
  return chunks * (sizeof(double) + sizeof(std::uint32_t));
}

// Block b over chunk b: partial_squares[b] = the f64 sum of f32(g^2),
// partial_amax_bits[b] = the largest math::abs_bits(g).
struct GradStatsPartials {
  const void* grads = nullptr;  // of `type`
  std::int64_t n = 0;
  double* partial_squares = nullptr;           // [check_chunks(n)]
  std::uint32_t* partial_amax_bits = nullptr;  // [check_chunks(n)]
  // The model's f16 / bf16 gradients are read as f32 times `scale`: the
  // values, so the bits, of the f32 master gradients unscaling would write.
  ElementType type = ElementType::f32;
  float scale = 1.0F;

  // A chunk's pieces of kPack elements as packs (packed.hpp) where grads is
  // aligned; the same pieces element by element otherwise.
  RIG_HD bool packed() const { return pack_aligned<kPack>(grads, type); }

  simt::LaunchShape plan(const simt::DeviceProperties& device) const {
    // ptxas (nvcc 13): 39 registers a thread for sm_75, 32 for sm_90.
    return simt::plan_rows(device, check_chunks(n), simt::KernelResources{kBlockThreads, 0, 39});
  }

  template <class Ctx>
  RIG_HD void operator()(Ctx& ctx) const {
    const std::int64_t chunk = block_row(ctx);
    if (chunk >= check_chunks(n)) return;
    const std::int64_t begin = chunk * kCheckChunk;
    const std::int64_t end = begin + kCheckChunk < n ? begin + kCheckChunk : n;
    double squares = 0.0;
    std::uint32_t bits = 0;
    // The chunk's pieces of kPack elements, thread t taking t, t + threads,
    // ...: the same order packed or not.
    const bool pack = packed();
    for_chunks(end - begin, ctx.thread_rank(), ctx.block_threads(), [&](std::int64_t q, int valid) {
      const Pack<kPack> chunk = load_row_chunk(grads, type, begin, q, valid, pack);
      for (int e = 0; e < kPack; ++e) {
        if (e >= valid) continue;
        const float g = chunk.v[e] * scale;
        const float square = g * g;  // f32, as the CPU's: overflows where it does
        squares += static_cast<double>(square);
        const std::uint32_t b = math::abs_bits(g);
        bits = b > bits ? b : bits;
      }
    });
    squares = simt::block_sum(ctx, squares);
    bits = simt::block_max(ctx, bits);
    if (ctx.thread_rank() == 0) {
      partial_squares[chunk] = squares;
      partial_amax_bits[chunk] = bits;
    }
  }
};

// One block: *out = {norm, amax, loss_finite, loss} (n 0: {0, 0, ...}).
struct GradStatsFinish {
  const double* partial_squares = nullptr;
  const std::uint32_t* partial_amax_bits = nullptr;
  std::int64_t chunks = 0;       // check_chunks(n)
  const float* loss = nullptr;   // one f32 of the device, or null
  GradientStats* out = nullptr;  // one of the device

  simt::LaunchShape plan(const simt::DeviceProperties&) const {
    return simt::LaunchShape{{1, 1, 1}, {kBlockThreads, 1, 1}, 0};
  }

  template <class Ctx>
  RIG_HD void operator()(Ctx& ctx) const {
    double squares = 0.0;
    std::uint32_t bits = 0;
    for (std::int64_t b = ctx.thread_rank(); b < chunks; b += ctx.block_threads()) {
      squares += partial_squares[b];
      bits = partial_amax_bits[b] > bits ? partial_amax_bits[b] : bits;
    }
    squares = simt::block_sum(ctx, squares);
    bits = simt::block_max(ctx, bits);
    if (ctx.thread_rank() != 0) return;
    GradientStats stats;
    stats.norm = ::sqrt(squares);
    // Finite iff the norm is (a NaN or inf gradient makes it so, as on the CPU).
    if (stats.norm <= 1.7976931348623157e308) {
      stats.amax = static_cast<double>(math::bits_float(bits));
    } else {
      stats.norm = stats.amax = static_cast<double>(pos_inf());
    }
    stats.loss = loss == nullptr ? 0.0F : *loss;
    stats.loss_finite = math::is_finite(stats.loss);
    *out = stats;
  }
};

// Clipping by a recorded norm, without reading it: grads *= f32(max_norm /
// (norm + 1e-6)) where GradStatsFinish's norm > max_norm, else nothing
// (torch.nn.utils.clip_grad_norm_; the factor in f64 and the product in f32,
// as the CPU's clip).
struct ClipByNorm {
  float* grads = nullptr;
  std::int64_t n = 0;
  const GradientStats* stats = nullptr;  // one of the device
  double max_norm = 0.0;

  simt::LaunchShape plan(const simt::DeviceProperties& device) const {
    return plan_grid_stride(device, n, kUnroll);
  }

  template <class Ctx>
  RIG_HD void operator()(Ctx& ctx) const {
    const double norm = stats->norm;
    if (!(norm > max_norm)) return;
    const float factor = static_cast<float>(max_norm / (norm + 1e-6));
    unrolled_grid_stride(
        ctx, n, [&](std::int64_t i) { return grads[i]; },
        [&](std::int64_t i, float g) { grads[i] = g * factor; });
  }
};

}  // namespace rig::kernels
