// Loss-scaling's unscale and overflow check over the flat gradient buffer.
#pragma once

#include <cstdint>

#include "rig/dtype.hpp"

namespace rig::cpu {

// master[i] = widen(src[i]) * scale (in place when master == src; nothing is
// written when master is null). Returns max |master[i]|, or +inf when any
// product is inf or NaN. src is f32, f16 or bf16.
float unscale(std::int64_t n, DType src_dtype, const void* src, float* master, float scale);

}  // namespace rig::cpu
