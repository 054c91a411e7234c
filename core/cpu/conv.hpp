// 2-D convolution kernels (NCHW f32, contiguous), forward and backward.
#pragma once

#include <cstdint>

namespace rig::cpu {

struct Conv2dShape {
  std::int64_t n = 0, c_in = 0, h = 0, w = 0;          // x [n, c_in, h, w]
  std::int64_t c_out = 0, kernel_h = 0, kernel_w = 0;  // weight [c_out, c_in / groups, kh, kw]
  std::int64_t out_h = 0, out_w = 0;                   // y [n, c_out, out_h, out_w]
  std::int64_t stride_h = 1, stride_w = 1, pad_h = 0, pad_w = 0, dilation_h = 1, dilation_w = 1;
  std::int64_t groups = 1;
  bool bias = false;
};

// y = conv(x, w) + b (b null when !s.bias).
void conv2d_forward(const Conv2dShape& s, const float* x, const float* w, const float* b, float* y);

// The gradients of the wanted inputs (a null pointer: not wanted) from dy.
void conv2d_backward(const Conv2dShape& s, const float* x, const float* w, const float* dy,
                     float* dx, float* dw, float* db);

}  // namespace rig::cpu
