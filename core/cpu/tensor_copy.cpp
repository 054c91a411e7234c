// Strided n-d loops: the axes are sorted and merged so the innermost loop is
// as long and as linear as possible, then rows run on the thread pool.
#include "cpu/tensor_copy.hpp"

#include <algorithm>
#include <cstring>
#include <limits>
#include <stdexcept>

#include <fmt/format.h>

#include "cpu/parallel.hpp"
#include "rig/half.hpp"
#include "rig/kernel_attributes.hpp"

// The element loops must be inlined into each clone of a RIG_CPU_KERNEL
// function, or they are compiled once, for the baseline target only.
#define RIG_INLINE inline __attribute__((always_inline))

namespace rig::cpu {
namespace {

constexpr std::size_t kMaxDims = 32;
constexpr std::int64_t kParallelElements = std::int64_t{1} << 18;  // below this: one thread
constexpr std::int64_t kGrainElements = std::int64_t{1} << 16;     // per parallel chunk

// Shape and the strides of up to two operands (0: destination, 1: source),
// with size-1 axes dropped, sorted by the strides of operand `order_by`
// (largest first, so the innermost loop walks it linearly) and contiguous runs merged.
struct Layout {
  std::size_t ndim = 0;
  std::int64_t size[kMaxDims] = {};
  std::int64_t stride[2][kMaxDims] = {};
  std::int64_t numel = 1;
  bool dst_repeats = false;  // a destination stride 0 on an axis longer than 1
};

Layout make_layout(const Shape& shape, const Strides& dst, const Strides* src, int order_by = 0) {
  if (shape.size() > kMaxDims) {
    throw std::invalid_argument(
        fmt::format("tensor copy: {} axes (at most {} supported)", shape.size(), kMaxDims));
  }
  Layout l;
  for (std::size_t i = 0; i < shape.size(); ++i) {
    l.numel *= shape[i];
    if (shape[i] == 1) continue;
    l.size[l.ndim] = shape[i];
    l.stride[0][l.ndim] = dst[i];
    l.stride[1][l.ndim] = src != nullptr ? (*src)[i] : 0;
    ++l.ndim;
  }
  if (l.numel == 0) return l;
  // Insertion sort (few axes): descending |stride| of `order_by`, then of the
  // other; stable, so an already ordered layout stays as it is.
  const int first = order_by, second = 1 - order_by;
  auto key_less = [&](std::size_t a, std::size_t b) {
    const auto da = std::abs(l.stride[first][a]), db = std::abs(l.stride[first][b]);
    if (da != db) return da < db;
    return std::abs(l.stride[second][a]) < std::abs(l.stride[second][b]);
  };
  for (std::size_t i = 1; i < l.ndim; ++i) {
    for (std::size_t j = i; j > 0 && key_less(j - 1, j); --j) {
      std::swap(l.size[j - 1], l.size[j]);
      std::swap(l.stride[0][j - 1], l.stride[0][j]);
      std::swap(l.stride[1][j - 1], l.stride[1][j]);
    }
  }
  // Merge axis i into the next inner one when both operands step through them as one run.
  std::size_t out = 0;
  for (std::size_t i = 0; i < l.ndim; ++i) {
    if (out > 0) {
      const std::size_t o = out - 1;
      if (l.stride[0][o] == l.stride[0][i] * l.size[i] &&
          l.stride[1][o] == l.stride[1][i] * l.size[i]) {
        l.size[o] *= l.size[i];
        l.stride[0][o] = l.stride[0][i];
        l.stride[1][o] = l.stride[1][i];
        continue;
      }
    }
    l.size[out] = l.size[i];
    l.stride[0][out] = l.stride[0][i];
    l.stride[1][out] = l.stride[1][i];
    ++out;
  }
  l.ndim = out;
  for (std::size_t i = 0; i < l.ndim; ++i) l.dst_repeats |= l.stride[0][i] == 0;
  return l;
}

// Calls row(dst_offset, src_offset, begin, count) (offsets in elements) for
// every innermost row, split over threads unless the destination repeats.
template <class Row>
void for_each_row(const Layout& l, Row&& row) {
  if (l.numel == 0) return;
  if (l.ndim == 0) {
    row(0, 0, 0, 1);
    return;
  }
  const std::size_t inner = l.ndim - 1;
  const std::int64_t n_inner = l.size[inner];
  const std::int64_t rows = l.numel / n_inner;
  const bool parallel = !l.dst_repeats && l.numel >= kParallelElements;
  if (rows == 1) {
    // One long row: split it into pieces.
    if (!parallel) {
      row(0, 0, 0, n_inner);
      return;
    }
    parallel_for(n_inner, kGrainElements,
                 [&](std::int64_t begin, std::int64_t end) { row(0, 0, begin, end - begin); });
    return;
  }
  auto run_rows = [&](std::int64_t begin, std::int64_t end) {
    std::int64_t index[kMaxDims] = {};
    std::int64_t off0 = 0, off1 = 0;
    std::int64_t r = begin;
    for (std::size_t k = inner; k-- > 0;) {
      index[k] = r % l.size[k];
      r /= l.size[k];
      off0 += index[k] * l.stride[0][k];
      off1 += index[k] * l.stride[1][k];
    }
    for (std::int64_t i = begin; i < end; ++i) {
      row(off0, off1, 0, n_inner);
      for (std::size_t k = inner; k-- > 0;) {  // odometer increment
        off0 += l.stride[0][k];
        off1 += l.stride[1][k];
        if (++index[k] < l.size[k]) break;
        off0 -= l.stride[0][k] * l.size[k];
        off1 -= l.stride[1][k] * l.size[k];
        index[k] = 0;
      }
    }
  };
  if (!parallel) {
    run_rows(0, rows);
    return;
  }
  parallel_for(rows, std::max<std::int64_t>(1, kGrainElements / n_inner), run_rows);
}

// ---- Element conversions ----------------------------------------------------

template <DType T>
struct Elem;
template <>
struct Elem<DType::f32> {
  using type = float;
  static RIG_INLINE float load(float v) { return v; }
};
template <>
struct Elem<DType::f16> {
  using type = std::uint16_t;
  static RIG_INLINE float load(std::uint16_t v) { return half_bits_to_float(v); }
};
template <>
struct Elem<DType::bf16> {
  using type = std::uint16_t;
  static RIG_INLINE float load(std::uint16_t v) { return bfloat16_bits_to_float(v); }
};
template <>
struct Elem<DType::i32> {
  using type = std::int32_t;
};
template <>
struct Elem<DType::i64> {
  using type = std::int64_t;
};
template <>
struct Elem<DType::u8> {
  using type = std::uint8_t;
};

constexpr bool floating(DType t) {
  return t == DType::f32 || t == DType::f16 || t == DType::bf16;
}

template <class I>
RIG_INLINE I saturate(float v) {
  constexpr float lo = static_cast<float>(std::numeric_limits<I>::min());
  constexpr float hi = static_cast<float>(std::numeric_limits<I>::max());  // may round up
  if (!(v == v)) return 0;
  if (v <= lo) return std::numeric_limits<I>::min();
  if (v >= hi) return std::numeric_limits<I>::max();
  return static_cast<I>(v);
}

template <DType D, DType S>
RIG_INLINE typename Elem<D>::type convert(typename Elem<S>::type s) {
  using DT = typename Elem<D>::type;
  if constexpr (D == S) {
    return s;
  } else if constexpr (floating(S)) {
    const float f = Elem<S>::load(s);
    if constexpr (D == DType::f32) return f;
    if constexpr (D == DType::f16) return float_to_half_bits(f);
    if constexpr (D == DType::bf16) return float_to_bfloat16_bits(f);
    if constexpr (!floating(D)) return saturate<DT>(f);
  } else if constexpr (floating(D)) {
    const float f = static_cast<float>(s);
    if constexpr (D == DType::f32) return f;
    if constexpr (D == DType::f16) return float_to_half_bits(f);
    if constexpr (D == DType::bf16) return float_to_bfloat16_bits(f);
  } else {
    return static_cast<DT>(s);  // integer to integer wraps (two's complement)
  }
}

template <DType D, DType S>
RIG_INLINE void copy_row(void* dst, std::int64_t ds, const void* src, std::int64_t ss,
                         std::int64_t n) {
  auto* d = static_cast<typename Elem<D>::type*>(dst);
  const auto* s = static_cast<const typename Elem<S>::type*>(src);
  if (ds == 1 && ss == 1) {
    for (std::int64_t i = 0; i < n; ++i) d[i] = convert<D, S>(s[i]);
  } else {
    for (std::int64_t i = 0; i < n; ++i) d[i * ds] = convert<D, S>(s[i * ss]);
  }
}

template <DType D>
RIG_INLINE void copy_row_from(void* dst, std::int64_t ds, const void* src, std::int64_t ss,
                              DType src_dtype, std::int64_t n) {
  switch (src_dtype) {
    case DType::f32:
      return copy_row<D, DType::f32>(dst, ds, src, ss, n);
    case DType::f16:
      return copy_row<D, DType::f16>(dst, ds, src, ss, n);
    case DType::bf16:
      return copy_row<D, DType::bf16>(dst, ds, src, ss, n);
    case DType::i32:
      return copy_row<D, DType::i32>(dst, ds, src, ss, n);
    case DType::i64:
      return copy_row<D, DType::i64>(dst, ds, src, ss, n);
    case DType::u8:
      return copy_row<D, DType::u8>(dst, ds, src, ss, n);
  }
}

// One clone-compiled kernel per destination dtype (target_clones needs plain functions).
RIG_CPU_KERNEL void copy_row_f32(void* d, std::int64_t ds, const void* s, std::int64_t ss, DType st,
                                 std::int64_t n) {
  copy_row_from<DType::f32>(d, ds, s, ss, st, n);
}
RIG_CPU_KERNEL void copy_row_f16(void* d, std::int64_t ds, const void* s, std::int64_t ss, DType st,
                                 std::int64_t n) {
  copy_row_from<DType::f16>(d, ds, s, ss, st, n);
}
RIG_CPU_KERNEL void copy_row_bf16(void* d, std::int64_t ds, const void* s, std::int64_t ss,
                                  DType st, std::int64_t n) {
  copy_row_from<DType::bf16>(d, ds, s, ss, st, n);
}
RIG_CPU_KERNEL void copy_row_i32(void* d, std::int64_t ds, const void* s, std::int64_t ss, DType st,
                                 std::int64_t n) {
  copy_row_from<DType::i32>(d, ds, s, ss, st, n);
}
RIG_CPU_KERNEL void copy_row_i64(void* d, std::int64_t ds, const void* s, std::int64_t ss, DType st,
                                 std::int64_t n) {
  copy_row_from<DType::i64>(d, ds, s, ss, st, n);
}
RIG_CPU_KERNEL void copy_row_u8(void* d, std::int64_t ds, const void* s, std::int64_t ss, DType st,
                                std::int64_t n) {
  copy_row_from<DType::u8>(d, ds, s, ss, st, n);
}

using CopyRowFn = void (*)(void*, std::int64_t, const void*, std::int64_t, DType, std::int64_t);

CopyRowFn copy_row_fn(DType dst) {
  switch (dst) {
    case DType::f32:
      return copy_row_f32;
    case DType::f16:
      return copy_row_f16;
    case DType::bf16:
      return copy_row_bf16;
    case DType::i32:
      return copy_row_i32;
    case DType::i64:
      return copy_row_i64;
    case DType::u8:
      return copy_row_u8;
  }
  throw std::invalid_argument("tensor copy: unknown dtype");
}

template <DType D, DType S>
RIG_INLINE void add_row_from(void* dst, std::int64_t ds, const void* src, std::int64_t ss,
                             std::int64_t n) {
  auto* d = static_cast<typename Elem<D>::type*>(dst);
  const auto* s = static_cast<const typename Elem<S>::type*>(src);
  if (ds == 0) {  // a reduction into one element
    float total = Elem<D>::load(*d);
    for (std::int64_t i = 0; i < n; ++i) total += Elem<S>::load(s[i * ss]);
    *d = convert<D, DType::f32>(total);
  } else if (ds == 1 && ss == 1) {
    for (std::int64_t i = 0; i < n; ++i) {
      d[i] = convert<D, DType::f32>(Elem<D>::load(d[i]) + Elem<S>::load(s[i]));
    }
  } else {
    for (std::int64_t i = 0; i < n; ++i) {
      d[i * ds] = convert<D, DType::f32>(Elem<D>::load(d[i * ds]) + Elem<S>::load(s[i * ss]));
    }
  }
}

template <DType D>
RIG_INLINE void add_row(void* dst, std::int64_t ds, const void* src, std::int64_t ss, DType st,
                        std::int64_t n) {
  switch (st) {
    case DType::f32:
      return add_row_from<D, DType::f32>(dst, ds, src, ss, n);
    case DType::f16:
      return add_row_from<D, DType::f16>(dst, ds, src, ss, n);
    case DType::bf16:
      return add_row_from<D, DType::bf16>(dst, ds, src, ss, n);
    default:
      return;  // checked by the caller
  }
}

RIG_CPU_KERNEL void add_row_f32(void* d, std::int64_t ds, const void* s, std::int64_t ss, DType st,
                                std::int64_t n) {
  add_row<DType::f32>(d, ds, s, ss, st, n);
}
RIG_CPU_KERNEL void add_row_f16(void* d, std::int64_t ds, const void* s, std::int64_t ss, DType st,
                                std::int64_t n) {
  add_row<DType::f16>(d, ds, s, ss, st, n);
}
RIG_CPU_KERNEL void add_row_bf16(void* d, std::int64_t ds, const void* s, std::int64_t ss, DType st,
                                 std::int64_t n) {
  add_row<DType::bf16>(d, ds, s, ss, st, n);
}

template <DType D>
void fill_typed(const Layout& l, void* dst, float value) {
  using T = typename Elem<D>::type;
  const T v = convert<D, DType::f32>(value);
  auto* base = static_cast<T*>(dst);
  for_each_row(l, [&](std::int64_t off, std::int64_t, std::int64_t begin, std::int64_t n) {
    T* d = base + off + begin * l.stride[0][l.ndim == 0 ? 0 : l.ndim - 1];
    const std::int64_t ds = l.ndim == 0 ? 1 : l.stride[0][l.ndim - 1];
    if (ds == 1) {
      std::fill_n(d, n, v);
    } else {
      for (std::int64_t i = 0; i < n; ++i) d[i * ds] = v;
    }
  });
}

inline std::byte* at(void* p, std::int64_t elements, std::size_t size) {
  return static_cast<std::byte*>(p) + elements * static_cast<std::int64_t>(size);
}
inline const std::byte* at(const void* p, std::int64_t elements, std::size_t size) {
  return static_cast<const std::byte*>(p) + elements * static_cast<std::int64_t>(size);
}

// A copy whose source is contiguous along another axis than the
// destination's innermost one (a transpose): done in square tiles so that
// the source rows and destination columns of a tile stay in L1. Returns
// false when the layout is not like that. A tile is 8 elements along the
// source's contiguous axis: more lines than that at a power-of-two stride
// fall into one set of an 8-way L1 and evict each other (measured: 1024^2
// f32, 8 x 64 tiles 0.8 ms, 16 x 64 tiles 7 ms, untiled 11 ms).
bool copy_tiled(const Layout& l, void* dst, std::size_t dsize, const void* src, std::size_t ssize,
                DType src_dtype, CopyRowFn fn) {
  constexpr std::int64_t kTile = 8;    // along the source's contiguous axis j
  constexpr std::int64_t kTileB = 64;  // along the destination's innermost axis
  if (l.ndim < 2 || l.dst_repeats) return false;
  const std::size_t inner = l.ndim - 1;
  if (std::abs(l.stride[1][inner]) == 1 || l.size[inner] < 8) return false;
  std::size_t j = inner;
  for (std::size_t k = 0; k < inner; ++k) {
    if (std::abs(l.stride[1][k]) == 1) j = k;
  }
  if (j == inner || l.size[j] < 8) return false;
  // The other axes, in order, form an outer odometer.
  std::size_t outer_axes[kMaxDims];
  std::size_t n_outer_axes = 0;
  for (std::size_t k = 0; k < inner; ++k) {
    if (k != j) outer_axes[n_outer_axes++] = k;
  }
  const std::int64_t nj = l.size[j], ni = l.size[inner];
  const std::int64_t tiles_j = (nj + kTile - 1) / kTile;
  const std::int64_t outer = l.numel / (nj * ni);
  const std::int64_t dj = l.stride[0][j], di = l.stride[0][inner];
  const std::int64_t sj = l.stride[1][j], si = l.stride[1][inner];
  auto run = [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t w = begin; w < end; ++w) {
      std::int64_t o = w / tiles_j;
      const std::int64_t a0 = (w % tiles_j) * kTile, a1 = std::min(nj, a0 + kTile);
      std::int64_t od = 0, os = 0;
      for (std::size_t q = n_outer_axes; q-- > 0;) {
        const std::size_t k = outer_axes[q];
        const std::int64_t idx = o % l.size[k];
        o /= l.size[k];
        od += idx * l.stride[0][k];
        os += idx * l.stride[1][k];
      }
      for (std::int64_t b0 = 0; b0 < ni; b0 += kTileB) {
        const std::int64_t b1 = std::min(ni, b0 + kTileB);
        for (std::int64_t b = b0; b < b1; ++b) {
          fn(at(dst, od + b * di + a0 * dj, dsize), dj, at(src, os + b * si + a0 * sj, ssize), sj,
             src_dtype, a1 - a0);
        }
      }
    }
  };
  const std::int64_t items = outer * tiles_j;
  if (l.numel < kParallelElements) {
    run(0, items);
  } else {
    parallel_for(items, std::max<std::int64_t>(1, kGrainElements / (kTile * ni)), run);
  }
  return true;
}

}  // namespace

void copy_strided(const Shape& shape, void* dst, const Strides& dst_strides, DType dst_dtype,
                  const void* src, const Strides& src_strides, DType src_dtype) {
  const Layout l = make_layout(shape, dst_strides, &src_strides);
  if (l.numel == 0) return;
  const std::size_t dsize = dtype_size(dst_dtype), ssize = dtype_size(src_dtype);
  const std::int64_t ds = l.ndim == 0 ? 1 : l.stride[0][l.ndim - 1];
  const std::int64_t ss = l.ndim == 0 ? 1 : l.stride[1][l.ndim - 1];
  if (dst_dtype == src_dtype && ds == 1 && ss == 1) {
    for_each_row(l, [&](std::int64_t od, std::int64_t os, std::int64_t begin, std::int64_t n) {
      std::memcpy(at(dst, od + begin, dsize), at(src, os + begin, ssize),
                  static_cast<std::size_t>(n) * dsize);
    });
    return;
  }
  const CopyRowFn fn = copy_row_fn(dst_dtype);
  if (copy_tiled(l, dst, dsize, src, ssize, src_dtype, fn)) return;
  for_each_row(l, [&](std::int64_t od, std::int64_t os, std::int64_t begin, std::int64_t n) {
    fn(at(dst, od + begin * ds, dsize), ds, at(src, os + begin * ss, ssize), ss, src_dtype, n);
  });
}

void fill_strided(const Shape& shape, void* dst, const Strides& dst_strides, DType dst_dtype,
                  float value) {
  const Layout l = make_layout(shape, dst_strides, nullptr);
  switch (dst_dtype) {
    case DType::f32:
      return fill_typed<DType::f32>(l, dst, value);
    case DType::f16:
      return fill_typed<DType::f16>(l, dst, value);
    case DType::bf16:
      return fill_typed<DType::bf16>(l, dst, value);
    case DType::i32:
      return fill_typed<DType::i32>(l, dst, value);
    case DType::i64:
      return fill_typed<DType::i64>(l, dst, value);
    case DType::u8:
      return fill_typed<DType::u8>(l, dst, value);
  }
}

void add_strided(const Shape& shape, void* dst, const Strides& dst_strides, DType dst_dtype,
                 const void* src, const Strides& src_strides, DType src_dtype) {
  if (!floating(dst_dtype) || !floating(src_dtype)) {
    throw std::invalid_argument(fmt::format("tensor add: {} += {}: floating dtypes only",
                                            dtype_name(dst_dtype), dtype_name(src_dtype)));
  }
  // Walk the source linearly: a broadcast destination then sums whole rows.
  const Layout l = make_layout(shape, dst_strides, &src_strides, 1);
  if (l.numel == 0) return;
  const std::size_t dsize = dtype_size(dst_dtype), ssize = dtype_size(src_dtype);
  const std::int64_t ds = l.ndim == 0 ? 1 : l.stride[0][l.ndim - 1];
  const std::int64_t ss = l.ndim == 0 ? 1 : l.stride[1][l.ndim - 1];
  const CopyRowFn fn = dst_dtype == DType::f32   ? add_row_f32
                       : dst_dtype == DType::f16 ? add_row_f16
                                                 : add_row_bf16;
  for_each_row(l, [&](std::int64_t od, std::int64_t os, std::int64_t begin, std::int64_t n) {
    fn(at(dst, od + begin * ds, dsize), ds, at(src, os + begin * ss, ssize), ss, src_dtype, n);
  });
}

}  // namespace rig::cpu
