// 2-D convolution kernels (f32, contiguous NCHW or, with Conv2dShape::channels_last,
// NHWC), forward and backward.
#pragma once

#include <cstdint>

#include "backend/kernel_args.hpp"

namespace rig::cpu {

using backend::Conv2dShape;

// y = conv(x, w) + b (b null when !s.bias).
void conv2d_forward(const Conv2dShape& s, const float* x, const float* w, const float* b, float* y);

// The gradients of the wanted inputs (a null pointer: not wanted) from dy.
void conv2d_backward(const Conv2dShape& s, const float* x, const float* w, const float* dy,
                     float* dx, float* dw, float* db);

}  // namespace rig::cpu
