// Comparisons giving u8 (1 true, 0 false) over a strided plan.
#pragma once

#include <cstdint>

#include "backend/kernel_args.hpp"
#include "cpu/strided.hpp"

namespace rig::cpu {

// out (operand 0) = a (operand 1) == b (operand 2), a < b, or a != scalar (in
// double, so 0.5 against an integer tensor is never rounded). a and b have
// `dtype`: f32, i32, i64 or u8.
void compare(backend::Compare op, const StridedPlan<3>& plan, DType dtype, const void* a,
             const void* b, double scalar, std::uint8_t* out);

}  // namespace rig::cpu
