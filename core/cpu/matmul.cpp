#include "cpu/matmul.hpp"

#include <algorithm>
#include <optional>
#include <stdexcept>

#include <fmt/format.h>

#include "backend/matmul_layout.hpp"
#include "cpu/gemm.hpp"
#include "cpu/scratch.hpp"
#include "cpu/tensor_copy.hpp"

namespace rig::cpu {

namespace {

Shape batch_of(const Shape& s) {
  return Shape(s.begin(), s.end() - 2);
}

// A BLAS-ready view of one operand: its data (a contiguous copy if its
// matrices were not BLAS-readable), its layout and its strides over the
// output's batch axes.
struct Operand {
  Scratch copy;
  GemmOperand blas;
  Strides batch_strides;
};

Operand prepare(const backend::MatrixOperand& x, const Shape& batch) {
  Operand op;
  const auto n = static_cast<std::int64_t>(x.shape.size());
  const float* data = x.data;
  Strides strides = x.strides;
  const std::int64_t rows = x.shape[n - 2];
  const std::int64_t cols = x.shape[n - 1];
  auto layout = backend::matrix_layout(rows, cols, strides[n - 2], strides[n - 1]);
  if (!layout) {
    const Strides dense = contiguous_strides(x.shape);
    op.copy = Scratch(static_cast<std::size_t>(shape_numel(x.shape)) * sizeof(float));
    copy_strided(x.shape, op.copy.data(), dense, DType::f32, x.data, x.strides, DType::f32);
    data = op.copy.as<const float>();
    strides = dense;
    layout = backend::matrix_layout(rows, cols, strides[n - 2], strides[n - 1]);
  }
  op.blas = {data, layout->ld, x.transpose != layout->flip};
  // Batch strides aligned to the right of `batch`, 0 where broadcast.
  op.batch_strides.assign(batch.size(), 0);
  const std::size_t xb = static_cast<std::size_t>(n - 2);
  const std::size_t lead = batch.size() - xb;
  for (std::size_t d = 0; d < xb; ++d) {
    if (x.shape[d] != 1) op.batch_strides[lead + d] = strides[d];
  }
  return op;
}

}  // namespace

void matmul(const backend::MatrixOperand& a, const backend::MatrixOperand& b, float* out,
            const Shape& out_shape, MatmulPrecision precision) {
  const bool ta = a.transpose;
  const std::int64_t m = out_shape[out_shape.size() - 2];
  const std::int64_t n = out_shape[out_shape.size() - 1];
  const std::int64_t k = a.shape[a.shape.size() - (ta ? 2 : 1)];
  if (shape_numel(out_shape) == 0) return;
  const Shape batch = batch_of(out_shape);
  const std::int64_t batch_count = shape_numel(batch);
  const std::int64_t b_count = shape_numel(batch_of(b.shape));

  // b without batch axes of its own and a whose batch axes fold into its rows
  // (op(a) not transposed, [..., M, K] a view of [B*M, K]): one GEMM.
  if (batch_count > 1 && b_count == 1) {
    if (const auto row_stride = backend::folded_row_stride(a, m, k)) {
      const Operand ob = prepare(b, batch);
      gemm(batch_count * m, n, k, 1.0F, {a.data, *row_stride, false}, ob.blas, 0.0F, out, n,
           precision);
      return;
    }
  }

  const Operand oa = prepare(a, batch);
  const Operand ob = prepare(b, batch);
  if (batch_count == 1) {
    gemm(m, n, k, 1.0F, oa.blas, ob.blas, 0.0F, out, n, precision);
    return;
  }
  const std::vector<backend::BatchAxis> axes =
      backend::merged_batch_axes(batch, oa.batch_strides, ob.batch_strides);
  if (axes.size() > static_cast<std::size_t>(GemmBatchOffsets::kMaxDims)) {
    throw std::invalid_argument(fmt::format("matmul: {} x {}: more than {} batch axes",
                                            to_string(a.shape), to_string(b.shape),
                                            GemmBatchOffsets::kMaxDims));
  }
  GemmBatchOffsets offsets;
  offsets.ndim = static_cast<int>(axes.size());
  for (std::size_t d = 0; d < axes.size(); ++d) {
    offsets.shape[d] = axes[d].size;
    offsets.a_strides[d] = axes[d].stride_a;
    offsets.b_strides[d] = axes[d].stride_b;
  }
  gemm_batched(batch_count, m, n, k, 1.0F, oa.blas, ob.blas, offsets, 0.0F, out, n, m * n,
               precision);
}

}  // namespace rig::cpu
