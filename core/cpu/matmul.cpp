#include "cpu/matmul.hpp"

#include <algorithm>
#include <optional>
#include <stdexcept>

#include <fmt/format.h>

#include "cpu/gemm.hpp"
#include "cpu/scratch.hpp"
#include "cpu/tensor_copy.hpp"

namespace rig::cpu {

namespace {

// How BLAS can read op(X) from X's last two axes (rows r, cols c, strides s0,
// s1): as stored (row-major, ld s0) or as its transpose (column-major, ld s1).
struct Layout {
  bool flip = false;  // pass the opposite transpose flag
  std::int64_t ld = 1;
};

std::optional<Layout> blas_layout(std::int64_t r, std::int64_t c, std::int64_t s0,
                                  std::int64_t s1) {
  if ((c == 1 || s1 == 1) && (r == 1 || s0 >= std::max<std::int64_t>(c, 1))) {
    return Layout{false, r == 1 ? std::max<std::int64_t>(c, 1) : s0};
  }
  if ((r == 1 || s0 == 1) && (c == 1 || s1 >= std::max<std::int64_t>(r, 1))) {
    return Layout{true, c == 1 ? std::max<std::int64_t>(r, 1) : s1};
  }
  return std::nullopt;
}

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
  auto layout = blas_layout(rows, cols, strides[n - 2], strides[n - 1]);
  if (!layout) {
    const Strides dense = contiguous_strides(x.shape);
    op.copy = Scratch(static_cast<std::size_t>(shape_numel(x.shape)) * sizeof(float));
    copy_strided(x.shape, op.copy.data(), dense, DType::f32, x.data, x.strides, DType::f32);
    data = op.copy.as<const float>();
    strides = dense;
    layout = blas_layout(rows, cols, strides[n - 2], strides[n - 1]);
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
  if (batch_count > 1 && b_count == 1 && !ta && (a.strides.back() == 1 || k == 1)) {
    // The rows of op(a) over all batch axes must be equally spaced (row_stride).
    const auto nd = a.shape.size();
    std::int64_t row_stride = m > 1 ? a.strides[nd - 2] : 0;
    std::int64_t expect = m > 1 ? row_stride * m : 0;
    // Rows repeated by a broadcast (stride 0) do not fold into one product.
    bool foldable = m == 1 || row_stride != 0;
    for (std::size_t d = nd - 2; foldable && d-- > 0;) {
      const std::int64_t size = a.shape[d];
      if (size == 1) continue;
      if (row_stride == 0) {
        row_stride = a.strides[d];
      } else if (a.strides[d] != expect) {
        foldable = false;
      }
      expect = a.strides[d] * size;
    }
    if (foldable && row_stride >= std::max<std::int64_t>(k, 1)) {
      const Operand ob = prepare(b, batch);
      gemm(batch_count * m, n, k, 1.0F, {a.data, row_stride, false}, ob.blas, 0.0F, out, n,
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
  // Coalesce batch axes where both operands' strides allow it.
  GemmBatchOffsets offsets;
  Shape cshape;
  Strides csa, csb;
  for (std::size_t d = 0; d < batch.size(); ++d) {
    if (batch[d] == 1) continue;
    if (!cshape.empty() && csa.back() == oa.batch_strides[d] * batch[d] &&
        csb.back() == ob.batch_strides[d] * batch[d]) {
      cshape.back() *= batch[d];
      csa.back() = oa.batch_strides[d];
      csb.back() = ob.batch_strides[d];
      continue;
    }
    cshape.push_back(batch[d]);
    csa.push_back(oa.batch_strides[d]);
    csb.push_back(ob.batch_strides[d]);
  }
  if (cshape.size() > static_cast<std::size_t>(GemmBatchOffsets::kMaxDims)) {
    throw std::invalid_argument(fmt::format("matmul: {} x {}: more than {} batch axes",
                                            to_string(a.shape), to_string(b.shape),
                                            GemmBatchOffsets::kMaxDims));
  }
  offsets.ndim = static_cast<int>(cshape.size());
  for (std::size_t d = 0; d < cshape.size(); ++d) {
    offsets.shape[d] = cshape[d];
    offsets.a_strides[d] = csa[d];
    offsets.b_strides[d] = csb[d];
  }
  gemm_batched(batch_count, m, n, k, 1.0F, oa.blas, ob.blas, offsets, 0.0F, out, n, m * n,
               precision);
}

}  // namespace rig::cpu
