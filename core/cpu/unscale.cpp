#include "cpu/unscale.hpp"

#include <algorithm>
#include <atomic>

#include "cpu/parallel.hpp"
#include "rig/half.hpp"
#include "rig/math/bits.hpp"

namespace rig::cpu {

namespace {

constexpr std::int64_t kGrain = 1 << 15;

// The maximum is taken over the bit patterns of |x|, which order like the
// values for finite x and are >= 0x7f800000 for inf and NaN: an integer
// reduction that vectorises (a float max with NaN would not).
template <class Src, class Widen>
float unscale_into(std::int64_t n, const Src* src, float* master, float s, Widen widen) {
  std::atomic<std::uint32_t> amax{0};
  parallel_for(n, kGrain, [&](std::int64_t begin, std::int64_t end) {
    std::uint32_t m = 0;
    if (master != nullptr) {
      for (std::int64_t i = begin; i < end; ++i) {
        const float g = widen(src[i]) * s;
        master[i] = g;
        m = std::max(m, math::abs_bits(g));
      }
    } else {
      for (std::int64_t i = begin; i < end; ++i) {
        m = std::max(m, math::abs_bits(widen(src[i]) * s));
      }
    }
    std::uint32_t seen = amax.load(std::memory_order_relaxed);
    while (m > seen && !amax.compare_exchange_weak(seen, m, std::memory_order_relaxed)) {
    }
  });
  return math::amax_of_abs_bits(amax.load());
}

}  // namespace

float unscale(std::int64_t n, DType src_dtype, const void* src, float* master, float scale) {
  switch (src_dtype) {
    case DType::f16:
      return unscale_into(n, static_cast<const std::uint16_t*>(src), master, scale,
                          [](std::uint16_t h) { return half_bits_to_float(h); });
    case DType::bf16:
      return unscale_into(n, static_cast<const std::uint16_t*>(src), master, scale,
                          [](std::uint16_t h) { return bfloat16_bits_to_float(h); });
    default:
      return unscale_into(n, static_cast<const float*>(src), master, scale,
                          [](float g) { return g; });
  }
}

}  // namespace rig::cpu
