// Explicit SIMD for the row kernels whose reductions GCC does not vectorise
// by itself (float sums and maxima need reassociation; compare-and-select
// under -ftrapping-math is not if-converted for AVX2). A kernel is written
// once as a template over W float lanes (GCC vector extensions) and
// instantiated three times: W = 16 compiled for x86-64-v4 (AVX-512), W = 8
// for x86-64-v3 (AVX2 + FMA), W = 4 for the baseline; simd_dispatch picks the
// best the running CPU supports. Everything a kernel calls must be inlined
// into those instantiations (RIG_SIMD_INLINE, RIG_SIMD_LAMBDA): a call that is
// not would be compiled for the baseline ISA and run the wide vectors
// element by element. So vectors never cross a call boundary either (which
// is what -Wpsabi warns about).
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <utility>

#pragma GCC diagnostic ignored "-Wpsabi"

// After the pragma: its templates return vectors too (always inlined).
#include "rig/math/activations.hpp"

#define RIG_SIMD_INLINE inline __attribute__((always_inline))
// For lambdas passed to SIMD helpers: `[](const F& v) RIG_SIMD_LAMBDA { ... }`.
#define RIG_SIMD_LAMBDA __attribute__((always_inline))

namespace rig::cpu::simd {

// The vector types, spelled out per width (GCC drops vector_size when the
// size depends on a template parameter).
template <int W>
struct VecTypes;
// Each also reduces a vector to 4 lanes by halving (shuffles stay in registers).
template <>
struct VecTypes<4> {
  using F = float __attribute__((vector_size(16)));
  using I = std::int32_t __attribute__((vector_size(16)));
  static RIG_SIMD_INLINE F to4_sum(const F& v) { return v; }
  static RIG_SIMD_INLINE F to4_max(const F& v) { return v; }
};
template <>
struct VecTypes<8> {
  using F = float __attribute__((vector_size(32)));
  using I = std::int32_t __attribute__((vector_size(32)));
  using F4 = VecTypes<4>::F;
  static RIG_SIMD_INLINE F4 lo(const F& v) { return __builtin_shufflevector(v, v, 0, 1, 2, 3); }
  static RIG_SIMD_INLINE F4 hi(const F& v) { return __builtin_shufflevector(v, v, 4, 5, 6, 7); }
  static RIG_SIMD_INLINE F4 to4_sum(const F& v) { return lo(v) + hi(v); }
  static RIG_SIMD_INLINE F4 to4_max(const F& v) { return lo(v) > hi(v) ? lo(v) : hi(v); }
};
template <>
struct VecTypes<16> {
  using F = float __attribute__((vector_size(64)));
  using I = std::int32_t __attribute__((vector_size(64)));
  using F8 = VecTypes<8>::F;
  using F4 = VecTypes<4>::F;
  static RIG_SIMD_INLINE F8 lo(const F& v) {
    return __builtin_shufflevector(v, v, 0, 1, 2, 3, 4, 5, 6, 7);
  }
  static RIG_SIMD_INLINE F8 hi(const F& v) {
    return __builtin_shufflevector(v, v, 8, 9, 10, 11, 12, 13, 14, 15);
  }
  static RIG_SIMD_INLINE F4 to4_sum(const F& v) { return VecTypes<8>::to4_sum(lo(v) + hi(v)); }
  static RIG_SIMD_INLINE F4 to4_max(const F& v) {
    const F8 a = lo(v);
    const F8 b = hi(v);
    return VecTypes<8>::to4_max(a > b ? a : b);
  }
};

template <int W>
struct Vec {
  using F = typename VecTypes<W>::F;
  using I = typename VecTypes<W>::I;
  static constexpr int kLanes = W;

  static RIG_SIMD_INLINE F splat(float v) { return F{} + v; }
  static RIG_SIMD_INLINE F load(const float* p) {
    F v;
    std::memcpy(&v, p, sizeof v);
    return v;
  }
  static RIG_SIMD_INLINE void store(float* p, const F& v) { std::memcpy(p, &v, sizeof v); }
  // The first n (< W) elements of p, the rest `fill`.
  static RIG_SIMD_INLINE F load_partial(const float* p, std::int64_t n, float fill) {
    F v = splat(fill);
    for (std::int64_t l = 0; l < n; ++l) v[l] = p[l];
    return v;
  }
  static RIG_SIMD_INLINE void store_partial(float* p, const F& v, std::int64_t n) {
    for (std::int64_t l = 0; l < n; ++l) p[l] = v[l];
  }
  static RIG_SIMD_INLINE F max(const F& a, const F& b) { return a > b ? a : b; }
  static RIG_SIMD_INLINE float sum(const F& v) {
    const auto q = VecTypes<W>::to4_sum(v);
    return (q[0] + q[2]) + (q[1] + q[3]);
  }
  static RIG_SIMD_INLINE float max_of(const F& v) {
    const auto q = VecTypes<W>::to4_max(v);
    const float a = q[0] > q[2] ? q[0] : q[2];
    const float b = q[1] > q[3] ? q[1] : q[3];
    return a > b ? a : b;
  }

  // e^x (Cephes expf polynomial after x = n ln2 + r; 2^n built in the
  // exponent bits): a few ulp; e^-inf = 0, e^inf = inf, NaN stays NaN, and
  // results below FLT_MIN are flushed to 0.
  static RIG_SIMD_INLINE F exp(const F& x) {
    const F hi = splat(88.3762626647949F);
    const F lo = splat(-87.3365447505531F);
    F xc = x > hi ? hi : x;
    xc = xc < lo ? lo : xc;
    constexpr float kRound = 12582912.0F;  // 1.5 * 2^23: adding it rounds to an integer
    const F t = xc * 1.44269504088896341F + kRound;
    const F n = t - kRound;
    F r = xc - n * 0.693359375F;
    r = r - n * -2.12194440e-4F;
    F p = splat(1.9875691500E-4F);
    p = p * r + 1.3981999507E-3F;
    p = p * r + 8.3334519073E-3F;
    p = p * r + 4.1665795894E-2F;
    p = p * r + 1.6666665459E-1F;
    p = p * r + 5.0000001201E-1F;
    const F er = p * r * r + r + 1.0F;
    // The bits of t = n + 1.5 * 2^23 hold the integer n in the low mantissa bits.
    const I bits = ((I)t - (I)splat(kRound) + 127) << 23;
    F y = er * (F)bits;  // a vector cast reinterprets the bits
    y = x > hi ? splat(INFINITY) : y;
    y = x < lo ? splat(0.0F) : y;
    return x != x ? x : y;
  }

  // Correctly rounded square root, lane by lane. GCC turns the loop into one
  // vsqrtps only where errno need not be set: compile the kernel's file with
  // -fno-math-errno (core/CMakeLists.txt), otherwise this is scalar code.
  static RIG_SIMD_INLINE F sqrt(const F& x) {
    F r;
    for (int l = 0; l < W; ++l) r[l] = __builtin_sqrtf(x[l]);
    return r;
  }

  static RIG_SIMD_INLINE F abs(const F& x) { return (F)((I)x & 0x7fffffff); }
  static RIG_SIMD_INLINE F copysign(const F& magnitude, const F& sign) {
    return (F)(((I)magnitude & 0x7fffffff) | ((I)sign & static_cast<std::int32_t>(0x80000000U)));
  }

  // tanh: odd polynomial below 0.625 (Cephes tanhf), 1 - 2 / (e^{2|x|} + 1) above.
  static RIG_SIMD_INLINE F tanh(const F& x) {
    const F ax = abs(x);
    const F z = x * x;
    F p = splat(-5.70498872745E-3F);
    p = p * z + 2.06390887954E-2F;
    p = p * z - 5.37397155531E-2F;
    p = p * z + 1.33314422036E-1F;
    p = p * z - 3.33332819422E-1F;
    const F small = p * z * x + x;
    const F e = exp(ax * 2.0F);
    const F big = copysign(1.0F - 2.0F / (e + 1.0F), x);
    return ax < 0.625F ? small : big;
  }

  static RIG_SIMD_INLINE F sigmoid(const F& x) { return math::sigmoid<Vec>(x); }

  // The activations of rig/math/activations.hpp, this vector type being the policy.
  static RIG_SIMD_INLINE F erf(const F& x) { return math::erf_rational(x); }
  static RIG_SIMD_INLINE F gelu(const F& x) { return math::gelu<Vec>(x); }
  static RIG_SIMD_INLINE F gelu_grad(const F& x) { return math::gelu_grad<Vec>(x); }
  static RIG_SIMD_INLINE F gelu_tanh(const F& x) { return math::gelu_tanh<Vec>(x); }
  static RIG_SIMD_INLINE F gelu_tanh_grad(const F& x) { return math::gelu_tanh_grad<Vec>(x); }
};

// The lane count kernels run with: the widest the running CPU supports, 16
// (AVX-512 F/BW/DQ/VL), 8 (AVX2 + FMA) or 4, unless lowered by
// RIG_SIMD_WIDTH=4|8 in the environment or by set_simd_width.
int simd_width();
int max_simd_width();  // what the CPU supports
// Sets the width (rounded down to a supported one); returns the width in effect.
// For tests that cover every code path on one machine.
int set_simd_width(int width);

namespace detail {
template <template <int> class Kernel, class... Args>
__attribute__((target("arch=x86-64-v4"))) void run16(Args... args) {
  Kernel<16>::run(args...);
}
template <template <int> class Kernel, class... Args>
__attribute__((target("arch=x86-64-v3"))) void run8(Args... args) {
  Kernel<8>::run(args...);
}
template <template <int> class Kernel, class... Args>
void run4(Args... args) {
  Kernel<4>::run(args...);
}
}  // namespace detail

// Runs Kernel<W>::run(args...) (an always-inline static function) compiled
// for the widest W the CPU supports.
template <template <int> class Kernel, class... Args>
void dispatch(Args... args) {
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
  const int width = simd_width();
  if (width == 16) return detail::run16<Kernel, Args...>(args...);
  if (width == 8) return detail::run8<Kernel, Args...>(args...);
#endif
  detail::run4<Kernel, Args...>(args...);
}

}  // namespace rig::cpu::simd
