#include "cpu/indexing.hpp"

#include <algorithm>
#include <cstring>

#include "cpu/parallel.hpp"
#include "rig/kernel_attributes.hpp"

namespace rig::cpu {
namespace {

// Bytes of work worth one parallel_for chunk.
constexpr std::int64_t kGrainBytes = 32 * 1024;

std::int64_t grain_for(std::int64_t bytes_per_item) {
  return std::max<std::int64_t>(1, kGrainBytes / std::max<std::int64_t>(1, bytes_per_item));
}

// Calls f(T{}) with the unsigned type of `size` bytes: copies move bits, so
// one instantiation serves every dtype of that width.
template <class F>
void with_element_type(std::size_t size, F&& f) {
  switch (size) {
    case 1:
      f(std::uint8_t{});
      break;
    case 2:
      f(std::uint16_t{});
      break;
    case 4:
      f(std::uint32_t{});
      break;
    default:
      f(std::uint64_t{});
      break;
  }
}

template <class Idx>
std::int64_t first_bad(const Idx* idx, std::int64_t n, std::int64_t limit) {
  for (std::int64_t i = 0; i < n; ++i) {
    if (idx[i] < 0 || idx[i] >= limit) return i;
  }
  return -1;
}

// Geometry of gather / scatter-add: the index is [O, J, I] around the axis;
// x's offset of (o, index value, i) is outer(o) + value * axis_stride + inner(i).
struct GatherGeometry {
  const Shape* index_shape;
  Strides x_strides;
  std::int64_t axis = 0;
  std::int64_t outer = 1, along = 1, inner = 1;
  std::int64_t axis_stride = 1;
  bool inner_contiguous = true;  // index's inner axes match x's: inner(i) = i
  std::int64_t chunk = 1;        // inner elements per task
  std::int64_t chunks = 1;       // tasks per outer row

  GatherGeometry(const Shape& x_shape, std::int64_t ax, const Shape& index_shape_)
      : index_shape(&index_shape_), x_strides(contiguous_strides(x_shape)), axis(ax) {
    const auto& is = index_shape_;
    const auto rank = static_cast<std::int64_t>(is.size());
    for (std::int64_t d = 0; d < axis; ++d) outer *= is[d];
    along = is[axis];
    for (std::int64_t d = axis + 1; d < rank; ++d) {
      inner *= is[d];
      inner_contiguous = inner_contiguous && is[d] == x_shape[d];
    }
    axis_stride = x_strides[axis];
    // Split the inner range when there are too few outer rows to share out.
    const std::int64_t want = 4LL * num_threads();
    chunk = outer >= want ? inner : std::max<std::int64_t>(16, (inner * outer + want - 1) / want);
    chunk = std::min(chunk, std::max<std::int64_t>(inner, 1));
    chunks = inner == 0 ? 0 : (inner + chunk - 1) / chunk;
  }

  std::int64_t outer_offset(std::int64_t o) const {
    std::int64_t off = 0;
    for (std::int64_t d = axis - 1; d >= 0; --d) {
      const auto size = (*index_shape)[d];
      off += (o % size) * x_strides[d];
      o /= size;
    }
    return off;
  }

  std::int64_t inner_offset(std::int64_t i) const {
    if (inner_contiguous) return i;
    std::int64_t off = 0;
    for (auto d = static_cast<std::int64_t>(index_shape->size()) - 1; d > axis; --d) {
      const auto size = (*index_shape)[d];
      off += (i % size) * x_strides[d];
      i /= size;
    }
    return off;
  }

  std::int64_t tasks() const { return outer * chunks; }
  std::int64_t grain(std::size_t element_bytes) const {
    return grain_for(along * chunk * static_cast<std::int64_t>(element_bytes));
  }
};

// Runs body(x_outer_offset, index_row_offset, i_begin, i_end) for every
// (o, j) of the tasks [begin, end); each task owns one inner range of one
// outer row and walks j in order.
template <class Body>
inline void for_gather_rows(const GatherGeometry& g, std::int64_t begin, std::int64_t end,
                            Body&& body) {
  for (std::int64_t t = begin; t < end; ++t) {
    const std::int64_t o = t / g.chunks;
    const std::int64_t i0 = (t % g.chunks) * g.chunk;
    const std::int64_t i1 = std::min(g.inner, i0 + g.chunk);
    const std::int64_t xo = g.outer_offset(o);
    for (std::int64_t j = 0; j < g.along; ++j) body(xo, (o * g.along + j) * g.inner, i0, i1);
  }
}

template <class T, class Idx>
void gather_typed(const GatherGeometry& g, const T* x, const Idx* idx, T* out) {
  parallel_for(g.tasks(), g.grain(sizeof(T)), [&](std::int64_t begin, std::int64_t end) {
    for_gather_rows(g, begin, end,
                    [&](std::int64_t xo, std::int64_t row, std::int64_t i0, std::int64_t i1) {
                      const Idx* ir = idx + row;
                      T* orow = out + row;
                      if (g.inner_contiguous) {
                        for (std::int64_t i = i0; i < i1; ++i)
                          orow[i] = x[xo + ir[i] * g.axis_stride + i];
                      } else {
                        for (std::int64_t i = i0; i < i1; ++i) {
                          orow[i] = x[xo + ir[i] * g.axis_stride + g.inner_offset(i)];
                        }
                      }
                    });
  });
}

template <class Idx>
void scatter_add_typed(const GatherGeometry& g, const float* grad, const Idx* idx, float* dx) {
  parallel_for(g.tasks(), g.grain(sizeof(float)), [&](std::int64_t begin, std::int64_t end) {
    for_gather_rows(g, begin, end,
                    [&](std::int64_t xo, std::int64_t row, std::int64_t i0, std::int64_t i1) {
                      const Idx* ir = idx + row;
                      const float* grow = grad + row;
                      for (std::int64_t i = i0; i < i1; ++i) {
                        dx[xo + ir[i] * g.axis_stride + g.inner_offset(i)] += grow[i];
                      }
                    });
  });
}

// index_add: tasks are (outer row, inner range) pairs; each walks the index
// in order, so every destination element is summed in the same order.
struct IndexAddArgs {
  const float* grad;
  float* dx;
  const void* index;
  std::int64_t n, k, inner, chunk, chunks;
};

// Forced inline so that it is compiled for each RIG_CPU_KERNEL target.
template <class Idx>
inline __attribute__((always_inline)) void index_add_range(const IndexAddArgs& a,
                                                           std::int64_t begin, std::int64_t end) {
  const Idx* idx = static_cast<const Idx*>(a.index);
  for (std::int64_t t = begin; t < end; ++t) {
    const std::int64_t o = t / a.chunks;
    const std::int64_t i0 = (t % a.chunks) * a.chunk;
    const std::int64_t len = std::min(a.inner - i0, a.chunk);
    const float* src = a.grad + o * a.k * a.inner + i0;
    float* dst_base = a.dx + o * a.n * a.inner + i0;
    for (std::int64_t r = 0; r < a.k; ++r) {
      float* __restrict dst = dst_base + idx[r] * a.inner;
      const float* __restrict s = src + r * a.inner;
      for (std::int64_t i = 0; i < len; ++i) dst[i] += s[i];
    }
  }
}

RIG_CPU_KERNEL void index_add_i64(const IndexAddArgs& a, std::int64_t begin, std::int64_t end) {
  index_add_range<std::int64_t>(a, begin, end);
}

RIG_CPU_KERNEL void index_add_i32(const IndexAddArgs& a, std::int64_t begin, std::int64_t end) {
  index_add_range<std::int32_t>(a, begin, end);
}

}  // namespace

std::int64_t first_out_of_range(const void* index, DType dtype, std::int64_t n,
                                std::int64_t limit) {
  if (dtype == DType::i32) return first_bad(static_cast<const std::int32_t*>(index), n, limit);
  return first_bad(static_cast<const std::int64_t*>(index), n, limit);
}

void concat_rows(const RowPiece* pieces, std::int64_t count, std::byte* dst,
                 std::int64_t dst_row_bytes, std::int64_t rows) {
  if (rows == 1) {  // one long row per piece (axis 0): split the pieces' bytes instead
    for (std::int64_t p = 0; p < count; ++p) {
      const RowPiece& piece = pieces[p];
      std::byte* out = dst + piece.dst_offset;
      parallel_for(piece.bytes, kGrainBytes * 4, [&](std::int64_t begin, std::int64_t end) {
        std::memcpy(out + begin, piece.src + begin, static_cast<std::size_t>(end - begin));
      });
    }
    return;
  }
  parallel_for(rows, grain_for(dst_row_bytes), [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t r = begin; r < end; ++r) {
      std::byte* out = dst + r * dst_row_bytes;
      for (std::int64_t p = 0; p < count; ++p) {
        const RowPiece& piece = pieces[p];
        std::memcpy(out + piece.dst_offset, piece.src + r * piece.bytes,
                    static_cast<std::size_t>(piece.bytes));
      }
    }
  });
}

void extract_rows(const std::byte* src, std::int64_t src_row_bytes, std::int64_t offset,
                  std::byte* dst, std::int64_t bytes, std::int64_t rows) {
  if (rows == 1) {
    parallel_for(bytes, kGrainBytes * 4, [&](std::int64_t begin, std::int64_t end) {
      std::memcpy(dst + begin, src + offset + begin, static_cast<std::size_t>(end - begin));
    });
    return;
  }
  parallel_for(rows, grain_for(bytes), [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t r = begin; r < end; ++r) {
      std::memcpy(dst + r * bytes, src + r * src_row_bytes + offset,
                  static_cast<std::size_t>(bytes));
    }
  });
}

void zero_rows(std::byte* dst, std::int64_t dst_row_bytes, std::int64_t offset, std::int64_t bytes,
               std::int64_t rows) {
  if (rows == 1) {
    zero_bytes(dst + offset, bytes);
    return;
  }
  parallel_for(rows, grain_for(bytes), [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t r = begin; r < end; ++r) {
      std::memset(dst + r * dst_row_bytes + offset, 0, static_cast<std::size_t>(bytes));
    }
  });
}

void zero_bytes(std::byte* dst, std::int64_t bytes) {
  parallel_for(bytes, kGrainBytes * 8, [&](std::int64_t begin, std::int64_t end) {
    std::memset(dst + begin, 0, static_cast<std::size_t>(end - begin));
  });
}

void gather(const ConstBuffer& x, std::int64_t axis, const ConstBuffer& index, void* out) {
  const GatherGeometry g(x.shape, axis, index.shape);
  with_element_type(dtype_size(x.dtype), [&](auto zero) {
    using T = decltype(zero);
    const T* xs = static_cast<const T*>(x.data);
    T* os = static_cast<T*>(out);
    if (index.dtype == DType::i32) {
      gather_typed(g, xs, static_cast<const std::int32_t*>(index.data), os);
    } else {
      gather_typed(g, xs, static_cast<const std::int64_t*>(index.data), os);
    }
  });
}

void gather_backward(const float* grad, std::int64_t axis, const ConstBuffer& index, float* dx,
                     const Shape& x_shape) {
  const GatherGeometry g(x_shape, axis, index.shape);
  if (index.dtype == DType::i32) {
    scatter_add_typed(g, grad, static_cast<const std::int32_t*>(index.data), dx);
  } else {
    scatter_add_typed(g, grad, static_cast<const std::int64_t*>(index.data), dx);
  }
}

void index_select(const void* x, std::size_t element_bytes, std::int64_t outer, std::int64_t n,
                  std::int64_t inner, const ConstBuffer& index, void* out) {
  const std::int64_t k = shape_numel(index.shape);
  const auto row_bytes = inner * static_cast<std::int64_t>(element_bytes);
  const auto* src = static_cast<const std::byte*>(x);
  auto* dst = static_cast<std::byte*>(out);
  auto copy = [&](const auto* idx) {
    parallel_for(outer * k, grain_for(row_bytes), [&](std::int64_t begin, std::int64_t end) {
      for (std::int64_t t = begin; t < end; ++t) {
        const std::int64_t o = t / k;
        const std::int64_t row = o * n + static_cast<std::int64_t>(idx[t % k]);
        std::memcpy(dst + t * row_bytes, src + row * row_bytes,
                    static_cast<std::size_t>(row_bytes));
      }
    });
  };
  if (index.dtype == DType::i32) {
    copy(static_cast<const std::int32_t*>(index.data));
  } else {
    copy(static_cast<const std::int64_t*>(index.data));
  }
}

void index_add(const float* grad, std::int64_t outer, std::int64_t n, std::int64_t inner,
               const ConstBuffer& index, float* dx) {
  if (inner == 0 || outer == 0) return;
  IndexAddArgs args{grad, dx, index.data, n, shape_numel(index.shape), inner, inner, 1};
  // Enough tasks for every thread: split the inner range (in 16-float
  // pieces) when there are few outer rows, e.g. the embedding gradient.
  const std::int64_t want = 4LL * num_threads();
  if (outer < want) {
    const std::int64_t per_row = (want + outer - 1) / outer;
    args.chunk = std::max<std::int64_t>(16, (inner + per_row - 1) / per_row);
    args.chunk = (args.chunk + 15) / 16 * 16;
    args.chunks = (inner + args.chunk - 1) / args.chunk;
  }
  const std::int64_t grain = grain_for(args.k * args.chunk * 8);
  if (index.dtype == DType::i32) {
    parallel_for(outer * args.chunks, grain,
                 [&](std::int64_t begin, std::int64_t end) { index_add_i32(args, begin, end); });
  } else {
    parallel_for(outer * args.chunks, grain,
                 [&](std::int64_t begin, std::int64_t end) { index_add_i64(args, begin, end); });
  }
}

}  // namespace rig::cpu
