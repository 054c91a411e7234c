// Philox4x32-10 (Salmon et al., SC'11, with Random123's constants), the
// layout of rig's random streams on it, and the dropout keep rule: the one
// definition every back end computes (rig/random.hpp documents the streams).
#pragma once

#include <cstdint>

#include "rig/hd.hpp"

namespace rig::math {

struct PhiloxBlock {
  std::uint32_t v[4];
};

RIG_HD_INLINE PhiloxBlock philox4x32_10(PhiloxBlock c, std::uint32_t k0, std::uint32_t k1) {
  constexpr std::uint32_t kM0 = 0xD2511F53U;
  constexpr std::uint32_t kM1 = 0xCD9E8D57U;
  constexpr std::uint32_t kW0 = 0x9E3779B9U;  // golden ratio
  constexpr std::uint32_t kW1 = 0xBB67AE85U;  // sqrt(3) - 1
  for (int round = 0; round < 10; ++round) {
    if (round > 0) {
      k0 += kW0;
      k1 += kW1;
    }
    const std::uint64_t p0 = static_cast<std::uint64_t>(kM0) * c.v[0];
    const std::uint64_t p1 = static_cast<std::uint64_t>(kM1) * c.v[2];
    c = PhiloxBlock{
        {static_cast<std::uint32_t>(p1 >> 32U) ^ c.v[1] ^ k0, static_cast<std::uint32_t>(p1),
         static_cast<std::uint32_t>(p0 >> 32U) ^ c.v[3] ^ k1, static_cast<std::uint32_t>(p0)}};
  }
  return c;
}

// One stream (a RandomKey) as the five words Philox needs. Block b of the
// stream is Philox4x32-10 with key {lo32(seed), hi32(seed)} and counter
// {lo32(b), rank ^ (hi32(b) << 16), lo32(step), purpose ^ hi32(step)}.
struct PhiloxStream {
  std::uint32_t key0 = 0, key1 = 0, rank = 0, step_lo = 0, step_hi_purpose = 0;

  static RIG_HD_INLINE PhiloxStream of(std::uint64_t seed, std::uint64_t step, std::uint32_t rank,
                                       std::uint32_t purpose) {
    return PhiloxStream{static_cast<std::uint32_t>(seed), static_cast<std::uint32_t>(seed >> 32U),
                        rank, static_cast<std::uint32_t>(step),
                        purpose ^ static_cast<std::uint32_t>(step >> 32U)};
  }
  RIG_HD_INLINE PhiloxBlock block(std::uint64_t b) const {
    const PhiloxBlock counter{{static_cast<std::uint32_t>(b),
                               rank ^ (static_cast<std::uint32_t>(b >> 32U) << 16U), step_lo,
                               step_hi_purpose}};
    return philox4x32_10(counter, key0, key1);
  }
  // Element `index` of the stream: word index % 4 of block index / 4.
  RIG_HD_INLINE std::uint32_t bits(std::uint64_t index) const {
    return block(index / 4).v[index % 4];
  }
};

// Dropout keeps element i when uniform(bits_i) >= p with uniform(b) =
// (b >> 8) 2^-24, i.e. when (bits_i >> 8) >= ceil(p 2^24) (the product is exact).
RIG_HD_INLINE std::uint32_t dropout_threshold(float p) {
  const double scaled = static_cast<double>(p) * 0x1.0p24;
  const auto whole = static_cast<std::uint32_t>(scaled);
  return static_cast<double>(whole) < scaled ? whole + 1U : whole;
}
RIG_HD_INLINE bool dropout_keeps(std::uint32_t bits, std::uint32_t threshold) {
  return (bits >> 8U) >= threshold;
}

}  // namespace rig::math
