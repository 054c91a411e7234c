// Element-wise f16 / bf16 arithmetic for the reductions: computed in f32 and
// rounded to nearest even, exactly as rig's CPU ops do (core/cpu/half.hpp).
// f16 uses the F16C instructions where the CPU has them (rig's portable
// conversion does not vectorise: 10x slower, more than the transfer itself).
#pragma once

#include <cstdint>

namespace rig_mpi {

// b[i] = a[i] + b[i]
void add_f16(const std::uint16_t* a, std::uint16_t* b, std::int64_t n);
void add_bf16(const std::uint16_t* a, std::uint16_t* b, std::int64_t n);
// x[i] = x[i] / divisor
void divide_f16(std::uint16_t* x, std::int64_t n, float divisor);
void divide_bf16(std::uint16_t* x, std::int64_t n, float divisor);

}  // namespace rig_mpi
