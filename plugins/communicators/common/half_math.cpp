#include "half_math.hpp"

#include "rig/half.hpp"

#if defined(__x86_64__)
#include <cpuid.h>
#include <immintrin.h>
#endif

namespace rig_mpi {
namespace {

using rig::bfloat16_bits_to_float;
using rig::float_to_bfloat16_bits;
using rig::float_to_half_bits;
using rig::half_bits_to_float;

#if defined(__x86_64__)
constexpr int kRound = _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC;

[[gnu::target("avx,f16c")]] void add_f16_f16c(const std::uint16_t* a, std::uint16_t* b,
                                              std::int64_t n) {
  std::int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 x = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(a + i)));
    const __m256 y = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b + i)));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(b + i),
                     _mm256_cvtps_ph(_mm256_add_ps(x, y), kRound));
  }
  for (; i < n; ++i) b[i] = float_to_half_bits(half_bits_to_float(a[i]) + half_bits_to_float(b[i]));
}

[[gnu::target("avx,f16c")]] void divide_f16_f16c(std::uint16_t* x, std::int64_t n, float divisor) {
  const __m256 d = _mm256_set1_ps(divisor);
  std::int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 v = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(x + i)));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(x + i),
                     _mm256_cvtps_ph(_mm256_div_ps(v, d), kRound));
  }
  for (; i < n; ++i) x[i] = float_to_half_bits(half_bits_to_float(x[i]) / divisor);
}

// CPUID leaf 1's F16C bit: Clang 14's __builtin_cpu_supports does not know "f16c".
bool has_f16c() {
  static const bool yes = [] {
    unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
    return __builtin_cpu_supports("avx") && __get_cpuid(1, &eax, &ebx, &ecx, &edx) != 0 &&
           (ecx & bit_F16C) != 0;
  }();
  return yes;
}
#endif

}  // namespace

void add_f16(const std::uint16_t* a, std::uint16_t* b, std::int64_t n) {
#if defined(__x86_64__)
  if (has_f16c()) return add_f16_f16c(a, b, n);
#endif
  for (std::int64_t i = 0; i < n; ++i) {
    b[i] = float_to_half_bits(half_bits_to_float(a[i]) + half_bits_to_float(b[i]));
  }
}

// bf16 vectorises as it is; AVX2 where there is one doubles the width.
#if defined(__x86_64__)
#define RIG_MPI_WIDE_CLONES [[gnu::target_clones("avx2", "default")]]
#else
#define RIG_MPI_WIDE_CLONES
#endif

RIG_MPI_WIDE_CLONES void add_bf16(const std::uint16_t* a, std::uint16_t* b, std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i) {
    b[i] = float_to_bfloat16_bits(bfloat16_bits_to_float(a[i]) + bfloat16_bits_to_float(b[i]));
  }
}

void divide_f16(std::uint16_t* x, std::int64_t n, float divisor) {
#if defined(__x86_64__)
  if (has_f16c()) return divide_f16_f16c(x, n, divisor);
#endif
  for (std::int64_t i = 0; i < n; ++i)
    x[i] = float_to_half_bits(half_bits_to_float(x[i]) / divisor);
}

RIG_MPI_WIDE_CLONES void divide_bf16(std::uint16_t* x, std::int64_t n, float divisor) {
  for (std::int64_t i = 0; i < n; ++i) {
    x[i] = float_to_bfloat16_bits(bfloat16_bits_to_float(x[i]) / divisor);
  }
}

}  // namespace rig_mpi
