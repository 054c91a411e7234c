// Batch normalisation over contiguous f32 (or, through each kernel's `type`,
// f16 / bf16 x, y, dy and dx, computed in f32 and rounded at the store)
// viewed as [n, c, inner]
// (Backend::batch_norm_*, core/cpu/batch_norm.cpp). M = n * inner elements
// per channel, split into chunks of kBatchNormChunk (batch_norm_chunks(M) per
// channel); per-channel reductions run in two stages, a block per (channel,
// chunk) (for inner == 1, channels-last data: a block per (chunk, tile of
// channels), below) and then a thread per channel combining the chunks in
// order, so the result depends on the shape only, never on the grid or the
// device.
//
//   batch_norm_stats(s, x, mean, var), scratch batch_norm_stats_scratch(s)
//   floats (part = scratch):
//     1. BatchNormStatsPartial{x, n, c, inner, part, part + c * chunks}:
//        block (channel, chunk): two passes over the chunk (the second from
//        cache), both with simt::block_sum: the mean of the deviations from
//        the chunk's first element x0, then the sum of squared deviations
//        from that mean; writes x0 + mean and that sum. A constant channel
//        gives its value and a variance of exactly 0.
//        inner == 1: block (chunk, tile of channels), see "Channels last"
//        below: one pass per thread over its rows, shifted by its first
//        element x0 (s += d, q += d d for d = x - x0) in groups of kRowGroup
//        rows, each group's mean x0 + s / rows and m2 q - s^2 / rows (at
//        least 0) merged into the thread's in f32 by Chan et al.'s update;
//        the row lanes' combined in order in f64 by the same; writes the
//        chunk's mean and m2. The same exactness for a constant channel
//        (every d is 0).
//     2. BatchNormStatsFinish{part, part + c * chunks, n, c, inner, mean, var}:
//        thread per channel, the chunks combined in order in f64 (Chan et
//        al.'s pairwise update); mean and biased variance rounded to f32.
//        M == 0 gives NaNs, as the CPU.
//   batch_norm_prepare(args), no scratch:
//     1. BatchNormPrepareChannels{...args' fields}: thread per channel, the
//        CPU's f32 arithmetic in its order (the same bits).
//   batch_norm_stats_prepare(s, type, x, var, args): the statistics' two
//     kernels, BatchNormStatsFinish with `and_prepare` running
//     BatchNormPrepareChannels' channel() after each channel's mean and var.
//   batch_norm_apply(s, x, scale, shift, y), no scratch:
//     1. BatchNormApply{x, scale, shift, y, n, c, inner}: elementwise
//        y = fmaf(x, scale[c], shift[c]): fused, as the CPU's AVX2 / AVX-512
//        clones fuse it (GCC's default contraction), so the emulator, the
//        GPU and those clones give the same bits; the CPU's baseline clone
//        rounds the product (within an ulp of the larger term).
//   batch_norm_apply_add_relu: BatchNormApply with `relu` and `residual`:
//   relu(y + residual), y rounded to its type first: the bits of apply and
//   then add_relu, one pass over y fewer each way. Where packed, it also
//   stores the relu's mask as bits (relu_bits), which the backward reads in
//   place of the output (ReluMask::bits): 1/8 byte an element, not 2 or 4.
//   batch_norm_apply_relu and batch_norm_backward_relu (a relu after the
//   batch norm, fused): BatchNormApply with `relu`, and BatchNormGradPartial
//   and BatchNormBackwardDx with `relu` (relu's backward folded into their
//   reads of dy, its mask from the relu's output, from its bits, or
//   recomputed from x with the forward's scale and shift:
//   batch_norm_detail::ReluMask): the bits of
//   the unfused kernels, two passes fewer. With `masked_dy`
//   BatchNormGradPartial also stores relu's backward of dy (the residual's
//   gradient of batch_norm_apply_add_relu), which BatchNormBackwardDx then
//   reads in place of dy and the mask.
//   batch_norm_backward(s, x, dy, mean, invstd, gamma, batch_stats, dx,
//   dgamma, dbeta), scratch batch_norm_backward_scratch(s) floats (coef =
//   scratch: a, b, k of c floats each; part = scratch + 3 c):
//     1. only when dgamma || dbeta || (dx && batch_stats) (`sums`):
//        BatchNormGradPartial{x, dy, mean, n, c, inner, part, part + c * chunks}:
//        block (channel, chunk): the chunk's sum(dy) and sum(dy (x - mean));
//        inner == 1: block (chunk, tile of channels), each thread's sums over
//        its rows (group by group of kRowGroup rows), the row lanes' added
//        in order.
//     2. BatchNormGradFinish{part, part + c * chunks, sums, n, c, inner, mean,
//        invstd, gamma, batch_stats, dx != null, dgamma, dbeta, coef}: thread
//        per channel: the chunk sums added in order in f64, rounded to f32;
//        dgamma = sum_gx invstd, dbeta = sum_g (each when not null; with
//        add_dgamma / add_dbeta added to what they hold); for dx
//        the CPU's coefficients a, b, k from them in its f32 order.
//     3. only when dx: BatchNormBackwardDx{x, dy, coef, dx, n, c, inner}:
//        elementwise dx = fmaf(dy, a[c], fmaf(x, b[c], k[c])); without batch
//        statistics (b = k = 0) that is the CPU's rounded dy a[c], bits and
//        all.
//
// BatchNormApply and BatchNormBackwardDx move kPack elements per memory
// instruction (packed.hpp) where the shape keeps a pack's channels known
// (batch_norm_detail::packs_by_channel) and every operand is aligned, and go
// element by element otherwise: the same per-element math, the same bits.
//
// Against the CPU (which sums 16 float lanes into f64 per plane): the sums
// differ in rounding order only. Tested: mean within 1e-6 max|x|, var within
// 1e-5 relative, dgamma / dbeta within 1e-6 of the sum of the magnitudes of
// their terms, dx (batch_stats) within 1e-5 max|a| max|dy| (+1e-5 relative;
// the cancellation in dy - mean(dy) - xhat mean(dy xhat)), apply
// within an ulp (bit-equal to fmaf); prepare and dx without batch statistics
// bit-equal. The per-element multiply-adds are written as fmaf (fused under
// -fmad=false too); the per-channel f32 / f64 formulas (prepare, the finish
// kernels) are the CPU's unfused ones: instantiate these kernels with
// -fmad=false (kernel_runs_exact.cu) for the emulator's and the CPU's bits on
// the GPU.
//
// Channels last (inner == 1: [M, C] rows, as NHWC's N H W rows of C): the
// partial reductions run a block of kBlockThreads threads per (chunk j of
// kBatchNormChunk rows, tile of up to 32 consecutive channels), the same
// part[ch * chunks + j] as the [n, c, inner] path. A thread takes a unit of
// W channels: W = 1, or where c % kPack == 0 and the operands are aligned
// W = kPack (BatchNormStatsPartialPacked, BatchNormGradPartialPacked: one
// 16-byte load per row and operand; launch_partial chooses), tc = min(c / W,
// 32 / W) units a tile. A warp holds 32 / tc row lanes of tc unit lanes (for
// c >= 32: 32 channels of one row; below: 32 / tc consecutive rows), so each
// load covers consecutive elements; row lane r of R = 8 (32 / tc) takes the
// chunk's rows lo + r, lo + r + R, ... (kRowUnroll<W> loads before their
// adds, in row order; short f32 sums of kRowGroup rows each, added to the
// thread's totals, so the partial sums stay small), and the row lanes'
// results are combined in row-lane order through shared memory (two floats
// per thread and channel) by a thread per channel of the tile. Fixed order
// throughout, no atomics: the bits depend on (n, c) and W only (W on the
// alignment of the operands too). Reads are coalesced when inner == 1 or
// inner >= 32; for 1 < inner < 32 the per-channel reductions read runs of
// inner elements.
#pragma once

#include <cmath>
#include <cstdint>

#include "cuda/kernels/common.hpp"
#include "cuda/kernels/element_type.hpp"
#include "cuda/kernels/packed.hpp"
#include "rig/math/bits.hpp"
#include "rig/math/device_math.hpp"
#include "simt/collectives.hpp"

namespace rig::kernels {

// Elements of a channel per block of the partial reductions.
inline constexpr std::int64_t kBatchNormChunk = 16 * kBlockThreads;

// Chunks per channel of M = n * inner elements.
RIG_HD_INLINE std::int64_t batch_norm_chunks(std::int64_t n, std::int64_t inner) {
  return (n * inner + kBatchNormChunk - 1) / kBatchNormChunk;
}

// Scratch floats of batch_norm_stats: two per (channel, chunk).
inline std::int64_t batch_norm_stats_scratch(std::int64_t n, std::int64_t c, std::int64_t inner) {
  return 2 * c * batch_norm_chunks(n, inner);
}

// Scratch floats of batch_norm_backward: the three coefficients per channel,
// then two per (channel, chunk).
inline std::int64_t batch_norm_backward_scratch(std::int64_t n, std::int64_t c,
                                                std::int64_t inner) {
  return 3 * c + 2 * c * batch_norm_chunks(n, inner);
}

namespace batch_norm_detail {

// q = a / b, r = a % b for a >= 0, b > 0; 32-bit division when both fit.
RIG_HD_INLINE void divmod(std::int64_t a, std::int64_t b, std::int64_t& q, std::int64_t& r) {
  if (((a | b) >> 31) == 0) {
    const auto a32 = static_cast<std::uint32_t>(a);
    const auto b32 = static_cast<std::uint32_t>(b);
    const std::uint32_t q32 = a32 / b32;
    q = q32;
    r = a32 - q32 * b32;
  } else {
    q = a / b;
    r = a - q * b;
  }
}

// f(offset in x) for the channel's elements begin, begin + step, ... < end
// (element e of the channel is image e / inner, position e % inner), with one
// division up front and none per element.
template <class F>
RIG_HD_INLINE void for_channel_elements(std::int64_t begin, std::int64_t end, std::int64_t step,
                                        std::int64_t c, std::int64_t inner, std::int64_t ch,
                                        F&& f) {
  if (begin >= end) return;
  std::int64_t i = 0, r = 0, step_i = 0, step_r = 0;
  divmod(begin, inner, i, r);
  divmod(step, inner, step_i, step_r);
  for (std::int64_t e = begin; e < end; e += step) {
    f((i * c + ch) * inner + r);
    r += step_r;
    i += step_i;
    if (r >= inner) {
      r -= inner;
      ++i;
    }
  }
}

// The elements t of [n, c, inner] in an unrolled grid-stride loop (common.hpp's
// unrolled_grid_stride): kUnroll elements per thread and step, a block
// apart, each with its channel tracked without a division per element;
// load(t, channel) for all of a step's elements, then store(t, channel,
// loaded) for each. Plan it with plan_grid_stride(device, n c inner, kUnroll).
template <class Ctx, class Load, class Store>
RIG_HD_INLINE void for_elements_unrolled(Ctx& ctx, std::int64_t n, std::int64_t c,
                                         std::int64_t inner, Load&& load, Store&& store) {
  const std::int64_t total = n * c * inner;
  const std::int64_t block = ctx.block_threads();
  const std::int64_t first =
      static_cast<std::int64_t>(ctx.block_idx().x) * block * kUnroll + ctx.thread_rank();
  if (first >= total) return;
  const std::int64_t step = grid_threads(ctx) * kUnroll;
  std::int64_t r[kUnroll], ch[kUnroll];
  for (int u = 0; u < kUnroll; ++u) {
    std::int64_t plane = 0, dummy = 0;
    divmod(first + u * block, inner, plane, r[u]);
    divmod(plane, c, dummy, ch[u]);
  }
  std::int64_t step_planes = 0, step_r = 0, step_ch = 0, dummy = 0;
  divmod(step, inner, step_planes, step_r);
  divmod(step_planes, c, dummy, step_ch);
  for (std::int64_t base = first; base < total; base += step) {
    decltype(load(base, ch[0])) loaded[kUnroll]{};
    for (int u = 0; u < kUnroll; ++u) {
      if (base + u * block < total) loaded[u] = load(base + u * block, ch[u]);
    }
    for (int u = 0; u < kUnroll; ++u) {
      if (base + u * block < total) store(base + u * block, ch[u], loaded[u]);
      r[u] += step_r;
      ch[u] += step_ch;
      if (r[u] >= inner) {
        r[u] -= inner;
        ++ch[u];
      }
      if (ch[u] >= c) ch[u] -= c;
    }
  }
}

// Block threads of the partial reductions: enough warps for a chunk.
inline unsigned partial_threads(std::int64_t n, std::int64_t inner) {
  const std::int64_t m = n * inner;
  return row_block_threads(m < kBatchNormChunk ? m : kBatchNormChunk);
}

// The channels-last partial reductions (inner == 1: x is n rows of c
// channels; "Channels last" above). A thread takes a unit of `width`
// consecutive channels: one, or a pack of kPack (packed.hpp) where c % kPack
// == 0 and the operands are aligned. A tile is tc units, at most a warp's 32
// channels. Warp lane = slot tc + unit lane k for slot < sub = 32 / tc
// (lanes from sub tc on idle); row lane r = warp sub + slot of R = warps sub
// takes the rows lo + r, lo + r + R, ... < hi of the chunk.
RIG_HD_INLINE std::int64_t tile_units(std::int64_t c, int width) {
  const std::int64_t units = c / width;
  const std::int64_t most = static_cast<std::int64_t>(simt::kWarpSize) / width;
  return units < 1 ? 1 : (units < most ? units : most);
}
RIG_HD_INLINE std::int64_t channel_tiles(std::int64_t c, int width) {
  const std::int64_t tc = tile_units(c, width);
  return (c / width + tc - 1) / tc;
}

// Blocks, threads and shared memory (two floats per thread and channel of
// its unit) of the channels-last partial reductions.
inline simt::LaunchShape plan_row_tiles(const simt::DeviceProperties& device, std::int64_t n,
                                        std::int64_t c, int width, int registers) {
  return simt::plan_rows(
      device, batch_norm_chunks(n, 1) * channel_tiles(c, width),
      simt::KernelResources{kBlockThreads,
                            2 * static_cast<std::size_t>(width) * kBlockThreads * sizeof(float),
                            registers});
}

// A thread's place in its block of the channels-last partial reductions.
struct RowTile {
  std::int64_t j = 0;           // the chunk
  std::int64_t ch = 0;          // the first channel of the thread's unit (when active)
  std::int64_t tile_ch = 0;     // the tile's first channel
  std::int64_t lo = 0, hi = 0;  // the chunk's rows
  unsigned tc = 1, sub = 1;     // unit lanes and row lanes per warp
  unsigned k = 0;               // the thread's unit lane
  unsigned row_lane = 0, row_lanes = 1;
  bool active = false;  // a row lane's thread with channels below c

  // Rows of row lane r.
  RIG_HD_INLINE unsigned rows_of(unsigned r) const {
    const auto len = static_cast<unsigned>(hi - lo);
    return r < len ? (len - r + row_lanes - 1) / row_lanes : 0;
  }
  // The offset in x of the thread's first row, the step between its rows'
  // and their count.
  RIG_HD_INLINE std::int64_t first_at(std::int64_t c) const { return (lo + row_lane) * c + ch; }
  RIG_HD_INLINE std::int64_t at_step(std::int64_t c) const { return row_lanes * c; }
  RIG_HD_INLINE unsigned rows() const { return rows_of(row_lane); }
  // Thread rank of row lane r, unit lane k.
  RIG_HD_INLINE unsigned thread_of(unsigned r, unsigned lane_k) const {
    return (r / sub) * simt::kWarpSize + (r % sub) * tc + lane_k;
  }
};

// The block's (chunk, tile) and the thread's place; false (for the whole
// block) past the last one.
template <class Ctx>
RIG_HD_INLINE bool row_tile(const Ctx& ctx, std::int64_t n, std::int64_t c, int width, RowTile& t) {
  const std::int64_t tiles = channel_tiles(c, width);
  const std::int64_t task = block_row(ctx);
  if (task >= batch_norm_chunks(n, 1) * tiles) return false;
  std::int64_t tile = 0;
  divmod(task, tiles, t.j, tile);
  t.tc = static_cast<unsigned>(tile_units(c, width));
  t.sub = simt::kWarpSize / t.tc;
  const unsigned slot = ctx.lane() / t.tc;
  t.k = ctx.lane() % t.tc;
  t.row_lane = ctx.warp() * t.sub + slot;
  t.row_lanes = ctx.block_threads() / simt::kWarpSize * t.sub;
  const std::int64_t unit = tile * t.tc + t.k;
  t.tile_ch = tile * t.tc * width;
  t.ch = unit * width;
  t.lo = t.j * kBatchNormChunk;
  t.hi = t.lo + kBatchNormChunk < n ? t.lo + kBatchNormChunk : n;
  t.active = slot < t.sub && unit < c / width;
  return true;
}

// The thread that combines the row lanes' results of one of the tile's
// channels (thread rank q < tc width: channel tile_ch + q), its unit lane
// and the channel's place in the unit; false for the others.
struct TileChannel {
  std::int64_t ch = 0;
  unsigned k = 0, e = 0;
};
template <class Ctx>
RIG_HD_INLINE bool combining_thread(const Ctx& ctx, const RowTile& t, std::int64_t c, int width,
                                    TileChannel& out) {
  const unsigned q = ctx.thread_rank();
  if (q >= t.tc * static_cast<unsigned>(width)) return false;
  out.ch = t.tile_ch + q;
  out.k = q / static_cast<unsigned>(width);
  out.e = q % static_cast<unsigned>(width);
  return out.ch < c;
}

// Rows of a thread between the merges of its running sums (below): short
// runs of f32 additions, whose partial sums stay small.
inline constexpr unsigned kRowGroup = 32;

// A thread's rows (RowTile::first_at, at_step, rows) in groups of kRowGroup
// rows (the last may have fewer): group(offset of the first, rows) for each
// in order.
template <class Group>
RIG_HD_INLINE void for_row_groups(std::int64_t at, std::int64_t at_step, unsigned rows,
                                  Group&& group) {
  const std::int64_t span = kRowGroup * at_step;
  for (unsigned i = 0; i < rows; i += kRowGroup, at += span) {
    group(at, rows - i < kRowGroup ? rows - i : kRowGroup);
  }
}

// load(offset in x) for `rows` rows at offsets at, at + at_step, ...,
// Unroll loads before their adds, then add(loaded) for each in row order.
template <unsigned Unroll, class Load, class Add>
RIG_HD_INLINE void for_rows_unrolled(std::int64_t at, std::int64_t at_step, unsigned rows,
                                     Load&& load, Add&& add) {
  for (unsigned i = 0; i < rows; i += Unroll, at += Unroll * at_step) {
    decltype(load(at)) loaded[Unroll]{};  // {}: GCC cannot tell the two ifs agree
    RIG_UNROLL for (unsigned u = 0; u < Unroll; ++u) {
      if (i + u < rows) loaded[u] = load(at + u * at_step);
    }
    RIG_UNROLL for (unsigned u = 0; u < Unroll; ++u) {
      if (i + u < rows) add(loaded[u]);
    }
  }
}

// Rows loaded before their adds by a thread of W channels: as many 16-byte
// packs as a lone channel's kUnroll 2-byte loads leave registers for.
template <int W>
inline constexpr unsigned kRowUnroll = W == 1 ? static_cast<unsigned>(kUnroll) : 2U;

// Where a relu followed the batch norm, how its backward finds where dy
// passes: from the relu's output (y > 0), or recomputed from x with the
// forward's scale and shift, the batch norm's output as stored
// (BatchNormApply: rounded_to(type, fmaf(x, scale, shift))) > 0, the same
// test on the same value, without reading y.
// Or, where y is null and `bits` is set, the mask as BatchNormApply's
// relu_bits stored it: a bit per element, y > 0 (1/8 byte, not y's 2 or 4).
struct ReluMask {
  const float* y = nullptr;            // [n, c, inner] of the kernel's type, or null
  const float* scale = nullptr;        // [c], read where y and bits are null; or null
  const float* shift = nullptr;        // [c]
  const std::uint8_t* bits = nullptr;  // bit e % 8 of byte e / 8: element e's
};

// Element e's bit of a relu mask (ReluMask::bits).
RIG_HD_INLINE bool relu_bit(const std::uint8_t* bits, std::int64_t e) {
  return ((static_cast<unsigned>(bits[e >> 3]) >> (e & 7)) & 1U) != 0;
}

// The mask bits of W consecutive elements from `at` (bit i: element at + i):
// one byte where they are one (W == kPack from a multiple of 8: a pack).
template <int W>
RIG_HD_INLINE unsigned relu_bits_at(const std::uint8_t* bits, std::int64_t at) {
  if (W == 8 && (at & 7) == 0) return bits[at >> 3];
  unsigned out = 0;
  for (int e = 0; e < W; ++e) out |= static_cast<unsigned>(relu_bit(bits, at + e)) << e;
  return out;
}

// Whether dy passes the relu after the batch norm (true without one), given
// the relu's output y there (read only when relu.y is set), its mask bit
// (read only when relu.bits is set) and x (channel ch).
RIG_HD_INLINE bool relu_passes(const ReluMask& relu, ElementType type, float y, bool bit, float x,
                               std::int64_t ch) {
  if (relu.y != nullptr) return y > 0.0F;
  if (relu.bits != nullptr) return bit;
  if (relu.scale != nullptr)
    return rounded_to(type, ::fmaf(x, relu.scale[ch], relu.shift[ch])) > 0.0F;
  return true;
}

// dy at `at` (x there: x_at, channel ch), or with a relu after the batch norm
// relu's backward of it first: y > 0 ? dy : 0, as UnaryBackward.
RIG_HD_INLINE float grad_at(const float* dy, const ReluMask& relu, ElementType type,
                            std::int64_t at, float x_at, std::int64_t ch) {
  const float y = relu.y != nullptr ? load_element(relu.y, type, at) : 0.0F;
  const bool bit = relu.bits != nullptr && relu_bit(relu.bits, at);
  if (!relu_passes(relu, type, y, bit, x_at, ch)) return 0.0F;
  return load_element(dy, type, at);
}

// Whether [n, c, inner] data goes in packs of kPack elements (packed.hpp)
// whose channels are known without a division per element: each pack within
// one channel (inner a multiple of kPack), or kPack consecutive channels of
// one row (channels last: inner 1, c a multiple of kPack). Its operands must
// be pack_aligned too.
RIG_HD_INLINE bool packs_by_channel(std::int64_t c, std::int64_t inner) {
  return inner == 1 ? c % kPack == 0 : inner % kPack == 0;
}

// f(k, channels) for every pack k of [n, c, inner] (packs_by_channel), in a
// grid-stride loop; channels[e] is the channel of the pack's element e.
template <class Ctx, class F>
RIG_HD_INLINE void for_channel_packs(Ctx& ctx, std::int64_t n, std::int64_t c, std::int64_t inner,
                                     F&& f) {
  const std::int64_t step = inner == 1 ? 1 : 0;  // consecutive channels, or one
  packed_grid_stride(
      ctx, n * c * inner,
      [&](std::int64_t k) {
        const std::int64_t first = div_mod(div_mod(k * kPack, inner).quotient, c).remainder;
        std::int64_t channels[kPack];
        for (int e = 0; e < kPack; ++e) channels[e] = first + e * step;
        f(k, channels);
      },
      [](std::int64_t) {});  // no partial pack: n c inner is a multiple of kPack
}

}  // namespace batch_norm_detail

struct BatchNormStatsPartialPacked;
struct BatchNormGradPartialPacked;

struct BatchNormStatsPartial {
  const float* x = nullptr;  // [n, c, inner]
  std::int64_t n = 0, c = 0, inner = 1;
  float* part_mean = nullptr;           // [c, chunks]
  float* part_m2 = nullptr;             // [c, chunks]
  ElementType type = ElementType::f32;  // of x

  // Whether to launch BatchNormStatsPartialPacked instead (launch_partial):
  // the channels-last path in packs of kPack channels (packed.hpp).
  RIG_HD bool packed() const {
    return inner == 1 && c % kPack == 0 && pack_aligned<kPack>(x, type);
  }
  using Packed = BatchNormStatsPartialPacked;

  simt::LaunchShape plan(const simt::DeviceProperties& device) const {
    constexpr int registers = 52;  // ptxas: sm_80 49, sm_90 52 (both paths: one kernel)
    if (inner == 1) return batch_norm_detail::plan_row_tiles(device, n, c, 1, registers);
    return simt::plan_rows(
        device, c * batch_norm_chunks(n, inner),
        simt::KernelResources{batch_norm_detail::partial_threads(n, inner), 0, registers});
  }

  template <class Ctx>
  RIG_HD void operator()(Ctx& ctx) const {
    if (inner == 1) {  // uniform over the launch
      channels_last<1>(ctx);
      return;
    }
    const std::int64_t chunks = batch_norm_chunks(n, inner);
    const std::int64_t row = block_row(ctx);
    if (row >= c * chunks) return;
    std::int64_t ch = 0, j = 0;
    batch_norm_detail::divmod(row, chunks, ch, j);
    const std::int64_t m = n * inner;
    const std::int64_t lo = j * kBatchNormChunk;
    const std::int64_t hi = lo + kBatchNormChunk < m ? lo + kBatchNormChunk : m;
    const std::int64_t first = lo + ctx.thread_rank();
    const std::int64_t step = ctx.block_threads();
    // Deviations from the chunk's first element, so a constant chunk gives
    // exactly its value and 0 (and large means lose nothing to the sums).
    std::int64_t i0 = 0, r0 = 0;
    batch_norm_detail::divmod(lo, inner, i0, r0);
    const float shift = load_element(x, type, (i0 * c + ch) * inner + r0);
    const float* xs = x;  // the lambdas capture locals, not the kernel's `this`
    const ElementType ty = type;
    float s = 0.0F;
    batch_norm_detail::for_channel_elements(first, hi, step, c, inner, ch, [&](std::int64_t at) {
      s += load_element(xs, ty, at) - shift;
    });
    const float dev = simt::block_sum(ctx, s) / static_cast<float>(hi - lo);
    float q = 0.0F;
    batch_norm_detail::for_channel_elements(first, hi, step, c, inner, ch, [&](std::int64_t at) {
      const float d = (load_element(xs, ty, at) - shift) - dev;
      q = ::fmaf(d, d, q);
    });
    const float m2 = simt::block_sum(ctx, q);
    if (ctx.thread_rank() == 0) {
      part_mean[row] = shift + dev;
      part_m2[row] = m2;
    }
  }

  // inner == 1 (batch_norm_detail::RowTile), W channels per thread: one
  // pass per thread over its rows, each channel shifted by its first element
  // x0: per group of kRowGroup rows (d = x - x0: s += d, q += d d) the
  // group's mean - x0 = s / rows and m2 q - s (s / rows) (at least 0),
  // merged into the thread's running ones in f32 (Chan et al.); then the
  // row lanes' means and m2s combined in order in f64 (as
  // BatchNormStatsFinish does the chunks). A constant channel gives d = 0
  // throughout: its value and 0.
  template <int W, class Ctx>
  RIG_HD void channels_last(Ctx& ctx) const {
    batch_norm_detail::RowTile t;
    if (!batch_norm_detail::row_tile(ctx, n, c, W, t)) return;
    const unsigned rows = t.rows();
    float mean_t[W] = {}, m2_t[W] = {};
    if (t.active && rows != 0) {
      const float* xs = x;  // the lambdas capture locals, not the kernel's `this`
      const ElementType ty = type;
      const std::int64_t first = t.first_at(c), step = t.at_step(c);
      const Pack<W> shift = load_elements<W>(xs, ty, first);
      // Count, mean - shift and m2 of the rows so far, merged group by group.
      float count = 0.0F, dev[W] = {}, m2[W] = {};
      batch_norm_detail::for_row_groups(first, step, rows, [&](std::int64_t at, unsigned group) {
        float s[W] = {}, q[W] = {};
        batch_norm_detail::for_rows_unrolled<batch_norm_detail::kRowUnroll<W>>(
            at, step, group, [&](std::int64_t a) { return load_elements<W>(xs, ty, a); },
            [&](const Pack<W>& v) {
              for (int e = 0; e < W; ++e) {
                const float d = v.v[e] - shift.v[e];
                s[e] += d;
                q[e] = ::fmaf(d, d, q[e]);
              }
            });
        const auto nb = static_cast<float>(group);
        const float total = count + nb;
        const float w = nb / total;
        for (int e = 0; e < W; ++e) {
          const float dev_b = s[e] / nb;
          const float m2_b = ::fmaf(-s[e], dev_b, q[e]);
          const float delta = dev_b - dev[e];
          dev[e] = ::fmaf(delta, w, dev[e]);
          m2[e] += (m2_b > 0.0F ? m2_b : 0.0F) + delta * delta * (count * w);
        }
        count = total;
      });
      for (int e = 0; e < W; ++e) {
        mean_t[e] = shift.v[e] + dev[e];
        m2_t[e] = m2[e];
      }
    }
    float* sh = ctx.template shared<float>();  // [2 W, block threads]: means, m2s
    const unsigned bt = ctx.block_threads();
    for (int e = 0; e < W; ++e) {
      sh[static_cast<unsigned>(e) * bt + ctx.thread_rank()] = mean_t[e];
      sh[static_cast<unsigned>(W + e) * bt + ctx.thread_rank()] = m2_t[e];
    }
    ctx.sync();
    batch_norm_detail::TileChannel tch;
    if (!batch_norm_detail::combining_thread(ctx, t, c, W, tch)) return;
    double mu = 0.0, m2 = 0.0, count = 0.0;
    for (unsigned r = 0; r < t.row_lanes; ++r) {
      const unsigned rows = t.rows_of(r);
      if (rows == 0) break;  // and none for the later row lanes
      const unsigned at = t.thread_of(r, tch.k);
      const auto nb = static_cast<double>(rows);
      const double total = count + nb;
      const double delta = static_cast<double>(sh[tch.e * bt + at]) - mu;
      mu += delta * (nb / total);
      m2 += static_cast<double>(sh[(W + tch.e) * bt + at]) + delta * delta * (count * nb / total);
      count = total;
    }
    const std::int64_t row = tch.ch * batch_norm_chunks(n, 1) + t.j;
    part_mean[row] = static_cast<float>(mu);
    part_m2[row] = static_cast<float>(m2);
  }
};

// BatchNormPrepare's fields (backend/kernel_args.hpp) as plain arguments.
struct BatchNormPrepareChannels {
  std::int64_t c = 0;
  bool training = true;
  float momentum = 0.1F, eps = 1e-5F, unbias = 1.0F;
  float* mean = nullptr;
  const float* var = nullptr;  // training only
  float* running_mean = nullptr;
  float* running_var = nullptr;
  const float* gamma = nullptr;  // [c] of param_type, or null (1)
  const float* beta = nullptr;   // [c] of param_type, or null (0)
  float* invstd = nullptr;
  float* scale = nullptr;
  float* shift = nullptr;
  ElementType param_type = ElementType::f32;

  simt::LaunchShape plan(const simt::DeviceProperties& device) const {
    return plan_grid_stride(device, c);
  }

  template <class Ctx>
  RIG_HD void operator()(Ctx& ctx) const {
    for (std::int64_t ch = global_thread(ctx); ch < c; ch += grid_threads(ctx)) channel(ch);
  }

  // One channel's coefficients (and running statistics); BatchNormStatsFinish
  // calls it too, after writing the channel's mean and var.
  RIG_HD void channel(std::int64_t ch) const {
    using M = math::DeviceMath;
    float v = 0.0F;
    if (training) {
      v = var[ch];
      if (running_mean != nullptr) {
        running_mean[ch] = (1.0F - momentum) * running_mean[ch] + momentum * mean[ch];
      }
      if (running_var != nullptr) {
        running_var[ch] = (1.0F - momentum) * running_var[ch] + momentum * v * unbias;
      }
    } else {
      mean[ch] = running_mean[ch];
      v = running_var[ch];
    }
    const float is = 1.0F / M::sqrt(v + eps);
    invstd[ch] = is;
    const float k = (gamma != nullptr ? load_element(gamma, param_type, ch) : 1.0F) * is;
    scale[ch] = k;
    shift[ch] = (beta != nullptr ? load_element(beta, param_type, ch) : 0.0F) - mean[ch] * k;
  }
};

struct BatchNormStatsFinish {
  const float* part_mean = nullptr;  // [c, chunks]
  const float* part_m2 = nullptr;    // [c, chunks]
  std::int64_t n = 0, c = 0, inner = 1;
  float* mean = nullptr;  // [c]
  float* var = nullptr;   // [c]
  // With `and_prepare`, each thread then runs prepare's channel on the mean
  // and var it wrote (prepare.mean and .var are these; training): the bits
  // of BatchNormPrepareChannels after this kernel, one launch fewer.
  bool and_prepare = false;
  BatchNormPrepareChannels prepare{};

  simt::LaunchShape plan(const simt::DeviceProperties& device) const {
    return plan_grid_stride(device, c);
  }

  template <class Ctx>
  RIG_HD void operator()(Ctx& ctx) const {
    const std::int64_t m = n * inner;
    const std::int64_t chunks = batch_norm_chunks(n, inner);
    for (std::int64_t ch = global_thread(ctx); ch < c; ch += grid_threads(ctx)) {
      if (m == 0) {
        mean[ch] = math::bits_float(0x7FC00000U);
        var[ch] = math::bits_float(0x7FC00000U);
        if (and_prepare) prepare.channel(ch);
        continue;
      }
      double mu = 0.0, m2 = 0.0, count = 0.0;
      for (std::int64_t j = 0; j < chunks; ++j) {
        const std::int64_t left = m - j * kBatchNormChunk;
        const auto nb = static_cast<double>(left < kBatchNormChunk ? left : kBatchNormChunk);
        const double total = count + nb;
        const double delta = static_cast<double>(part_mean[ch * chunks + j]) - mu;
        mu += delta * (nb / total);
        m2 += static_cast<double>(part_m2[ch * chunks + j]) + delta * delta * (count * nb / total);
        count = total;
      }
      mean[ch] = static_cast<float>(mu);
      var[ch] = static_cast<float>(m2 / count);
      if (and_prepare) prepare.channel(ch);
    }
  }
};

struct BatchNormApply {
  const float* x = nullptr;      // [n, c, inner]
  const float* scale = nullptr;  // [c]
  const float* shift = nullptr;  // [c]
  float* y = nullptr;            // [n, c, inner]
  std::int64_t n = 0, c = 0, inner = 1;
  ElementType type = ElementType::f32;  // of x and y
  // y = relu(y as stored), relu's rule (x < 0 ? 0 : x, NaN kept): the bits
  // of this kernel and then UnaryForward's relu, in one pass.
  bool relu = false;
  // [n, c, inner] of `type`, or null: y = relu(y as stored + residual) (with
  // relu): the bits of this kernel, then BinaryKernel's add with relu.
  const float* residual = nullptr;
  // [c] each, or null: the residual is another batch norm's input, and what
  // is added is its output as this kernel would store it,
  // rounded_to(type, fmaf(residual, residual_scale, residual_shift)) (a
  // residual block's projection shortcut: its batch norm is never written).
  const float* residual_scale = nullptr;
  const float* residual_shift = nullptr;
  // With relu, where packed() (the caller checks: a pack's 8 bits are one
  // byte, which one thread writes): the mask of the stored y, y > 0, as
  // ReluMask::bits, pack k's in byte k. Or null.
  std::uint8_t* relu_bits = nullptr;

  // In packs (packed.hpp) where the shape and every operand allow.
  RIG_HD bool packed() const {
    return batch_norm_detail::packs_by_channel(c, inner) && pack_aligned<kPack>(x, type) &&
           pack_aligned<kPack>(y, type) && pack_aligned<kPack>(residual, type);
  }

  simt::LaunchShape plan(const simt::DeviceProperties& device) const {
    return plan_grid_stride(device, n * c * inner, packed() ? kPack : kUnroll, 56);  // ptxas: 56
  }

  // y at one element from x and the residual there (rv, read where
  // `residual`) with its channel's scale and shift.
  RIG_HD_INLINE static float value(ElementType type, bool residual, bool relu, float xv, float rv,
                                   float scale, float shift) {
    float v = ::fmaf(xv, scale, shift);
    if (residual) v = rounded_to(type, v) + rv;  // batch norm's y as stored, + residual
    return relu ? relu_of_stored(type, v) : v;
  }
  // The residual added at channel ch: as read, or normalised (rscale: the
  // kernel's residual_scale, rshift its residual_shift).
  RIG_HD_INLINE static float residual_value(ElementType type, const float* rscale,
                                            const float* rshift, float rv, std::int64_t ch) {
    if (rscale == nullptr) return rv;
    return rounded_to(type, ::fmaf(rv, rscale[ch], rshift[ch]));
  }

  template <class Ctx>
  RIG_HD void operator()(Ctx& ctx) const {
    struct Loaded {
      float x, r;
    };
    const float* xs = x;  // the lambdas capture locals, not the kernel's `this`
    const float* rs = residual;
    const float* rsc = residual_scale;
    const float* rsh = residual_shift;
    const float* sc = scale;
    const float* sh = shift;
    float* ys = y;
    std::uint8_t* bits = relu_bits;
    const ElementType ty = type;
    const bool rl = relu;
    if (packed()) {  // uniform over the launch
      batch_norm_detail::for_channel_packs(
          ctx, n, c, inner, [&](std::int64_t k, const std::int64_t(&ch)[kPack]) {
            const Pack<kPack> xv = load_pack<kPack>(xs, ty, k);
            const Pack<kPack> rv = rs != nullptr ? load_pack<kPack>(rs, ty, k) : Pack<kPack>{};
            Pack<kPack> out;
            unsigned mask = 0;
            for (int e = 0; e < kPack; ++e) {
              const float r = rs != nullptr ? residual_value(ty, rsc, rsh, rv.v[e], ch[e]) : 0.0F;
              out.v[e] = value(ty, rs != nullptr, rl, xv.v[e], r, sc[ch[e]], sh[ch[e]]);
              // With relu, value() is y as stored (relu_of_stored).
              mask |= static_cast<unsigned>(out.v[e] > 0.0F) << e;
            }
            store_pack<kPack>(ys, ty, k, out);
            if (bits != nullptr) bits[k] = static_cast<std::uint8_t>(mask);
          });
      return;
    }
    batch_norm_detail::for_elements_unrolled(
        ctx, n, c, inner,
        [&](std::int64_t t, std::int64_t) {
          return Loaded{load_element(xs, ty, t), rs != nullptr ? load_element(rs, ty, t) : 0.0F};
        },
        [&](std::int64_t t, std::int64_t ch, const Loaded& l) {
          const float r = rs != nullptr ? residual_value(ty, rsc, rsh, l.r, ch) : 0.0F;
          store_element(ys, ty, t, value(ty, rs != nullptr, rl, l.x, r, sc[ch], sh[ch]));
        });
  }
};

struct BatchNormGradPartial {
  const float* x = nullptr;     // [n, c, inner]
  const float* dy = nullptr;    // [n, c, inner]
  const float* mean = nullptr;  // [c]
  std::int64_t n = 0, c = 0, inner = 1;
  float* part_g = nullptr;              // [c, chunks]: sum(dy)
  float* part_gx = nullptr;             // [c, chunks]: sum(dy (x - mean))
  ElementType type = ElementType::f32;  // of x, dy and the relu's output
  // Where a relu followed (BatchNormApply::relu): dy where the relu's output
  // is > 0, else 0 (relu's backward, folded in); none by default.
  batch_norm_detail::ReluMask relu{};
  // With a relu: that gradient stored too (of `type`: exact, it is dy or 0),
  // for the residual a relu(batch norm + residual) also feeds, and for
  // BatchNormBackwardDx to read in place of dy and the mask. Or null.
  float* masked_dy = nullptr;

  // Whether to launch BatchNormGradPartialPacked instead (launch_partial):
  // the channels-last path in packs of kPack channels (packed.hpp).
  RIG_HD bool packed() const {
    return inner == 1 && c % kPack == 0 && pack_aligned<kPack>(x, type) &&
           pack_aligned<kPack>(dy, type) && pack_aligned<kPack>(relu.y, type) &&
           pack_aligned<kPack>(masked_dy, type);
  }
  using Packed = BatchNormGradPartialPacked;

  simt::LaunchShape plan(const simt::DeviceProperties& device) const {
    constexpr int registers = 64;  // ptxas: sm_80 64, sm_90 56 (both paths: one kernel)
    if (inner == 1) return batch_norm_detail::plan_row_tiles(device, n, c, 1, registers);
    return simt::plan_rows(
        device, c * batch_norm_chunks(n, inner),
        simt::KernelResources{batch_norm_detail::partial_threads(n, inner), 0, registers});
  }

  template <class Ctx>
  RIG_HD void operator()(Ctx& ctx) const {
    if (inner == 1) {  // uniform over the launch
      channels_last<1>(ctx);
      return;
    }
    const std::int64_t chunks = batch_norm_chunks(n, inner);
    const std::int64_t row = block_row(ctx);
    if (row >= c * chunks) return;
    std::int64_t ch = 0, j = 0;
    batch_norm_detail::divmod(row, chunks, ch, j);
    const std::int64_t m = n * inner;
    const std::int64_t lo = j * kBatchNormChunk;
    const std::int64_t hi = lo + kBatchNormChunk < m ? lo + kBatchNormChunk : m;
    const float mu = mean[ch];
    const float* xs = x;  // the lambda captures locals, not the kernel's `this`
    const float* gs = dy;
    const batch_norm_detail::ReluMask rm = relu;
    float* md = masked_dy;
    const ElementType ty = type;
    float sg = 0.0F, sgx = 0.0F;
    batch_norm_detail::for_channel_elements(
        lo + ctx.thread_rank(), hi, ctx.block_threads(), c, inner, ch, [&](std::int64_t at) {
          const float xv = load_element(xs, ty, at);
          const float g = batch_norm_detail::grad_at(gs, rm, ty, at, xv, ch);
          if (md != nullptr) store_element(md, ty, at, g);
          sg += g;
          sgx = ::fmaf(g, xv - mu, sgx);
        });
    sg = simt::block_sum(ctx, sg);
    sgx = simt::block_sum(ctx, sgx);
    if (ctx.thread_rank() == 0) {
      part_g[row] = sg;
      part_gx[row] = sgx;
    }
  }

  // inner == 1 (batch_norm_detail::RowTile), W channels per thread: each
  // thread's sums over its rows, group by group (kRowGroup rows) added to
  // its totals, then the row lanes' totals added in order.
  template <int W, class Ctx>
  RIG_HD void channels_last(Ctx& ctx) const {
    struct Loaded {
      Pack<W> g, x;
      std::int64_t at;
    };
    batch_norm_detail::RowTile t;
    if (!batch_norm_detail::row_tile(ctx, n, c, W, t)) return;
    float sg[W] = {}, sgx[W] = {};
    if (t.active) {
      const float* xs = x;  // the lambdas capture locals, not the kernel's `this`
      const float* gs = dy;
      const batch_norm_detail::ReluMask rm = relu;
      float* md = masked_dy;
      const ElementType ty = type;
      const std::int64_t step = t.at_step(c);
      const std::int64_t ch = t.ch;
      float mu[W];
      for (int e = 0; e < W; ++e) mu[e] = mean[ch + e];
      batch_norm_detail::for_row_groups(
          t.first_at(c), step, t.rows(), [&](std::int64_t at, unsigned group) {
            float g[W] = {}, gx[W] = {};
            batch_norm_detail::for_rows_unrolled<batch_norm_detail::kRowUnroll<W>>(
                at, step, group,
                [&](std::int64_t a) {
                  Loaded l;
                  l.x = load_elements<W>(xs, ty, a);
                  const Pack<W> y = rm.y != nullptr ? load_elements<W>(rm.y, ty, a) : Pack<W>{};
                  const unsigned mb =
                      rm.bits != nullptr ? batch_norm_detail::relu_bits_at<W>(rm.bits, a) : 0U;
                  const Pack<W> d = load_elements<W>(gs, ty, a);
                  for (int e = 0; e < W; ++e) {
                    l.g.v[e] = batch_norm_detail::relu_passes(rm, ty, y.v[e], ((mb >> e) & 1U) != 0,
                                                              l.x.v[e], ch + e)
                                   ? d.v[e]
                                   : 0.0F;
                  }
                  l.at = a;
                  return l;
                },
                [&](const Loaded& v) {
                  // Stored after the group's loads are in flight, not between them.
                  if (md != nullptr) store_elements<W>(md, ty, v.at, v.g);
                  for (int e = 0; e < W; ++e) {
                    g[e] += v.g.v[e];
                    gx[e] = ::fmaf(v.g.v[e], v.x.v[e] - mu[e], gx[e]);
                  }
                });
            for (int e = 0; e < W; ++e) {
              sg[e] += g[e];
              sgx[e] += gx[e];
            }
          });
    }
    float* sh = ctx.template shared<float>();  // [2 W, block threads]: sum(dy), sum(dy (x - mean))
    const unsigned bt = ctx.block_threads();
    for (int e = 0; e < W; ++e) {
      sh[static_cast<unsigned>(e) * bt + ctx.thread_rank()] = sg[e];
      sh[static_cast<unsigned>(W + e) * bt + ctx.thread_rank()] = sgx[e];
    }
    ctx.sync();
    batch_norm_detail::TileChannel tch;
    if (!batch_norm_detail::combining_thread(ctx, t, c, W, tch)) return;
    float gt = 0.0F, gxt = 0.0F;
    for (unsigned r = 0; r < t.row_lanes && t.rows_of(r) != 0; ++r) {
      const unsigned at = t.thread_of(r, tch.k);
      gt += sh[tch.e * bt + at];
      gxt += sh[(W + tch.e) * bt + at];
    }
    const std::int64_t row = tch.ch * batch_norm_chunks(n, 1) + t.j;
    part_g[row] = gt;
    part_gx[row] = gxt;
  }
};

// The channels-last partial reductions in packs of kPack channels (W =
// kPack), kernels of their own: their registers (ptxas sm_90: 80 and 128)
// would halve the other paths' occupancy. Launch them through
// launch_partial, where the kernel's packed() says.
struct BatchNormStatsPartialPacked : BatchNormStatsPartial {
  simt::LaunchShape plan(const simt::DeviceProperties& device) const {
    return batch_norm_detail::plan_row_tiles(device, n, c, kPack, 80);  // ptxas: 80
  }
  template <class Ctx>
  RIG_HD void operator()(Ctx& ctx) const {
    channels_last<kPack>(ctx);
  }
};

struct BatchNormGradPartialPacked : BatchNormGradPartial {
  simt::LaunchShape plan(const simt::DeviceProperties& device) const {
    return batch_norm_detail::plan_row_tiles(device, n, c, kPack, 128);  // ptxas: 128
  }
  template <class Ctx>
  RIG_HD void operator()(Ctx& ctx) const {
    channels_last<kPack>(ctx);
  }
};

// launch(kernel) for a partial reduction: k, or its Packed kernel where
// k.packed().
template <class Partial, class Launch>
void launch_partial(const Partial& k, Launch&& launch) {
  if (k.packed()) {
    launch(typename Partial::Packed{k});
  } else {
    launch(k);
  }
}

struct BatchNormGradFinish {
  const float* part_g = nullptr;   // [c, chunks]; read only when sums
  const float* part_gx = nullptr;  // [c, chunks]; read only when sums
  bool sums = true;                // BatchNormGradPartial ran
  std::int64_t n = 0, c = 0, inner = 1;
  const float* mean = nullptr;    // [c]
  const float* invstd = nullptr;  // [c]
  const float* gamma = nullptr;   // [c] of param_type, or null (1)
  bool batch_stats = true;
  bool dx = true;           // write the coefficients of BatchNormBackwardDx
  float* dgamma = nullptr;  // [c] of param_type, or null
  float* dbeta = nullptr;   // [c] of param_type, or null
  float* coef = nullptr;    // [3 c]: a, b, k
  // gamma, dgamma and dbeta: f32, or a 16-bit model's parameters and their
  // gradients (rounded once, at the store).
  ElementType param_type = ElementType::f32;
  // Add dgamma / dbeta to what those hold (the sum in f32, rounded once).
  bool add_dgamma = false, add_dbeta = false;

  simt::LaunchShape plan(const simt::DeviceProperties& device) const {
    return plan_grid_stride(device, c);
  }

  template <class Ctx>
  RIG_HD void operator()(Ctx& ctx) const {
    const std::int64_t chunks = batch_norm_chunks(n, inner);
    const auto count = static_cast<float>(n * inner);
    for (std::int64_t ch = global_thread(ctx); ch < c; ch += grid_threads(ctx)) {
      float sum_g = 0.0F, sum_gx = 0.0F;
      if (sums) {
        double a = 0.0, b = 0.0;
        for (std::int64_t j = 0; j < chunks; ++j) {
          a += part_g[ch * chunks + j];
          b += part_gx[ch * chunks + j];
        }
        sum_g = static_cast<float>(a);
        sum_gx = static_cast<float>(b);
      }
      const float is = invstd[ch];
      if (dgamma != nullptr) {
        float v = sum_gx * is;
        if (add_dgamma) v += load_element(dgamma, param_type, ch);
        store_element(dgamma, param_type, ch, v);
      }
      if (dbeta != nullptr) {
        float v = sum_g;
        if (add_dbeta) v += load_element(dbeta, param_type, ch);
        store_element(dbeta, param_type, ch, v);
      }
      if (!dx) continue;
      const float a = (gamma != nullptr ? load_element(gamma, param_type, ch) : 1.0F) * is;
      float b = 0.0F, k = 0.0F;
      if (batch_stats) {
        const float slope = a * is * is * sum_gx / count;
        b = -slope;
        k = slope * mean[ch] - a * sum_g / count;
      }
      coef[ch] = a;
      coef[c + ch] = b;
      coef[2 * c + ch] = k;
    }
  }
};

struct BatchNormBackwardDx {
  const float* x = nullptr;     // [n, c, inner]
  const float* dy = nullptr;    // [n, c, inner]
  const float* coef = nullptr;  // [3 c] from BatchNormGradFinish
  float* dx = nullptr;          // [n, c, inner]
  std::int64_t n = 0, c = 0, inner = 1;
  ElementType type = ElementType::f32;  // of x, dy, dx and the relu's output
  batch_norm_detail::ReluMask relu{};   // as BatchNormGradPartial's

  // In packs (packed.hpp) where the shape and every operand allow.
  RIG_HD bool packed() const {
    return batch_norm_detail::packs_by_channel(c, inner) && pack_aligned<kPack>(x, type) &&
           pack_aligned<kPack>(dy, type) && pack_aligned<kPack>(dx, type) &&
           pack_aligned<kPack>(relu.y, type);
  }

  simt::LaunchShape plan(const simt::DeviceProperties& device) const {
    return plan_grid_stride(device, n * c * inner, packed() ? kPack : kUnroll, 72);  // ptxas: 72
  }

  template <class Ctx>
  RIG_HD void operator()(Ctx& ctx) const {
    struct Loaded {
      float g, x;
    };
    const float* xs = x;  // the lambdas capture locals, not the kernel's `this`
    const float* gs = dy;
    const float* a = coef;
    const float* b = coef + c;
    const float* k = coef + 2 * c;
    float* out = dx;
    const batch_norm_detail::ReluMask rm = relu;
    const ElementType ty = type;
    if (packed()) {  // uniform over the launch
      batch_norm_detail::for_channel_packs(
          ctx, n, c, inner, [&](std::int64_t p, const std::int64_t(&ch)[kPack]) {
            const Pack<kPack> xv = load_pack<kPack>(xs, ty, p);
            const Pack<kPack> gv = load_pack<kPack>(gs, ty, p);
            const Pack<kPack> yv = rm.y != nullptr ? load_pack<kPack>(rm.y, ty, p) : Pack<kPack>{};
            const unsigned mb = rm.bits != nullptr ? rm.bits[p] : 0U;  // pack p's byte
            Pack<kPack> d;
            for (int e = 0; e < kPack; ++e) {
              const std::int64_t ce = ch[e];
              const float g = batch_norm_detail::relu_passes(rm, ty, yv.v[e], ((mb >> e) & 1U) != 0,
                                                             xv.v[e], ce)
                                  ? gv.v[e]
                                  : 0.0F;
              d.v[e] = ::fmaf(g, a[ce], ::fmaf(xv.v[e], b[ce], k[ce]));
            }
            store_pack<kPack>(out, ty, p, d);
          });
      return;
    }
    batch_norm_detail::for_elements_unrolled(
        ctx, n, c, inner,
        [&](std::int64_t t, std::int64_t ch) {
          const float xv = load_element(xs, ty, t);
          return Loaded{batch_norm_detail::grad_at(gs, rm, ty, t, xv, ch), xv};
        },
        [&](std::int64_t t, std::int64_t ch, const Loaded& v) {
          store_element(out, ty, t, ::fmaf(v.g, a[ch], ::fmaf(v.x, b[ch], k[ch])));
        });
  }
};

}  // namespace rig::kernels
