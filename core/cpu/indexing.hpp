// CPU kernels for concat / split / gather / index_select / embedding and
// their gradients. Tensors are contiguous; data-moving kernels copy elements
// of any dtype by size, accumulating kernels work on f32. Indices are checked
// by the caller (first_out_of_range) before a kernel runs.
#pragma once

#include <cstddef>
#include <cstdint>

#include "backend/kernel_args.hpp"

namespace rig::cpu {

using backend::ConstBuffer;
using backend::RowPiece;

// Index of the first of n indices outside [0, limit), or -1. `index` is i32 or i64.
std::int64_t first_out_of_range(const void* index, DType dtype, std::int64_t n, std::int64_t limit);

// concat: every output row is the concatenation of the pieces' rows.
void concat_rows(const RowPiece* pieces, std::int64_t count, std::byte* dst,
                 std::int64_t dst_row_bytes, std::int64_t rows);
// The inverse for one piece: bytes [offset, offset + bytes) of each of `rows`
// source rows of src_row_bytes into a packed destination.
void extract_rows(const std::byte* src, std::int64_t src_row_bytes, std::int64_t offset,
                  std::byte* dst, std::int64_t bytes, std::int64_t rows);
// Zeroes bytes [offset, offset + bytes) of each of `rows` rows of dst.
void zero_rows(std::byte* dst, std::int64_t dst_row_bytes, std::int64_t offset, std::int64_t bytes,
               std::int64_t rows);
// Zeroes `bytes` bytes in parallel (the dense gradient buffers).
void zero_bytes(std::byte* dst, std::int64_t bytes);

// torch.gather: out (index's shape) = x[..., index[...], ...] along `axis`.
// x and index have the same rank; index.size(d) <= x.size(d) for d != axis.
void gather(const ConstBuffer& x, std::int64_t axis, const ConstBuffer& index, void* out);
// Its gradient: dx (zeroed, x_shape, f32) += g (index's shape, f32) at index.
void gather_backward(const float* grad, std::int64_t axis, const ConstBuffer& index, float* dx,
                     const Shape& x_shape);

// index_select on x viewed as [outer, n, inner] (element_bytes each): out
// [outer, k, inner] for the k indices (i32 or i64).
void index_select(const void* x, std::size_t element_bytes, std::int64_t outer, std::int64_t n,
                  std::int64_t inner, const ConstBuffer& index, void* out);
// Its gradient: dx [outer, n, inner] (f32) += grad [outer, k, inner] at
// index, each destination element summed in index order: the result does not
// depend on the number of threads.
void index_add(const float* grad, std::int64_t outer, std::int64_t n, std::int64_t inner,
               const ConstBuffer& index, float* dx);

}  // namespace rig::cpu
