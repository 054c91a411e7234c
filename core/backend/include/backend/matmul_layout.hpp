// The layout rules of Backend::matmul that every back end shares: how a GEMM
// reads a matrix operand in place, when a batched product folds into one
// product, and the batch axes merged where both operands allow. Pure
// functions of shapes and strides; the back ends run the products.
#pragma once

#include <algorithm>
#include <cstdint>
#include <optional>
#include <vector>

#include "backend/kernel_args.hpp"

namespace rig::backend {

// How a GEMM reads op(X) from X's last two axes (rows r, cols c, strides s0,
// s1): as stored (row-major with leading dimension s0) or as the transpose of
// a row-major matrix (leading dimension s1): `flip` inverts the operand's
// transpose flag. nullopt: neither (the operand needs a contiguous copy).
struct MatrixLayout {
  bool flip = false;
  std::int64_t ld = 1;
};

inline std::optional<MatrixLayout> matrix_layout(std::int64_t r, std::int64_t c, std::int64_t s0,
                                                 std::int64_t s1) {
  if ((c == 1 || s1 == 1) && (r == 1 || s0 >= std::max<std::int64_t>(c, 1))) {
    return MatrixLayout{false, r == 1 ? std::max<std::int64_t>(c, 1) : s0};
  }
  if ((r == 1 || s0 == 1) && (c == 1 || s1 >= std::max<std::int64_t>(r, 1))) {
    return MatrixLayout{true, c == 1 ? std::max<std::int64_t>(r, 1) : s1};
  }
  return std::nullopt;
}

// When a (op(a) not transposed, [..., m, k]) is a view of [B*m, k] rows
// equally spaced, the row stride: then a batched product with a shared b is
// one product of B*m rows. nullopt otherwise (rows repeated by a broadcast,
// stride 0, never fold).
inline std::optional<std::int64_t> folded_row_stride(const MatrixOperand& a, std::int64_t m,
                                                     std::int64_t k) {
  if (a.transpose || !(a.strides.back() == 1 || k == 1)) return std::nullopt;
  const std::size_t nd = a.shape.size();
  std::int64_t row_stride = m > 1 ? a.strides[nd - 2] : 0;
  std::int64_t expect = m > 1 ? row_stride * m : 0;
  if (m > 1 && row_stride == 0) return std::nullopt;
  for (std::size_t d = nd - 2; d-- > 0;) {
    if (a.shape[d] == 1) continue;
    if (row_stride == 0) {
      row_stride = a.strides[d];
    } else if (a.strides[d] != expect) {
      return std::nullopt;
    }
    expect = a.strides[d] * a.shape[d];
  }
  if (row_stride < std::max<std::int64_t>(k, 1)) return std::nullopt;
  return row_stride;
}

// One merged batch axis: its size and both operands' strides over it.
struct BatchAxis {
  std::int64_t size = 1, stride_a = 0, stride_b = 0;
};

// The output's batch axes (size 1 dropped), adjacent ones merged where both
// operands step through them as through one axis; outermost first.
inline std::vector<BatchAxis> merged_batch_axes(const Shape& batch, const Strides& strides_a,
                                                const Strides& strides_b) {
  std::vector<BatchAxis> axes;
  for (std::size_t d = 0; d < batch.size(); ++d) {
    if (batch[d] == 1) continue;
    if (!axes.empty() && axes.back().stride_a == strides_a[d] * batch[d] &&
        axes.back().stride_b == strides_b[d] * batch[d]) {
      axes.back() = {axes.back().size * batch[d], strides_a[d], strides_b[d]};
      continue;
    }
    axes.push_back({batch[d], strides_a[d], strides_b[d]});
  }
  return axes;
}

}  // namespace rig::backend
