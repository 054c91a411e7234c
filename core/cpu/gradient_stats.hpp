// Whole-model gradient statistics and per-parameter rescaling over the flat
// f32 buffers: the global norm and max |g| (clipping, overflow checks,
// summaries) and LARC's trust ratios.
#pragma once

#include <cstdint>

#include "rig/op_types.hpp"

namespace rig::cpu {

// Of n gradients read from `grads` (f32, or 16-bit unscaled as read).
GradientStats gradient_stats(const GradientSource& grads, std::int64_t n);
void larc(const float* values, float* grads, const FlatSlice* slices, std::int64_t count,
          const LarcOptions& options);

}  // namespace rig::cpu
