#include "cpu/simd.hpp"

#include <algorithm>
#include <atomic>
#include <cstdlib>

namespace rig::cpu::simd {

namespace {

int detect() {
  int width = 4;
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) width = 8;
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
      __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl")) {
    width = 16;
  }
#endif
  return width;
}

int supported(int requested) {
  const int best = max_simd_width();
  if (requested >= 16) return std::min(16, best);
  if (requested >= 8) return std::min(8, best);
  return 4;
}

std::atomic<int>& current() {
  static std::atomic<int> width{[] {
    const char* env = std::getenv("RIG_SIMD_WIDTH");
    return env != nullptr ? supported(std::atoi(env)) : max_simd_width();
  }()};
  return width;
}

}  // namespace

int max_simd_width() {
  static const int width = detect();
  return width;
}

int simd_width() {
  return current().load(std::memory_order_relaxed);
}

int set_simd_width(int width) {
  const int w = supported(width);
  current().store(w, std::memory_order_relaxed);
  return w;
}

}  // namespace rig::cpu::simd
