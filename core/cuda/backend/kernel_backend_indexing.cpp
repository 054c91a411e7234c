// KernelBackend: row copies, gather, index_select / index_add, argmax, top-k.
#include <algorithm>
#include <cstdint>
#include <limits>
#include <stdexcept>
#include <vector>

#include <fmt/format.h>

#include "cuda/backend/kernel_backend.hpp"

namespace rig::cuda {

void KernelBackend::concat_rows(const backend::RowPiece* pieces, std::int64_t count, std::byte* dst,
                                std::int64_t dst_row_bytes, std::int64_t rows) {
  if (count == 0 || rows == 0) return;
  std::vector<kernels::RowPieceArg> args(static_cast<std::size_t>(count));
  std::int64_t largest = 0;
  for (std::size_t p = 0; p < args.size(); ++p) {
    args[p] = {pieces[p].src, pieces[p].bytes, pieces[p].dst_offset};
    largest = std::max(largest, pieces[p].bytes);
  }
  const DeviceScratch device_args = upload(args.data(), args.size() * sizeof(args[0]));
  run(kernels::ConcatRows{device_args.as<const kernels::RowPieceArg>(), count, dst, dst_row_bytes,
                          rows, largest});
}

void KernelBackend::extract_rows(const std::byte* src, std::int64_t src_row_bytes,
                                 std::int64_t offset, std::byte* dst, std::int64_t bytes,
                                 std::int64_t rows) {
  run(kernels::ExtractRows{src, src_row_bytes, offset, dst, bytes, rows});
}

void KernelBackend::zero_rows(std::byte* dst, std::int64_t dst_row_bytes, std::int64_t offset,
                              std::int64_t bytes, std::int64_t rows) {
  run(kernels::ZeroRows{dst, dst_row_bytes, offset, bytes, rows});
}

namespace {

// The geometry of Gather and GatherBackward: index's shape and x's
// contiguous strides, rank and axis.
template <class Kernel>
void set_gather_geometry(Kernel& k, std::int64_t axis, const Shape& index_shape,
                         const Shape& x_shape) {
  if (index_shape.size() > static_cast<std::size_t>(kernels::kGatherMaxDims)) {
    throw std::invalid_argument(fmt::format("gather on cuda: rank {} (at most {})",
                                            index_shape.size(), kernels::kGatherMaxDims));
  }
  k.rank = static_cast<int>(index_shape.size());
  k.axis = static_cast<int>(axis);
  k.axis_size = x_shape[static_cast<std::size_t>(axis)];
  const Strides xs = contiguous_strides(x_shape);
  for (std::size_t d = 0; d < index_shape.size(); ++d) {
    k.index_shape[d] = index_shape[d];
    k.x_strides[d] = xs[d];
  }
}

}  // namespace

void KernelBackend::gather(const backend::ConstBuffer& x, std::int64_t axis,
                           const backend::ConstBuffer& index, void* out) {
  if (shape_numel(index.shape) == 0) return;
  kernels::Gather k;
  k.x = x.data;
  k.element_bytes = static_cast<int>(dtype_size(x.dtype));
  set_gather_geometry(k, axis, index.shape, x.shape);
  k.index = index.data;
  k.index_type = index.dtype;
  k.out = out;
  run(k);
}

void KernelBackend::gather_backward(const float* grad, std::int64_t axis,
                                    const backend::ConstBuffer& index, float* dx,
                                    const Shape& x_shape) {
  if (shape_numel(index.shape) == 0) return;
  kernels::GatherBackward k;
  k.grad = grad;
  set_gather_geometry(k, axis, index.shape, x_shape);
  k.index = index.data;
  k.index_type = index.dtype;
  k.dx = dx;
  run(k);
}

void KernelBackend::index_select(const void* x, std::size_t element_bytes, std::int64_t outer,
                                 std::int64_t n, std::int64_t inner,
                                 const backend::ConstBuffer& index, void* out) {
  run(kernels::IndexSelect{x, static_cast<int>(element_bytes), outer, n, inner, index.data,
                           index.dtype, shape_numel(index.shape), out});
}

// Positions sorted by row, then one thread per (run of equal rows, column)
// (kernels/index_add.hpp); the column-walking IndexAdd where the sort's keys
// or scratch would not fit. Both sum each element in ascending position.
void KernelBackend::index_add(const float* grad, std::int64_t outer, std::int64_t n,
                              std::int64_t inner, const backend::ConstBuffer& index, float* dx) {
  const std::int64_t k = shape_numel(index.shape);
  if (k == 0 || outer == 0 || inner == 0) return;
  if (!index_add_sorts(k, n)) {
    run(kernels::IndexAdd{grad, outer, n, inner, index.data, index.dtype, k, dx});
    return;
  }
  index_add_sorted(kernels::ElementType::f32, grad, outer, n, inner, index,
                   kernels::ElementType::f32, dx);
}

bool KernelBackend::index_add_sorts(std::int64_t k, std::int64_t n) {
  return k <= kernels::kIndexAddSortMaxK && n < std::numeric_limits<std::int32_t>::max();
}

void KernelBackend::index_add_sorted(kernels::ElementType grad_type, const void* grad,
                                     std::int64_t outer, std::int64_t n, std::int64_t inner,
                                     const backend::ConstBuffer& index,
                                     kernels::ElementType dx_type, void* dx) {
  const std::int64_t k = shape_numel(index.shape);
  const std::int64_t chunk = kernels::index_add_rank_chunk(k);
  const std::int64_t chunks = (k + chunk - 1) / chunk;
  const auto words = static_cast<std::size_t>(k);
  DeviceScratch counts = scratch(static_cast<std::size_t>(chunks) * words * sizeof(std::uint32_t));
  DeviceScratch sorted = scratch(2 * words * sizeof(std::uint32_t));  // order, then keys
  auto* order = sorted.as<std::uint32_t>();
  auto* keys = order + words;
  run(kernels::IndexAddRank{index.data, index.dtype, k, n, chunk, counts.as<std::uint32_t>()});
  run(kernels::IndexAddScatter{index.data, index.dtype, k, n, chunks,
                               counts.as<const std::uint32_t>(), order, keys});
  run(kernels::IndexAddSegments{grad, outer, n, inner, k, order, keys, dx, grad_type, dx_type});
}

// The sorted kernels sum each reached row once and add it rounded; past
// their limits, a dense f32 sum, rounded to `type` and added everywhere
// (x + 0 keeps x), the same values.
void KernelBackend::index_add_16(DType grad_type, const void* grad, std::int64_t outer,
                                 std::int64_t n, std::int64_t inner,
                                 const backend::ConstBuffer& index, DType type, void* dx) {
  if (type != DType::f16 && type != DType::bf16) {
    throw std::invalid_argument(
        fmt::format("index_add_16 on cuda: dx is {} (expected f16 or bf16)", dtype_name(type)));
  }
  if (grad_type != DType::f32 && grad_type != type) {
    throw std::invalid_argument(
        fmt::format("index_add_16 on cuda: grad is {} for dx of {} (expected f32 or the same type)",
                    dtype_name(grad_type), dtype_name(type)));
  }
  const std::int64_t k = shape_numel(index.shape);
  if (k == 0 || outer == 0 || inner == 0) return;
  if (index_add_sorts(k, n)) {
    index_add_sorted(element_type(grad_type, "index_add_16"), grad, outer, n, inner, index,
                     element_type(type, "index_add_16"), dx);
    return;
  }
  const std::int64_t rows = outer * k * inner, dense = outer * n * inner;
  DeviceScratch grad32 = f32_copy(grad_type, grad, rows);
  DeviceScratch sum = scratch(static_cast<std::size_t>(dense) * sizeof(float));
  fill_strided({dense}, sum.as<float>(), {1}, DType::f32, 0.0F);
  run(kernels::IndexAdd{grad32.as<float>(), outer, n, inner, index.data, index.dtype, k,
                        sum.as<float>()});
  DeviceScratch rounded = scratch(static_cast<std::size_t>(dense) * dtype_size(type));
  copy_strided({dense}, rounded.as<void>(), {1}, type, sum.as<float>(), {1}, DType::f32);
  add_strided({dense}, dx, {1}, type, rounded.as<void>(), {1}, type);
}

void KernelBackend::argmax(const backend::ConstBuffer& x, std::int64_t outer, std::int64_t n,
                           std::int64_t inner, std::int64_t* out) {
  run(kernels::Argmax{x.data, x.dtype, outer, n, inner, out});
}

void KernelBackend::topk(const backend::ConstBuffer& x, std::int64_t rows, std::int64_t n,
                         std::int64_t k, void* values, std::int64_t* indices) {
  if (k > kernels::kTopKMaxK) {
    throw std::invalid_argument(
        fmt::format("topk on cuda: k = {} (the kernel selects at most {}; lower the beam width)", k,
                    kernels::kTopKMaxK));
  }
  run(kernels::TopK{x.data, x.dtype, rows, n, k, values, indices});
}

std::int64_t KernelBackend::topk_max_k() const {
  return kernels::kTopKMaxK;
}

}  // namespace rig::cuda
