#include "cpu/dropout.hpp"

#include <algorithm>
#include <cmath>

#include "cpu/half.hpp"
#include "cpu/kernel_attributes.hpp"
#include "cpu/parallel.hpp"

namespace rig::cpu {
namespace {

// Philox4x32-10 for kLanes consecutive blocks at once (vectorised across
// blocks), with the key and counter layout documented in rig/random.hpp, so
// the bits equal random_bits(); one group is 4 * kLanes stream elements.
constexpr std::int64_t kLanes = 16;
constexpr std::int64_t kGroup = 4 * kLanes;

struct Stream {
  std::uint32_t key0, key1, rank, step_lo, step_hi_purpose;
  std::uint32_t threshold;  // keep when (bits >> 8) >= threshold, i.e. uniform >= p
  explicit Stream(const RandomKey& k, float p)
      : key0(static_cast<std::uint32_t>(k.seed)),
        key1(static_cast<std::uint32_t>(k.seed >> 32U)),
        rank(k.rank),
        step_lo(static_cast<std::uint32_t>(k.step)),
        step_hi_purpose(k.purpose ^ static_cast<std::uint32_t>(k.step >> 32U)),
        // (m * 2^-24 >= p) <=> (m >= p * 2^24): the product is exact.
        threshold(static_cast<std::uint32_t>(std::ceil(static_cast<double>(p) * 0x1.0p24))) {}
};

// Forced inline so that it is compiled for each RIG_CPU_KERNEL target.
#define RIG_INLINE inline __attribute__((always_inline))

// bits[4 j + w] = word w of block `block0 + j`.
RIG_INLINE void philox_group(const Stream& s, std::uint64_t block0, std::uint32_t* bits) {
  std::uint32_t c0[kLanes], c1[kLanes], c2[kLanes], c3[kLanes];
  for (std::int64_t j = 0; j < kLanes; ++j) {
    const std::uint64_t b = block0 + static_cast<std::uint64_t>(j);
    c0[j] = static_cast<std::uint32_t>(b);
    c1[j] = s.rank ^ (static_cast<std::uint32_t>(b >> 32U) << 16U);
    c2[j] = s.step_lo;
    c3[j] = s.step_hi_purpose;
  }
  std::uint32_t k0 = s.key0, k1 = s.key1;
  for (int round = 0; round < 10; ++round) {
    for (std::int64_t j = 0; j < kLanes; ++j) {
      const std::uint64_t p0 = std::uint64_t{0xD2511F53U} * c0[j];
      const std::uint64_t p1 = std::uint64_t{0xCD9E8D57U} * c2[j];
      const std::uint32_t n0 = static_cast<std::uint32_t>(p1 >> 32U) ^ c1[j] ^ k0;
      const std::uint32_t n2 = static_cast<std::uint32_t>(p0 >> 32U) ^ c3[j] ^ k1;
      c1[j] = static_cast<std::uint32_t>(p1);
      c3[j] = static_cast<std::uint32_t>(p0);
      c0[j] = n0;
      c2[j] = n2;
    }
    k0 += 0x9E3779B9U;
    k1 += 0xBB67AE85U;
  }
  for (std::int64_t j = 0; j < kLanes; ++j) {
    bits[4 * j] = c0[j];
    bits[4 * j + 1] = c1[j];
    bits[4 * j + 2] = c2[j];
    bits[4 * j + 3] = c3[j];
  }
}

// Elements [begin, end) of the tensor (stream elements first + i); `begin`
// and `first` are multiples of 4. Convert/Store map an element to and from f32.
template <class T, class Load, class Store>
RIG_INLINE void apply_range(const Stream& s, float scale, const T* src, T* dst, std::int64_t begin,
                        std::int64_t end, std::uint64_t first, Load load, Store store) {
  std::uint32_t bits[kGroup];
  for (std::int64_t g = begin; g < end; g += kGroup) {
    philox_group(s, (first + static_cast<std::uint64_t>(g)) / 4, bits);
    const std::int64_t n = std::min(kGroup, end - g);
    const T* x = src + g;
    T* y = dst + g;
    for (std::int64_t i = 0; i < n; ++i) {
      y[i] = store((bits[i] >> 8U) >= s.threshold ? load(x[i]) * scale : 0.0F);
    }
  }
}

RIG_CPU_KERNEL void apply_f32(const Stream& s, float scale, const float* src, float* dst,
                              std::int64_t begin, std::int64_t end) {
  apply_range(
      s, scale, src, dst, begin, end, 0, [](float v) { return v; }, [](float v) { return v; });
}

RIG_CPU_KERNEL void apply_f16(const Stream& s, float scale, const std::uint16_t* src,
                              std::uint16_t* dst, std::int64_t begin, std::int64_t end) {
  apply_range(
      s, scale, src, dst, begin, end, 0, [](std::uint16_t v) { return half_bits_to_float(v); },
      [](float v) { return float_to_half_bits(v); });
}

RIG_CPU_KERNEL void apply_bf16(const Stream& s, float scale, const std::uint16_t* src,
                               std::uint16_t* dst, std::int64_t begin, std::int64_t end) {
  apply_range(
      s, scale, src, dst, begin, end, 0, [](std::uint16_t v) { return bfloat16_bits_to_float(v); },
      [](float v) { return float_to_bfloat16_bits(v); });
}

// Runs kernel(begin, end) over [0, n) in parallel, in whole groups.
template <class Kernel>
void for_groups(std::int64_t n, Kernel&& kernel) {
  const std::int64_t groups = (n + kGroup - 1) / kGroup;
  parallel_for(groups, 64, [&](std::int64_t begin, std::int64_t end) {
    kernel(begin * kGroup, std::min(n, end * kGroup));
  });
}

}  // namespace

void dropout_apply(const RandomKey& key, float p, float scale, const Tensor& src, Tensor& dst) {
  const Stream s(key, p);
  const std::int64_t n = src.numel();
  switch (src.dtype()) {
    case DType::f32: {
      const float* x = src.data<float>();
      float* y = dst.data<float>();
      for_groups(n, [&](std::int64_t b, std::int64_t e) { apply_f32(s, scale, x, y, b, e); });
      break;
    }
    case DType::f16: {
      const auto* x = src.data<std::uint16_t>();
      auto* y = dst.data<std::uint16_t>();
      for_groups(n, [&](std::int64_t b, std::int64_t e) { apply_f16(s, scale, x, y, b, e); });
      break;
    }
    case DType::bf16: {
      const auto* x = src.data<std::uint16_t>();
      auto* y = dst.data<std::uint16_t>();
      for_groups(n, [&](std::int64_t b, std::int64_t e) { apply_bf16(s, scale, x, y, b, e); });
      break;
    }
    default: break;  // the op layer admits floating dtypes only
  }
}

void dropout_mask(const RandomKey& key, float p, Tensor& mask, std::uint64_t first) {
  const Stream s(key, p);
  auto* m = mask.data<std::uint8_t>();
  const std::int64_t n = mask.numel();
  // Element first + i lives in block (first + i) / 4: start from the block
  // holding `first` and skip the words before it.
  const auto skip = static_cast<std::int64_t>(first % 4);
  std::uint32_t bits[kGroup];
  for (std::int64_t g = -skip; g < n; g += kGroup) {
    philox_group(s, (first + static_cast<std::uint64_t>(g + skip)) / 4, bits);
    for (std::int64_t i = std::max<std::int64_t>(0, -g); i < kGroup && g + i < n; ++i) {
      m[g + i] = (bits[i] >> 8U) >= s.threshold ? 1 : 0;
    }
  }
}

}  // namespace rig::cpu
