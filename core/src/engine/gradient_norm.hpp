// Statistics of the flat f32 gradient buffer (global L2 norm, largest |g|), and clipping.
#pragma once

#include "rig/op_types.hpp"
#include "rig/parameter_store.hpp"

namespace rig::engine {

// The global L2 norm and the largest |g| of params.grads(), in one pass
// (+inf for both when any gradient is inf or NaN): ops::gradient_stats.
GradientStats gradient_stats(const ParameterStore& params);

// Scales grads() by max_norm / (norm + 1e-6) when norm > max_norm (as
// torch.nn.utils.clip_grad_norm_ and OpenSeq2Seq's clip_by_global_norm).
void clip_gradients(ParameterStore& params, double norm, double max_norm);

}  // namespace rig::engine
