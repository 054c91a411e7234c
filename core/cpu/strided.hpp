// Row-by-row iteration of a StridedPlan on the CPU (the plans themselves are
// device-neutral: backend/strided_plan.hpp).
#pragma once

#include <array>
#include <cstdint>

#include "backend/strided_plan.hpp"

namespace rig::cpu {

using backend::broadcast_strides;
using backend::kMaxStridedDims;
using backend::make_row_plan;
using backend::make_strided_plan;
using backend::StridedPlan;

// Calls fn(offsets) for outer rows [begin, end): offsets[k] is operand k's
// element offset of the row start. Rows are the plan's shape without its
// last axis, in row-major order.
template <int N, class Fn>
void for_each_row(const StridedPlan<N>& plan, std::int64_t begin, std::int64_t end, Fn&& fn) {
  if (begin >= end) return;
  const int outer_dims = plan.ndim - 1;
  std::array<std::int64_t, kMaxStridedDims> index{};
  std::array<std::int64_t, N> offsets{};
  // Unravel `begin` once, then step like an odometer.
  std::int64_t rest = begin;
  for (int d = outer_dims - 1; d >= 0; --d) {
    index[d] = rest % plan.shape[d];
    rest /= plan.shape[d];
    for (int k = 0; k < N; ++k) offsets[k] += index[d] * plan.strides[k][d];
  }
  for (std::int64_t row = begin; row < end; ++row) {
    fn(offsets);
    for (int d = outer_dims - 1; d >= 0; --d) {
      if (++index[d] < plan.shape[d]) {
        for (int k = 0; k < N; ++k) offsets[k] += plan.strides[k][d];
        break;
      }
      for (int k = 0; k < N; ++k) offsets[k] -= (plan.shape[d] - 1) * plan.strides[k][d];
      index[d] = 0;
    }
  }
}

}  // namespace rig::cpu
