// Gradient clipping by the global norm (ops::gradient_stats computes it).
#pragma once

#include "rig/op_types.hpp"
#include "rig/parameter_store.hpp"

namespace rig::engine {

// Scales grads() by max_norm / (norm + 1e-6) when norm > max_norm (as
// torch.nn.utils.clip_grad_norm_ and OpenSeq2Seq's clip_by_global_norm).
void clip_gradients(ParameterStore& params, double norm, double max_norm);

}  // namespace rig::engine
