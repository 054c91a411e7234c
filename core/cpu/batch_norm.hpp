// Batch-norm kernels over contiguous f32 data viewed as [n, c, inner]
// (inner = H * W for NCHW, 1 for [N, C]); statistics per channel over n * inner.
#pragma once

#include <cstdint>

#include "backend/kernel_args.hpp"

namespace rig::cpu {

using backend::BatchNormShape;

// Per-channel mean and biased variance.
void batch_norm_stats(const BatchNormShape& s, const float* x, float* mean, float* var);

using backend::BatchNormPrepare;
void batch_norm_prepare(const BatchNormPrepare& args);

// y = x * scale[c] + shift[c].
void batch_norm_apply(const BatchNormShape& s, const float* x, const float* scale,
                      const float* shift, float* y);

// Gradients of y = (x - mean) * invstd * gamma + beta (gamma null: 1). With
// `batch_stats` (training) mean and invstd are functions of x and dx has the
// full batch-norm form; otherwise they are constants (eval). dgamma = sum(dy *
// xhat) and dbeta = sum(dy) per channel; any of dx, dgamma, dbeta may be null.
void batch_norm_backward(const BatchNormShape& s, const float* x, const float* dy,
                         const float* mean, const float* invstd, const float* gamma,
                         bool batch_stats, float* dx, float* dgamma, float* dbeta);

}  // namespace rig::cpu
