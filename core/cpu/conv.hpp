// 2-D convolution kernels (f32, or bf16 where the CPU has it; contiguous NCHW
// or, with Conv2dShape::channels_last, NHWC), forward and backward.
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

// Whether this CPU runs bf16 convolutions natively (AVX512-BF16 or AMX).
bool conv2d_bf16_supported();

// The same without bias on bf16 x, w, y and dy (bits of bfloat16), where
// conv2d_bf16_supported(): products accumulated in f32, y rounded once; dx
// and dw formed in f32, added to what they hold where `accumulate` says, and
// rounded once. Either may be null (not wanted).
void conv2d_forward_bf16(const Conv2dShape& s, const std::uint16_t* x, const std::uint16_t* w,
                         std::uint16_t* y);
void conv2d_backward_bf16(const Conv2dShape& s, const std::uint16_t* x, const std::uint16_t* w,
                          const std::uint16_t* dy, std::uint16_t* dx, std::uint16_t* dw,
                          const backend::ConvGradAccumulation& accumulate);

}  // namespace rig::cpu
