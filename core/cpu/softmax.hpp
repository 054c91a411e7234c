// Fused softmax / log-softmax over the rows of a contiguous [rows, n] f32
// tensor, with an optional u8 keep-mask (1 keep, 0 excluded): one kernel per
// row (max, exp and sum, normalise) while the row is in L1.
#pragma once

#include <cstdint>

#include "cpu/strided.hpp"

namespace rig::cpu {

// `plan` is a row plan (make_row_plan) over operands 0: x and y (contiguous,
// same layout), 1: mask (strides into `mask`; ignored when mask is null). A
// row with nothing kept gives zeros (softmax) or -inf (log_softmax).
void softmax_forward(const StridedPlan<2>& plan, const float* x, const std::uint8_t* mask, float* y,
                     bool log);

// dx from the forward output y and the upstream gradient g, all [rows, n]:
// softmax: dx = y (g - <g, y>); log_softmax: dx = g - e^y sum(g) over the kept
// entries (y > -inf), and 0 where y = -inf (excluded entries).
void softmax_backward(const float* y, const float* g, float* dx, std::int64_t rows, std::int64_t n,
                      bool log);

}  // namespace rig::cpu
