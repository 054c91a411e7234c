#include "cpu/selection.hpp"

#include <algorithm>
#include <bit>
#include <numeric>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#include "cpu/parallel.hpp"
#include "rig/kernel_attributes.hpp"

namespace rig::cpu {
namespace {

constexpr std::int64_t kGrainElements = 16 * 1024;

// Helpers of the RIG_CPU_KERNEL functions are forced inline so that they are
// compiled for each target of those functions.
#define RIG_INLINE inline __attribute__((always_inline))

// ---- select -------------------------------------------------------------------

// The output shape with size-1 axes dropped and neighbouring axes merged
// wherever all three operands step through them as one (the output is contiguous).
// The most axes select handles after merging (the op layer checks).
constexpr std::int64_t kMaxRank = 16;

struct SelectJob {
  Shape shape;
  Strides strides[3];  // cond, a, b
  const void* data[3];
  void* out;
  std::int64_t rows = 1, length = 1, chunk = 1, chunks = 1;

  SelectJob(const Shape& full, const SelectOperand* ops[3], void* o) : out(o) {
    for (int k = 0; k < 3; ++k) data[k] = ops[k]->data;
    for (std::size_t d = 0; d < full.size(); ++d) {
      if (full[d] == 1) continue;
      bool merge = !shape.empty();
      for (int k = 0; k < 3 && merge; ++k) {
        merge = strides[k].back() == ops[k]->strides[d] * full[d];
      }
      if (merge) {
        shape.back() *= full[d];
        for (int k = 0; k < 3; ++k) strides[k].back() = ops[k]->strides[d];
      } else {
        shape.push_back(full[d]);
        for (int k = 0; k < 3; ++k) strides[k].push_back(ops[k]->strides[d]);
      }
    }
    if (shape.empty()) {
      shape.push_back(1);
      for (auto& s : strides) s.push_back(0);
    }
    length = shape.back();
    for (std::size_t d = 0; d + 1 < shape.size(); ++d) rows *= shape[d];
    const std::int64_t want = 4LL * num_threads();
    if (rows < want) {
      chunk = std::max<std::int64_t>(4096, (length * rows + want - 1) / want);
      chunk = std::min(chunk, length);
      chunks = (length + chunk - 1) / chunk;
    } else {
      chunk = length;
    }
  }

  // Element offsets of the three operands at the start of `row`, and its coordinates.
  void row_offsets(std::int64_t row, std::int64_t off[3], std::int64_t* coord) const {
    off[0] = off[1] = off[2] = 0;
    for (auto d = static_cast<std::int64_t>(shape.size()) - 2; d >= 0; --d) {
      const auto du = static_cast<std::size_t>(d);
      coord[d] = row % shape[du];
      row /= shape[du];
      for (int k = 0; k < 3; ++k) off[k] += coord[d] * strides[k][du];
    }
  }
};

// Inner loop with compile-time strides (0 or 1) where known; -1 = runtime.
template <class T, int SC, int SA, int SB>
RIG_INLINE void select_inner(const std::uint8_t* c, std::int64_t sc, const T* a, std::int64_t sa,
                             const T* b, std::int64_t sb, T* __restrict o, std::int64_t n) {
  if constexpr (SC >= 0) sc = SC;
  if constexpr (SA >= 0) sa = SA;
  if constexpr (SB >= 0) sb = SB;
  // Both loads unconditional: a conditional load blocks vectorisation.
  for (std::int64_t i = 0; i < n; ++i) {
    const T av = a[i * sa], bv = b[i * sb];
    o[i] = c[i * sc] != 0 ? av : bv;
  }
}

template <class T>
RIG_INLINE void select_range(const SelectJob& job, std::int64_t begin, std::int64_t end) {
  const auto* cond = static_cast<const std::uint8_t*>(job.data[0]);
  const auto* a = static_cast<const T*>(job.data[1]);
  const auto* b = static_cast<const T*>(job.data[2]);
  T* out = static_cast<T*>(job.out);
  const std::int64_t sc = job.strides[0].back(), sa = job.strides[1].back(),
                     sb = job.strides[2].back();
  const bool unit = (sc == 0 || sc == 1) && (sa == 0 || sa == 1) && (sb == 0 || sb == 1);
  const int pattern = unit ? static_cast<int>(sc * 4 + sa * 2 + sb) : -1;
  // Row coordinates advance like an odometer: no division per row.
  std::int64_t coord[kMaxRank] = {};
  std::int64_t off[3] = {};
  const auto outer_rank = static_cast<std::int64_t>(job.shape.size()) - 1;
  std::int64_t row = begin / job.chunks;
  std::int64_t piece = begin % job.chunks;
  job.row_offsets(row, off, coord);
  for (std::int64_t t = begin; t < end; ++t) {
    if (piece == job.chunks) {  // on to the next row
      piece = 0;
      ++row;
      for (std::int64_t d = outer_rank - 1; d >= 0; --d) {
        const auto du = static_cast<std::size_t>(d);
        for (int k = 0; k < 3; ++k) off[k] += job.strides[k][du];
        if (++coord[d] < job.shape[du]) break;
        for (int k = 0; k < 3; ++k) off[k] -= job.strides[k][du] * job.shape[du];
        coord[d] = 0;
      }
    }
    const std::int64_t i0 = piece++ * job.chunk;
    const std::int64_t n = std::min(job.length - i0, job.chunk);
    const std::uint8_t* c = cond + off[0] + i0 * sc;
    const T* pa = a + off[1] + i0 * sa;
    const T* pb = b + off[2] + i0 * sb;
    T* o = out + row * job.length + i0;
    switch (pattern) {
      case 0:
        select_inner<T, 0, 0, 0>(c, sc, pa, sa, pb, sb, o, n);
        break;
      case 1:
        select_inner<T, 0, 0, 1>(c, sc, pa, sa, pb, sb, o, n);
        break;
      case 2:
        select_inner<T, 0, 1, 0>(c, sc, pa, sa, pb, sb, o, n);
        break;
      case 3:
        select_inner<T, 0, 1, 1>(c, sc, pa, sa, pb, sb, o, n);
        break;
      case 4:
        select_inner<T, 1, 0, 0>(c, sc, pa, sa, pb, sb, o, n);
        break;
      case 5:
        select_inner<T, 1, 0, 1>(c, sc, pa, sa, pb, sb, o, n);
        break;
      case 6:
        select_inner<T, 1, 1, 0>(c, sc, pa, sa, pb, sb, o, n);
        break;
      case 7:
        select_inner<T, 1, 1, 1>(c, sc, pa, sa, pb, sb, o, n);
        break;
      default:
        select_inner<T, -1, -1, -1>(c, sc, pa, sa, pb, sb, o, n);
        break;
    }
  }
}

RIG_CPU_KERNEL void select_range_1(const SelectJob& j, std::int64_t b, std::int64_t e) {
  select_range<std::uint8_t>(j, b, e);
}
RIG_CPU_KERNEL void select_range_2(const SelectJob& j, std::int64_t b, std::int64_t e) {
  select_range<std::uint16_t>(j, b, e);
}
RIG_CPU_KERNEL void select_range_4(const SelectJob& j, std::int64_t b, std::int64_t e) {
  select_range<std::uint32_t>(j, b, e);
}
RIG_CPU_KERNEL void select_range_8(const SelectJob& j, std::int64_t b, std::int64_t e) {
  select_range<std::uint64_t>(j, b, e);
}

// ---- argmax -------------------------------------------------------------------

template <class T>
RIG_INLINE bool is_nan(T v) {
  return v != v;  // NOLINT: false for integers
}

// a comes before b in a descending order where NaN is largest.
template <class T>
RIG_INLINE bool greater(T a, T b) {
  return a > b || (is_nan(a) && !is_nan(b));
}

// Vectorised test of a block: does any element beat `threshold`, or is a
// NaN involved? !(v <= t) is true for v > t and whenever v or t is NaN.
constexpr std::int64_t kBlock = 32;
template <class T>
RIG_INLINE bool block_may_beat(const T* x, T threshold) {
  std::int32_t any = 0;
  // Unrolled, the loop is no longer vectorised (GCC 12).
#pragma GCC unroll 1
  for (std::int64_t j = 0; j < kBlock; ++j) any |= !(x[j] <= threshold);
  return any != 0;
}

// Bit j set where x[j] may beat `threshold` (as above): the elements of a
// block that block_may_beat flagged, to visit without scanning all 32.
template <class T>
RIG_INLINE std::uint32_t block_candidates(const T* x, T threshold) {
  std::uint32_t bits = 0;
#pragma GCC unroll 1
  for (std::int64_t j = 0; j < kBlock; ++j) {
    bits |= static_cast<std::uint32_t>(!(x[j] <= threshold)) << j;
  }
  return bits;
}

// One contiguous row: blocks that cannot hold a new maximum are skipped
// after one vectorised comparison; the others are scanned in order.
template <class T>
RIG_INLINE std::int64_t argmax_row(const T* x, std::int64_t n) {
  std::int64_t best = 0;
  std::int64_t i = 1;
  for (; i + kBlock <= n; i += kBlock) {
    if (!block_may_beat(x + i, x[best])) continue;
    for (std::uint32_t m = block_candidates(x + i, x[best]); m != 0; m &= m - 1) {
      const std::int64_t j = i + std::countr_zero(m);
      if (greater(x[j], x[best])) best = j;
    }
  }
  for (; i < n; ++i) {
    if (greater(x[i], x[best])) best = i;
  }
  return best;
}

RIG_CPU_KERNEL void argmax_rows_f32(const float* x, std::int64_t n, std::int64_t begin,
                                    std::int64_t end, std::int64_t* out) {
  for (std::int64_t r = begin; r < end; ++r) out[r] = argmax_row(x + r * n, n);
}

// Along a strided axis: running best values for a whole inner row at once.
template <class T>
inline void argmax_columns(const T* x, std::int64_t n, std::int64_t inner, std::int64_t i0,
                           std::int64_t i1, std::int64_t* out) {
  for (std::int64_t i = i0; i < i1; ++i) out[i] = 0;
  for (std::int64_t r = 1; r < n; ++r) {
    const T* row = x + r * inner;
    for (std::int64_t i = i0; i < i1; ++i) {
      if (greater(row[i], x[out[i] * inner + i])) out[i] = r;
    }
  }
}

template <class T>
void argmax_typed(const T* x, std::int64_t outer, std::int64_t n, std::int64_t inner,
                  std::int64_t* out) {
  if (inner == 1) {
    parallel_for(outer, std::max<std::int64_t>(1, kGrainElements / n),
                 [&](std::int64_t begin, std::int64_t end) {
                   if constexpr (std::is_same_v<T, float>) {
                     argmax_rows_f32(x, n, begin, end, out);
                   } else {
                     for (std::int64_t r = begin; r < end; ++r) out[r] = argmax_row(x + r * n, n);
                   }
                 });
    return;
  }
  parallel_for(outer, std::max<std::int64_t>(1, kGrainElements / (n * inner)),
               [&](std::int64_t begin, std::int64_t end) {
                 for (std::int64_t o = begin; o < end; ++o) {
                   argmax_columns(x + o * n * inner, n, inner, 0, inner, out + o * inner);
                 }
               });
}

// ---- topk ---------------------------------------------------------------------

// The k best of one row kept sorted in (vals, idx) by insertion: most
// elements fail the comparison with the current k-th value, tested a block at
// a time (vectorised), so the cost is about one pass over the row.
template <class T>
RIG_INLINE void topk_insertion(const T* x, std::int64_t n, std::int64_t k, T* vals,
                               std::int64_t* idx) {
  auto insert = [&](std::int64_t count, T v, std::int64_t i) {
    std::int64_t p = count < k ? count : k - 1;
    while (p > 0 && greater(v, vals[p - 1])) {
      vals[p] = vals[p - 1];
      idx[p] = idx[p - 1];
      --p;
    }
    vals[p] = v;
    idx[p] = i;
  };
  for (std::int64_t i = 0; i < k; ++i) insert(i, x[i], i);
  std::int64_t i = k;
  for (; i + kBlock <= n; i += kBlock) {
    if (!block_may_beat(x + i, vals[k - 1])) continue;
    for (std::uint32_t m = block_candidates(x + i, vals[k - 1]); m != 0; m &= m - 1) {
      const std::int64_t j = i + std::countr_zero(m);
      if (greater(x[j], vals[k - 1])) insert(k, x[j], j);
    }
  }
  for (; i < n; ++i) {
    if (greater(x[i], vals[k - 1])) insert(k, x[i], i);
  }
}

// Large k: select and sort an index permutation (stable: ties by index).
template <class T>
inline void topk_sort(const T* x, std::int64_t n, std::int64_t k, T* vals, std::int64_t* idx,
                      std::vector<std::int64_t>& order) {
  order.resize(static_cast<std::size_t>(n));
  std::iota(order.begin(), order.end(), 0);
  auto before = [x](std::int64_t a, std::int64_t b) {
    return greater(x[a], x[b]) || (!greater(x[b], x[a]) && a < b);
  };
  if (k < n) std::nth_element(order.begin(), order.begin() + (k - 1), order.end(), before);
  std::sort(order.begin(), order.begin() + k, before);
  for (std::int64_t j = 0; j < k; ++j) {
    idx[j] = order[static_cast<std::size_t>(j)];
    vals[j] = x[idx[j]];
  }
}

constexpr std::int64_t kInsertionMaxK = 64;

RIG_CPU_KERNEL void topk_rows_f32(const float* x, std::int64_t n, std::int64_t k,
                                  std::int64_t begin, std::int64_t end, float* vals,
                                  std::int64_t* idx) {
  for (std::int64_t r = begin; r < end; ++r) {
    topk_insertion(x + r * n, n, k, vals + r * k, idx + r * k);
  }
}

template <class T>
void topk_typed(const T* x, std::int64_t rows, std::int64_t n, std::int64_t k, T* vals,
                std::int64_t* idx) {
  if (k == 0 || rows == 0) return;
  const std::int64_t grain = std::max<std::int64_t>(1, kGrainElements / n);
  if (k > kInsertionMaxK) {
    parallel_for(rows, grain, [&](std::int64_t begin, std::int64_t end) {
      std::vector<std::int64_t> order;  // large k only: one buffer per chunk
      for (std::int64_t r = begin; r < end; ++r) {
        topk_sort(x + r * n, n, k, vals + r * k, idx + r * k, order);
      }
    });
    return;
  }
  parallel_for(rows, grain, [&](std::int64_t begin, std::int64_t end) {
    if constexpr (std::is_same_v<T, float>) {
      topk_rows_f32(x, n, k, begin, end, vals, idx);
    } else {
      for (std::int64_t r = begin; r < end; ++r) {
        topk_insertion(x + r * n, n, k, vals + r * k, idx + r * k);
      }
    }
  });
}

}  // namespace

void select(const Shape& shape, std::size_t element_bytes, const SelectOperand& cond,
            const SelectOperand& a, const SelectOperand& b, void* out) {
  if (shape_numel(shape) == 0) return;
  const SelectOperand* ops[3] = {&cond, &a, &b};
  const SelectJob job(shape, ops, out);
  if (static_cast<std::int64_t>(job.shape.size()) > kMaxRank) {
    throw std::invalid_argument("where / masked_fill: " + to_string(shape) + " has more than " +
                                std::to_string(kMaxRank) + " axes that do not merge");
  }
  const std::int64_t tasks = job.rows * job.chunks;
  const std::int64_t grain = std::max<std::int64_t>(1, kGrainElements / job.chunk);
  auto run = [&](auto kernel) {
    parallel_for(tasks, grain,
                 [&](std::int64_t begin, std::int64_t end) { kernel(job, begin, end); });
  };
  switch (element_bytes) {
    case 1:
      run(select_range_1);
      break;
    case 2:
      run(select_range_2);
      break;
    case 4:
      run(select_range_4);
      break;
    default:
      run(select_range_8);
      break;
  }
}

void argmax(const ConstBuffer& x, std::int64_t outer, std::int64_t n, std::int64_t inner,
            std::int64_t* out) {
  switch (x.dtype) {
    case DType::f32:
      argmax_typed(static_cast<const float*>(x.data), outer, n, inner, out);
      break;
    case DType::i32:
      argmax_typed(static_cast<const std::int32_t*>(x.data), outer, n, inner, out);
      break;
    case DType::i64:
      argmax_typed(static_cast<const std::int64_t*>(x.data), outer, n, inner, out);
      break;
    default:
      argmax_typed(static_cast<const std::uint8_t*>(x.data), outer, n, inner, out);
      break;
  }
}

void topk(const ConstBuffer& x, std::int64_t rows, std::int64_t n, std::int64_t k, void* values,
          std::int64_t* indices) {
  switch (x.dtype) {
    case DType::f32:
      topk_typed(static_cast<const float*>(x.data), rows, n, k, static_cast<float*>(values),
                 indices);
      break;
    case DType::i32:
      topk_typed(static_cast<const std::int32_t*>(x.data), rows, n, k,
                 static_cast<std::int32_t*>(values), indices);
      break;
    case DType::i64:
      topk_typed(static_cast<const std::int64_t*>(x.data), rows, n, k,
                 static_cast<std::int64_t*>(values), indices);
      break;
    default:
      topk_typed(static_cast<const std::uint8_t*>(x.data), rows, n, k,
                 static_cast<std::uint8_t*>(values), indices);
      break;
  }
}

}  // namespace rig::cpu
