// Strided copy, cast, fill and accumulate over n-d tensors on the CPU: what
// Tensor's contiguous(), to(), copy_from() and autograd's gradient sums run.
// Pointers point at element 0 of each operand; strides are in elements.
#pragma once

#include "rig/dtype.hpp"
#include "rig/shape.hpp"

namespace rig::cpu {

// dst = src converted to dst's dtype (floats to integers: truncated toward
// zero, saturated, NaN -> 0; integers to integers: wrapped; narrowing to
// f16/bf16 rounds to nearest even). The operands must not overlap.
void copy_strided(const Shape& shape, void* dst, const Strides& dst_strides, DType dst_dtype,
                  const void* src, const Strides& src_strides, DType src_dtype);

// dst = value converted to dst's dtype as above.
void fill_strided(const Shape& shape, void* dst, const Strides& dst_strides, DType dst_dtype,
                  float value);

// dst += src for floating dtypes (summed in f32). dst may repeat elements
// (stride 0 on a broadcast axis): then it sums everything that maps there.
void add_strided(const Shape& shape, void* dst, const Strides& dst_strides, DType dst_dtype,
                 const void* src, const Strides& src_strides, DType src_dtype);

}  // namespace rig::cpu
