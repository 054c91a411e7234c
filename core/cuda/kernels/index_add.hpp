// index_add by sorted positions (KernelBackend::index_add): dx [outer, n,
// inner] += grad [outer, k, inner] at index [k], each destination element
// summed in ascending position t (the CPU back end's order, so its bits),
// with parallelism over the destination rows as well as the columns. Three
// kernels, no atomics:
//   IndexAddRank: the rank of each position t in the order of the keys
//     (index[t], t), key = index[t] when it is in [0, n), else n (sorted
//     last, added nowhere). The keys are unique, so the ranks are a stable
//     sort by row. Every position is compared with all k positions: block
//     (i-block, chunk) counts, for its kIndexAddRankThreads positions, the
//     smaller keys among one chunk of the positions, staged through shared
//     memory in tiles; counts [chunks, k] holds the partial counts. O(k^2)
//     comparisons, in parallel over (k / 256) * chunks blocks.
//   IndexAddScatter: rank = the sum of the position's partial counts;
//     order[rank] = t, keys[rank] = key: the positions sorted by row, equal
//     rows in ascending t.
//   IndexAddSegments: one thread per (outer, sorted position, column); the
//     thread at the first position of a run of equal valid keys sums the
//     run's gradient rows into its dx element in run order (ascending t),
//     one float rounding per add as the CPU does; the others do nothing.
//     Loads are issued kIndexAddBatch at a time ahead of the adds, since a
//     run (a frequent token) is one thread's serial chain per column. With
//     16-bit dx (Backend::index_add_16) the run is summed from 0 and its sum,
//     rounded to dx's type, added to dx once: the bits of a dense f32
//     gradient rounded and added; dx elements no key reaches stay unwritten.
// Used when k <= kIndexAddSortMaxK and n < 2^31 (keys fit 32 bits); above
// that indexing.hpp's IndexAdd (one thread per column walking all of t) is
// the fallback.
#pragma once

#include <cstdint>

#include "cuda/kernels/common.hpp"
#include "cuda/kernels/element_type.hpp"
#include "cuda/kernels/indexing.hpp"
#include "rig/dtype.hpp"

namespace rig::kernels {

// Positions per IndexAddRank block (one thread each) and keys per shared tile.
inline constexpr unsigned kIndexAddRankThreads = 256;
inline constexpr std::int64_t kIndexAddRankTile = 1024;
// At most this many chunks of the positions per IndexAddRank: the scratch of
// partial counts is at most kIndexAddMaxChunks * k entries.
inline constexpr std::int64_t kIndexAddMaxChunks = 16;
// The largest k sorted; the comparisons grow as k^2 and the scratch as
// (kIndexAddMaxChunks + 2) * k 32-bit words.
inline constexpr std::int64_t kIndexAddSortMaxK = std::int64_t{1} << 20;
// Gradient loads in flight per thread in IndexAddSegments.
inline constexpr int kIndexAddBatch = 8;

// Positions per chunk of IndexAddRank: a multiple of the tile, at least one
// tile, few enough chunks to bound the scratch.
inline std::int64_t index_add_rank_chunk(std::int64_t k) {
  const std::int64_t per = (k + kIndexAddMaxChunks - 1) / kIndexAddMaxChunks;
  const std::int64_t tiles = (per + kIndexAddRankTile - 1) / kIndexAddRankTile;
  return (tiles < 1 ? 1 : tiles) * kIndexAddRankTile;
}

// The sort key of position t: its row, or n when out of [0, n).
RIG_HD_INLINE std::uint32_t index_add_key(const void* index, DType type, std::int64_t t,
                                          std::int64_t n) {
  const std::int64_t row = load_index(index, type, t);
  return static_cast<std::uint32_t>(row >= 0 && row < n ? row : n);
}

struct IndexAddRank {
  const void* index = nullptr;  // [k]
  DType index_type = DType::i64;
  std::int64_t k = 0, n = 0;
  std::int64_t chunk = kIndexAddRankTile;  // positions per chunk (index_add_rank_chunk)
  std::uint32_t* counts = nullptr;         // [ceil(k / chunk), k]

  RIG_HD_INLINE std::int64_t chunks() const { return (k + chunk - 1) / chunk; }
  RIG_HD_INLINE std::int64_t position_blocks() const {
    return (k + kIndexAddRankThreads - 1) / kIndexAddRankThreads;
  }

  simt::LaunchShape plan(const simt::DeviceProperties& device) const {
    return simt::plan_rows(
        device, position_blocks() * chunks(),
        simt::KernelResources{kIndexAddRankThreads,
                              static_cast<std::size_t>(kIndexAddRankTile) * sizeof(std::uint32_t),
                              32});
  }

  template <class Ctx>
  RIG_HD void operator()(Ctx& ctx) const {
    const std::int64_t blocks = position_blocks();
    const std::int64_t task = block_row(ctx);
    if (task >= blocks * chunks()) return;  // the whole block
    const std::int64_t c = task / blocks;
    const std::int64_t i = (task % blocks) * kIndexAddRankThreads + ctx.thread_rank();
    const std::uint32_t key = i < k ? index_add_key(index, index_type, i, n) : 0;
    std::uint32_t* tile = ctx.template shared<std::uint32_t>();
    const std::int64_t first = c * chunk;
    const std::int64_t last = first + chunk < k ? first + chunk : k;
    std::uint32_t count = 0;
    for (std::int64_t j0 = first; j0 < last; j0 += kIndexAddRankTile) {
      const std::int64_t len = last - j0 < kIndexAddRankTile ? last - j0 : kIndexAddRankTile;
      for (std::int64_t u = ctx.thread_rank(); u < len; u += ctx.block_threads()) {
        tile[u] = index_add_key(index, index_type, j0 + u, n);
      }
      ctx.sync();
      if (i < k) {
        // Keys (tile[u], j0 + u) below (key, i): a smaller row, or the same
        // row at an earlier position.
        const std::int64_t before = i - j0;
        for (std::int64_t u = 0; u < len; ++u) {
          const std::uint32_t other = tile[u];
          count += static_cast<std::uint32_t>(other < key || (other == key && u < before));
        }
      }
      ctx.sync();
    }
    if (i < k) counts[c * k + i] = count;
  }
};

struct IndexAddScatter {
  const void* index = nullptr;  // [k]
  DType index_type = DType::i64;
  std::int64_t k = 0, n = 0, chunks = 1;
  const std::uint32_t* counts = nullptr;  // [chunks, k] (IndexAddRank)
  std::uint32_t* order = nullptr;         // [k]: positions by (key, t)
  std::uint32_t* keys = nullptr;          // [k]: their keys

  simt::LaunchShape plan(const simt::DeviceProperties& device) const {
    return plan_grid_stride(device, k);
  }

  template <class Ctx>
  RIG_HD void operator()(Ctx& ctx) const {
    for (std::int64_t t = global_thread(ctx); t < k; t += grid_threads(ctx)) {
      std::uint32_t rank = 0;
      for (std::int64_t c = 0; c < chunks; ++c) rank += counts[c * k + t];
      order[rank] = static_cast<std::uint32_t>(t);
      keys[rank] = index_add_key(index, index_type, t, n);
    }
  }
};

struct IndexAddSegments {
  const void* grad = nullptr;  // [outer, k, inner] of grad_type
  std::int64_t outer = 0, n = 0, inner = 0, k = 0;
  const std::uint32_t* order = nullptr;  // [k] (IndexAddScatter)
  const std::uint32_t* keys = nullptr;   // [k]
  void* dx = nullptr;                    // [outer, n, inner] of dx_type, accumulates
  ElementType grad_type = ElementType::f32, dx_type = ElementType::f32;

  simt::LaunchShape plan(const simt::DeviceProperties& device) const {
    return plan_grid_stride(device, outer * k * inner, 1, 42);  // ptxas: 42
  }

  template <class Ctx>
  RIG_HD void operator()(Ctx& ctx) const {
    const std::int64_t total = outer * k * inner;
    for (std::int64_t e = global_thread(ctx); e < total; e += grid_threads(ctx)) {
      const auto [line, col] = div_mod(e, inner);
      const auto [o, p] = div_mod(line, k);
      const std::uint32_t key = keys[p];
      if (key >= n || (p > 0 && keys[p - 1] == key)) continue;
      const std::int64_t d = (o * n + key) * inner + col;
      const std::int64_t g = o * k * inner + col;
      const bool f32_dx = dx_type == ElementType::f32;
      float sum = f32_dx ? static_cast<const float*>(dx)[d] : 0.0F;
      for (std::int64_t q = p;; q += kIndexAddBatch) {
        // The run is a prefix of the batch; its loads go out before the adds.
        bool in[kIndexAddBatch];
        float v[kIndexAddBatch];
        for (int u = 0; u < kIndexAddBatch; ++u) {
          in[u] = q + u < k && keys[q + u] == key;
          v[u] = in[u] ? load_element(grad, grad_type,
                                      g + static_cast<std::int64_t>(order[q + u]) * inner)
                       : 0.0F;
        }
        for (int u = 0; u < kIndexAddBatch; ++u) {
          if (in[u]) sum += v[u];
        }
        if (!in[kIndexAddBatch - 1]) break;
      }
      if (f32_dx) {
        static_cast<float*>(dx)[d] = sum;
      } else {
        store_element(dx, dx_type, d, load_element(dx, dx_type, d) + rounded_to(dx_type, sum));
      }
    }
  }
};

}  // namespace rig::kernels
