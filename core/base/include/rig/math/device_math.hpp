// The math policy of the CUDA kernels (and of the SIMT emulator, which runs
// them on the host): scalar floats with the C library's functions, which
// CUDA provides on the device (expf and tanhf within 2 ulp there, the host's
// glibc within 1; sqrtf correctly rounded on both).
#pragma once

#include <cmath>

#include "rig/hd.hpp"

namespace rig::math {

struct DeviceMath {
  using F = float;
  static RIG_HD_INLINE float exp(float x) { return ::expf(x); }
  static RIG_HD_INLINE float log(float x) { return ::logf(x); }
  static RIG_HD_INLINE float tanh(float x) { return ::tanhf(x); }
  static RIG_HD_INLINE float sqrt(float x) { return ::sqrtf(x); }
  // The CPU's vector select, so a NaN operand gives the same answer.
  static RIG_HD_INLINE float max(float a, float b) { return a > b ? a : b; }
};

}  // namespace rig::math
