// KernelBackend: row copies, gather, index_select / index_add, argmax, top-k.
#include <algorithm>
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

void check_gather_rank(std::size_t rank) {
  if (rank > static_cast<std::size_t>(kernels::kGatherMaxDims)) {
    throw std::invalid_argument(
        fmt::format("gather on cuda: rank {} (at most {})", rank, kernels::kGatherMaxDims));
  }
}

}  // namespace

void KernelBackend::gather(const backend::ConstBuffer& x, std::int64_t axis,
                           const backend::ConstBuffer& index, void* out) {
  if (shape_numel(index.shape) == 0) return;
  check_gather_rank(index.shape.size());
  kernels::Gather k;
  k.x = x.data;
  k.element_bytes = static_cast<int>(dtype_size(x.dtype));
  k.rank = static_cast<int>(index.shape.size());
  k.axis = static_cast<int>(axis);
  const Strides xs = contiguous_strides(x.shape);
  for (std::size_t d = 0; d < index.shape.size(); ++d) {
    k.index_shape[d] = index.shape[d];
    k.x_strides[d] = xs[d];
  }
  k.index = index.data;
  k.index_type = index.dtype;
  k.out = out;
  run(k);
}

void KernelBackend::gather_backward(const float* grad, std::int64_t axis,
                                    const backend::ConstBuffer& index, float* dx,
                                    const Shape& x_shape) {
  if (shape_numel(index.shape) == 0) return;
  check_gather_rank(index.shape.size());
  kernels::GatherBackward k;
  k.grad = grad;
  k.rank = static_cast<int>(index.shape.size());
  k.axis = static_cast<int>(axis);
  const Strides xs = contiguous_strides(x_shape);
  for (std::size_t d = 0; d < index.shape.size(); ++d) {
    k.index_shape[d] = index.shape[d];
    k.x_strides[d] = xs[d];
  }
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

void KernelBackend::index_add(const float* grad, std::int64_t outer, std::int64_t n,
                              std::int64_t inner, const backend::ConstBuffer& index, float* dx) {
  run(kernels::IndexAdd{grad, outer, n, inner, index.data, index.dtype, shape_numel(index.shape),
                        dx});
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

}  // namespace rig::cuda
