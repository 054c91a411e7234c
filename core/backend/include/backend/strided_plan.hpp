// Iteration plans over N operands that share one (broadcast) shape but have
// their own element strides (0 on broadcast axes): pure shape arithmetic that
// the ops compute and every backend's strided kernels read. Axes are coalesced where every
// operand allows it, so contiguous and simply broadcast cases become one or
// two flat loops; the innermost axis is left to a vectorised row kernel.
#pragma once

#include <array>
#include <cstdint>
#include <stdexcept>

#include "rig/shape.hpp"

namespace rig::backend {

inline constexpr int kMaxStridedDims = 16;

template <int N>
struct StridedPlan {
  int ndim = 0;  // >= 1 after make_strided_plan; the last axis is the inner one
  std::array<std::int64_t, kMaxStridedDims> shape{};
  std::array<std::array<std::int64_t, kMaxStridedDims>, N> strides{};

  std::int64_t inner() const { return shape[ndim - 1]; }
  std::int64_t outer() const {
    std::int64_t n = 1;
    for (int d = 0; d + 1 < ndim; ++d) n *= shape[d];
    return n;
  }
  std::int64_t inner_stride(int operand) const { return strides[operand][ndim - 1]; }
};

// `strides[k]` has shape.size() entries for operand k (0 where it broadcasts).
template <int N>
StridedPlan<N> make_strided_plan(const Shape& shape, const std::array<const Strides*, N>& strides) {
  StridedPlan<N> plan;
  // Walk from the innermost axis outwards, merging an axis into the current
  // one when every operand's stride continues it. Size-1 axes are dropped.
  std::array<std::int64_t, kMaxStridedDims> rshape{};
  std::array<std::array<std::int64_t, kMaxStridedDims>, N> rstrides{};
  int n = 0;
  for (int d = static_cast<int>(shape.size()) - 1; d >= 0; --d) {
    const std::int64_t size = shape[static_cast<std::size_t>(d)];
    if (size == 1) continue;
    if (n > 0) {
      bool mergeable = true;
      for (int k = 0; k < N; ++k) {
        const std::int64_t s = (*strides[k])[static_cast<std::size_t>(d)];
        if (s != rstrides[k][n - 1] * rshape[n - 1]) mergeable = false;
      }
      if (mergeable) {
        rshape[n - 1] *= size;
        continue;
      }
    }
    if (n == kMaxStridedDims) throw std::invalid_argument("too many dimensions for a strided loop");
    rshape[n] = size;
    for (int k = 0; k < N; ++k) rstrides[k][n] = (*strides[k])[static_cast<std::size_t>(d)];
    ++n;
  }
  if (n == 0) {  // a single element (or a shape of ones)
    rshape[0] = 1;
    for (int k = 0; k < N; ++k) rstrides[k][0] = 0;
    n = 1;
  }
  plan.ndim = n;
  for (int d = 0; d < n; ++d) {
    plan.shape[d] = rshape[n - 1 - d];
    for (int k = 0; k < N; ++k) plan.strides[k][d] = rstrides[k][n - 1 - d];
  }
  return plan;
}

// A plan whose last axis is exactly the row axis (never merged with the
// leading axes), so that for_each_row visits the rows of a [..., row_len]
// tensor: `shape`/`strides` describe the leading axes only.
template <int N>
StridedPlan<N> make_row_plan(const Shape& shape, const std::array<const Strides*, N>& strides,
                             std::int64_t row_len, const std::array<std::int64_t, N>& row_strides) {
  StridedPlan<N> plan = make_strided_plan<N>(shape, strides);
  if (plan.ndim == kMaxStridedDims) {
    throw std::invalid_argument("too many dimensions for a strided loop");
  }
  plan.shape[plan.ndim] = row_len;
  for (int k = 0; k < N; ++k) plan.strides[k][plan.ndim] = row_strides[k];
  ++plan.ndim;
  return plan;
}

// Strides of a tensor of `shape`/`strides` broadcast to `out_shape` (leading
// axes added, size-1 axes given stride 0). The shapes must be compatible.
inline Strides broadcast_strides(const Shape& shape, const Strides& strides,
                                 const Shape& out_shape) {
  Strides result(out_shape.size(), 0);
  const std::size_t lead = out_shape.size() - shape.size();
  for (std::size_t d = 0; d < shape.size(); ++d) {
    result[lead + d] = shape[d] == 1 ? 0 : strides[d];
  }
  return result;
}

}  // namespace rig::backend
