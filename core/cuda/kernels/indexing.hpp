// Indexing and data movement (backend.hpp "Indexing and data movement" and
// select, core/cpu/indexing.cpp and selection.cpp). Index tensors are i32 or
// i64 (index_type). The ops check them (Backend::check_index), on the GPU
// after the fact: until the error is raised, an index out of range reads a
// zero element (IndexSelect, Gather) or adds nothing (IndexAdd,
// GatherBackward), never memory outside the operands.
//   IndexSelect: x [outer, n, inner] -> out [outer, k, inner], out row t =
//     x row index[t]; one thread per output element, bytes copied.
//   IndexAdd: dx [outer, n, inner] += grad [outer, k, inner] at index. One
//     thread per (outer, inner) column walks the index list in order t = 0,
//     1, ..., k - 1, adding grad row t into dx row index[t]: every
//     destination is summed in index order by one thread (the CPU's order: the
//     same bits) whatever the scheduling. Work O(outer * k * inner), parallel
//     over outer * inner threads, each O(k) sequential (an embedding's
//     gradient: d_model threads, each walking all the tokens). KernelBackend
//     sorts the positions by row instead (index_add.hpp) and runs this only
//     as the fallback beyond that sort's limits.
//   Gather / GatherBackward: torch.gather along `axis`; index and out have
//     index_shape, x (contiguous) has strides x_strides. The backward
//     (scatter-add into dx, zeroed by the caller) gives one thread to each
//     position of the index's other axes, walking the index's `axis` in order:
//     destinations of different threads differ off the axis, so no two
//     threads add to one element, and each sums in the CPU's order.
//   Select: out (contiguous) = cond != 0 ? a : b over up to kMaxDims axes,
//     the operands' element strides 0 on broadcast axes; element bytes are
//     copied. Masked fill is a select with a one-element operand (all strides
//     0) holding the fill value.
//   ConcatRows / ExtractRows / ZeroRows: row-blocked byte copies, one block
//     per (row, piece, chunk of kRowChunkBytes), in the widest words both
//     addresses allow (copy.hpp's span copy).
#pragma once

#include <cstddef>
#include <cstdint>

#include "cuda/kernels/common.hpp"
#include "cuda/kernels/copy.hpp"
#include "rig/dtype.hpp"

namespace rig::kernels {

inline constexpr int kGatherMaxDims = 8;

RIG_HD_INLINE std::int64_t load_index(const void* index, DType type, std::int64_t t) {
  return type == DType::i32 ? static_cast<std::int64_t>(static_cast<const std::int32_t*>(index)[t])
                            : static_cast<const std::int64_t*>(index)[t];
}

// Element si of src to element di of dst, `bytes` (1, 2, 4 or 8) each.
RIG_HD_INLINE void copy_element(void* dst, std::int64_t di, const void* src, std::int64_t si,
                                int bytes) {
  switch (bytes) {
    case 1:
      static_cast<std::uint8_t*>(dst)[di] = static_cast<const std::uint8_t*>(src)[si];
      return;
    case 2:
      static_cast<std::uint16_t*>(dst)[di] = static_cast<const std::uint16_t*>(src)[si];
      return;
    case 4:
      static_cast<std::uint32_t*>(dst)[di] = static_cast<const std::uint32_t*>(src)[si];
      return;
    default:
      static_cast<std::uint64_t*>(dst)[di] = static_cast<const std::uint64_t*>(src)[si];
      return;
  }
}

// Element di of dst set to zero bits, `bytes` (1, 2, 4 or 8) each.
RIG_HD_INLINE void zero_element(void* dst, std::int64_t di, int bytes) {
  switch (bytes) {
    case 1:
      static_cast<std::uint8_t*>(dst)[di] = 0;
      return;
    case 2:
      static_cast<std::uint16_t*>(dst)[di] = 0;
      return;
    case 4:
      static_cast<std::uint32_t*>(dst)[di] = 0;
      return;
    default:
      static_cast<std::uint64_t*>(dst)[di] = 0;
      return;
  }
}

struct IndexSelect {
  const void* x = nullptr;  // [outer, n, inner]
  int element_bytes = 4;    // 1, 2, 4 or 8
  std::int64_t outer = 0, n = 0, inner = 0;
  const void* index = nullptr;  // [k]
  DType index_type = DType::i64;
  std::int64_t k = 0;
  void* out = nullptr;  // [outer, k, inner]

  simt::LaunchShape plan(const simt::DeviceProperties& device) const {
    return plan_grid_stride(device, outer * k * inner, 1, 36);  // ptxas: 36
  }

  template <class Ctx>
  RIG_HD void operator()(Ctx& ctx) const {
    const std::int64_t total = outer * k * inner;
    for (std::int64_t e = global_thread(ctx); e < total; e += grid_threads(ctx)) {
      const std::int64_t i = e % inner;
      const std::int64_t t = (e / inner) % k;
      const std::int64_t o = e / (inner * k);
      const std::int64_t row = load_index(index, index_type, t);
      if (row < 0 || row >= n) {
        zero_element(out, e, element_bytes);
        continue;
      }
      copy_element(out, e, x, (o * n + row) * inner + i, element_bytes);
    }
  }
};

struct IndexAdd {
  const float* grad = nullptr;  // [outer, k, inner]
  std::int64_t outer = 0, n = 0, inner = 0;
  const void* index = nullptr;  // [k]
  DType index_type = DType::i64;
  std::int64_t k = 0;
  float* dx = nullptr;  // [outer, n, inner], accumulates

  simt::LaunchShape plan(const simt::DeviceProperties& device) const {
    return plan_grid_stride(device, outer * inner);
  }

  template <class Ctx>
  RIG_HD void operator()(Ctx& ctx) const {
    if (k == 0) return;  // nothing to add (and grad may be null)
    const std::int64_t columns = outer * inner;
    for (std::int64_t c = global_thread(ctx); c < columns; c += grid_threads(ctx)) {
      const std::int64_t o = c / inner, i = c % inner;
      const float* g = grad + o * k * inner + i;
      float* d = dx + o * n * inner + i;
      for (std::int64_t t = 0; t < k; ++t) {
        const std::int64_t row = load_index(index, index_type, t);
        if (row >= 0 && row < n) d[row * inner] += g[t * inner];
      }
    }
  }
};

// Offset in x of index element e (its position in index_shape) with the
// axis coordinate replaced by the index value.
RIG_HD_INLINE std::int64_t gather_offset(std::int64_t e, int rank, int axis,
                                         const std::int64_t (&index_shape)[kGatherMaxDims],
                                         const std::int64_t (&x_strides)[kGatherMaxDims],
                                         std::int64_t value) {
  std::int64_t off = 0;
  for (int d = rank - 1; d >= 0; --d) {
    const std::int64_t c = e % index_shape[d];
    e /= index_shape[d];
    off += (d == axis ? value : c) * x_strides[d];
  }
  return off;
}

struct Gather {
  const void* x = nullptr;  // contiguous, x_strides
  int element_bytes = 4;
  int rank = 1;  // <= kGatherMaxDims
  int axis = 0;
  std::int64_t index_shape[kGatherMaxDims] = {};
  std::int64_t x_strides[kGatherMaxDims] = {};
  const void* index = nullptr;  // contiguous, index_shape
  DType index_type = DType::i64;
  void* out = nullptr;         // contiguous, index_shape
  std::int64_t axis_size = 0;  // x's size along axis: the indices' range

  simt::LaunchShape plan(const simt::DeviceProperties& device) const {
    return plan_grid_stride(device, shape_elements(rank, index_shape), 1, 38);  // ptxas: 38
  }

  template <class Ctx>
  RIG_HD void operator()(Ctx& ctx) const {
    const std::int64_t total = shape_elements(rank, index_shape);
    for (std::int64_t e = global_thread(ctx); e < total; e += grid_threads(ctx)) {
      const std::int64_t v = load_index(index, index_type, e);
      if (v < 0 || v >= axis_size) {
        zero_element(out, e, element_bytes);
        continue;
      }
      copy_element(out, e, x, gather_offset(e, rank, axis, index_shape, x_strides, v),
                   element_bytes);
    }
  }
};

struct GatherBackward {
  const float* grad = nullptr;  // contiguous, index_shape
  int rank = 1;
  int axis = 0;
  std::int64_t index_shape[kGatherMaxDims] = {};
  std::int64_t x_strides[kGatherMaxDims] = {};  // dx's (contiguous over x's shape)
  const void* index = nullptr;
  DType index_type = DType::i64;
  float* dx = nullptr;         // accumulates
  std::int64_t axis_size = 0;  // dx's size along axis: the indices' range

  // Index positions off the axis: one thread each.
  RIG_HD_INLINE std::int64_t lines() const {
    const std::int64_t along = index_shape[axis];
    return along == 0 ? 0 : shape_elements(rank, index_shape) / along;
  }

  simt::LaunchShape plan(const simt::DeviceProperties& device) const {
    return plan_grid_stride(device, lines(), 1, 48);  // ptxas: 48
  }

  template <class Ctx>
  RIG_HD void operator()(Ctx& ctx) const {
    const std::int64_t along = index_shape[axis];
    std::int64_t inner = 1;
    for (int d = axis + 1; d < rank; ++d) inner *= index_shape[d];
    const std::int64_t count = lines();
    for (std::int64_t line = global_thread(ctx); line < count; line += grid_threads(ctx)) {
      const std::int64_t o = line / inner, i = line % inner;
      const std::int64_t first = o * along * inner + i;  // index element (o, 0, i)
      for (std::int64_t j = 0; j < along; ++j) {
        const std::int64_t e = first + j * inner;
        const std::int64_t v = load_index(index, index_type, e);
        if (v >= 0 && v < axis_size)
          dx[gather_offset(e, rank, axis, index_shape, x_strides, v)] += grad[e];
      }
    }
  }
};

struct Select {
  int ndim = 1;  // <= kMaxDims
  std::int64_t shape[kMaxDims] = {};
  std::int64_t strides[3][kMaxDims] = {};  // [0] cond, [1] a, [2] b
  const std::uint8_t* cond = nullptr;
  const void* a = nullptr;
  const void* b = nullptr;
  void* out = nullptr;  // contiguous over shape
  int element_bytes = 4;

  simt::LaunchShape plan(const simt::DeviceProperties& device) const {
    return plan_grid_stride(device, shape_elements(ndim, shape), 1, 40);  // ptxas: 40
  }

  template <class Ctx>
  RIG_HD void operator()(Ctx& ctx) const {
    const std::int64_t total = shape_elements(ndim, shape);
    for (std::int64_t e = global_thread(ctx); e < total; e += grid_threads(ctx)) {
      std::int64_t off[3];
      strided_offsets(e, ndim, shape, strides, off);
      if (cond[off[0]] != 0) {
        copy_element(out, e, a, off[1], element_bytes);
      } else {
        copy_element(out, e, b, off[2], element_bytes);
      }
    }
  }
};

// Bytes per block of the row-blocked copies (a multiple of 16, so every
// chunk starts as aligned as its span).
inline constexpr std::int64_t kRowChunkBytes = 16 * 1024;

RIG_HD_INLINE std::int64_t row_chunks(std::int64_t bytes) {
  return (bytes + kRowChunkBytes - 1) / kRowChunkBytes;
}

// Chunk c of the span of `bytes` bytes at dst (from src; null: zeroes), by
// the block's threads.
template <class Ctx>
RIG_HD_INLINE void copy_chunk(Ctx& ctx, std::byte* dst, const std::byte* src, std::int64_t bytes,
                              std::int64_t c) {
  const std::int64_t begin = c * kRowChunkBytes;
  if (begin >= bytes) return;
  const std::int64_t len = bytes - begin < kRowChunkBytes ? bytes - begin : kRowChunkBytes;
  std::byte* d = dst + begin;
  const std::byte* s = src != nullptr ? src + begin : nullptr;
  const int width = copy_word_bytes(d, s != nullptr ? static_cast<const void*>(s) : d);
  const std::int64_t items = span_items(len, width);
  for (std::int64_t t = ctx.thread_rank(); t < items; t += ctx.block_threads()) {
    span_item(d, s, len, width, t);
  }
}

// backend::RowPiece's layout: `bytes` bytes at src + r * bytes go to
// dst + r * dst_row_bytes + dst_offset for every row r.
struct RowPieceArg {
  const std::byte* src;
  std::int64_t bytes;
  std::int64_t dst_offset;
};

struct ConcatRows {
  const RowPieceArg* pieces = nullptr;  // [count], in device memory
  std::int64_t count = 0;
  std::byte* dst = nullptr;
  std::int64_t dst_row_bytes = 0;
  std::int64_t rows = 0;
  std::int64_t max_piece_bytes = 0;  // the largest pieces[p].bytes (host-known)

  simt::LaunchShape plan(const simt::DeviceProperties& device) const {
    return simt::plan_rows(device, rows * count * row_chunks(max_piece_bytes),
                           simt::KernelResources{kBlockThreads, 0, 38});  // ptxas: 38
  }

  template <class Ctx>
  RIG_HD void operator()(Ctx& ctx) const {
    const std::int64_t chunks = row_chunks(max_piece_bytes);
    const std::int64_t task = block_row(ctx);
    if (task >= rows * count * chunks) return;
    const std::int64_t c = task % chunks;
    const std::int64_t p = (task / chunks) % count;
    const std::int64_t r = task / (chunks * count);
    const RowPieceArg piece = pieces[p];
    copy_chunk(ctx, dst + r * dst_row_bytes + piece.dst_offset, piece.src + r * piece.bytes,
               piece.bytes, c);
  }
};

// Bytes [offset, offset + bytes) of each row of src into a packed dst.
struct ExtractRows {
  const std::byte* src = nullptr;
  std::int64_t src_row_bytes = 0, offset = 0;
  std::byte* dst = nullptr;
  std::int64_t bytes = 0, rows = 0;

  simt::LaunchShape plan(const simt::DeviceProperties& device) const {
    return simt::plan_rows(device, rows * row_chunks(bytes),
                           simt::KernelResources{kBlockThreads, 0, 32});
  }

  template <class Ctx>
  RIG_HD void operator()(Ctx& ctx) const {
    const std::int64_t chunks = row_chunks(bytes);
    const std::int64_t task = block_row(ctx);
    if (task >= rows * chunks) return;
    const std::int64_t r = task / chunks;
    copy_chunk(ctx, dst + r * bytes, src + r * src_row_bytes + offset, bytes, task % chunks);
  }
};

// Zeroes bytes [offset, offset + bytes) of each row of dst.
struct ZeroRows {
  std::byte* dst = nullptr;
  std::int64_t dst_row_bytes = 0, offset = 0, bytes = 0, rows = 0;

  simt::LaunchShape plan(const simt::DeviceProperties& device) const {
    return simt::plan_rows(device, rows * row_chunks(bytes),
                           simt::KernelResources{kBlockThreads, 0, 38});  // ptxas: 38
  }

  template <class Ctx>
  RIG_HD void operator()(Ctx& ctx) const {
    const std::int64_t chunks = row_chunks(bytes);
    const std::int64_t task = block_row(ctx);
    if (task >= rows * chunks) return;
    const std::int64_t r = task / chunks;
    copy_chunk(ctx, dst + r * dst_row_bytes + offset, nullptr, bytes, task % chunks);
  }
};

}  // namespace rig::kernels
