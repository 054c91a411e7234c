// 2-D pooling kernels over contiguous NCHW f32 planes or NHWC images
// (Pool2dShape::channels_last), forward and backward. Each plane (n, c) is
// computed in the same order in both layouts: NHWC gives NCHW's bits on the
// transposed data.
#pragma once

#include <cstdint>

#include "backend/kernel_args.hpp"

namespace rig::cpu {

using backend::Pool2dShape;

// Window maximum (padding never wins; NaN propagates as in PyTorch). `index`
// (same size as y, may be null) receives each maximum's index within its
// plane: the first maximum in row-major order, or the last NaN.
void max_pool2d_forward(const Pool2dShape& s, const float* x, float* y, std::int32_t* index);
// dx = dy routed to the recorded indices.
void max_pool2d_backward(const Pool2dShape& s, const std::int32_t* index, const float* dy,
                         float* dx);

// Window mean with padding counted in the divisor (count_include_pad).
void avg_pool2d_forward(const Pool2dShape& s, const float* x, float* y);
void avg_pool2d_backward(const Pool2dShape& s, const float* dy, float* dx);

// y[p] = mean of plane p (`size` elements); dx[p][i] = dy[p] / size. x and dx
// are [planes / channels, size, channels], plane p = n * channels + c:
// channels 1 for [planes, size] (NCHW), C for [N, size, C] (NHWC).
void global_avg_pool_forward(std::int64_t planes, std::int64_t size, std::int64_t channels,
                             const float* x, float* y);
void global_avg_pool_backward(std::int64_t planes, std::int64_t size, std::int64_t channels,
                              const float* dy, float* dx);

}  // namespace rig::cpu
