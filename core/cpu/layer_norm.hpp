// Fused layer normalisation over the last axis of a contiguous [rows, d] f32
// tensor: one pass per row forward (saving mean and 1/std for backward) and a
// fused backward for dx, dgamma and dbeta.
#pragma once

#include <cstdint>

namespace rig::cpu {

// y = (x - mean) * rstd * gamma + beta per row; gamma/beta may be null (1, 0).
// mean and rstd [rows] receive the statistics (biased variance).
void layer_norm_forward(const float* x, const float* gamma, const float* beta, float* y,
                        float* mean, float* rstd, std::int64_t rows, std::int64_t d, float eps);

// dx (may be null), dgamma and dbeta (may be null; overwritten) from the
// upstream gradient g. `scratch` holds layer_norm_scratch_size floats.
void layer_norm_backward(const float* x, const float* gamma, const float* mean, const float* rstd,
                         const float* g, float* dx, float* dgamma, float* dbeta, std::int64_t rows,
                         std::int64_t d, float* scratch);
std::int64_t layer_norm_scratch_size(std::int64_t rows, std::int64_t d);

}  // namespace rig::cpu
