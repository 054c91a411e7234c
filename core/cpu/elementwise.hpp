// Elementwise f32 kernels: unary maps and their derivatives, broadcasting
// binary arithmetic, and the fused bias + activation pass of linear layers.
// All run threaded over the caller's buffers; none allocates.
#pragma once

#include <cstdint>

#include "backend/kernel_args.hpp"
#include "cpu/strided.hpp"
#include "rig/op_types.hpp"

namespace rig::cpu {

using backend::Binary;
using backend::Unary;
using backend::unary_of;

void unary(Unary op, const float* x, float* y, std::int64_t n, float scalar = 0.0F);
// dx[i] = g[i] * f'(x[i]); `x` is the input, `y` the output f(x) (some
// derivatives read one, some the other). dx may alias g.
void unary_backward(Unary op, const float* g, const float* x, const float* y, float* dx,
                    std::int64_t n, float scalar = 0.0F);

// out = a op b over a plan whose operands are 0: out, 1: a, 2: b.
void binary(Binary op, const StridedPlan<3>& plan, const float* a, const float* b, float* out);

// out = x over a plan whose operands are 0: out, 1: x (a strided / broadcast copy).
void strided_copy(const StridedPlan<2>& plan, const float* x, float* out);

// Linear's epilogue on y [rows, cols] in place: y = act(y + bias). `bias`
// may be null. For gelu, whose derivative needs the pre-activation, pass
// `pre` [rows, cols] to keep y + bias there when a backward pass will follow;
// otherwise pass null.
void bias_activation(float* y, float* pre, const float* bias, std::int64_t rows, std::int64_t cols,
                     Activation activation);

// Linear's backward epilogue: dz = g * act'(.) from `saved` (the output y,
// or the pre-activation for gelu) into dz (may alias g; unused for none), and
// when db is non-null, db[c] = sum over rows of dz[r, c] (overwritten).
// relu_scale (relu only): dz = saved > 0 ? g * relu_scale : 0, the backward
// of relu followed by dropout when `saved` is the dropped output.
void activation_backward(Activation activation, const float* g, const float* saved, float* dz,
                         float* db, std::int64_t rows, std::int64_t cols, float relu_scale = 1.0F);

// The same, but dz is written only rounded to bfloat16 bits (nearest even,
// as round_operand), for products at bf16 precision: one pass instead of
// writing f32 dz and rounding it again; db still sums the unrounded dz. For
// activation none, dz_bf16 is g rounded.
void activation_backward_bf16(Activation activation, const float* g, const float* saved,
                              std::uint16_t* dz_bf16, float* db, std::int64_t rows,
                              std::int64_t cols, float relu_scale = 1.0F);

}  // namespace rig::cpu
