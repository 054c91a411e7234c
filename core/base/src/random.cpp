// The random streams on Philox4x32-10 (rig/math/philox.hpp, shared with the GPU).
#include "rig/random.hpp"

#include <cmath>
#include <numbers>

#include "rig/kernel_attributes.hpp"
#include "rig/math/philox.hpp"

namespace rig {

namespace {

// Block b of the stream `key` (the layout of rig/math/philox.hpp).
inline std::array<std::uint32_t, 4> stream_block(const math::PhiloxStream& stream,
                                                 std::uint64_t b) {
  const math::PhiloxBlock block = stream.block(b);
  return {block.v[0], block.v[1], block.v[2], block.v[3]};
}

inline math::PhiloxStream stream_of(const RandomKey& k) {
  return math::PhiloxStream::of(k.seed, k.step, k.rank, k.purpose);
}

// Box-Muller of two 32-bit draws; u1 in (0, 1] keeps the log finite.
inline float box_muller(std::uint32_t a, std::uint32_t b, float mean, float std) {
  const double u1 = (static_cast<double>(a >> 8U) + 1.0) * 0x1.0p-24;
  const double u2 = static_cast<double>(b >> 8U) * 0x1.0p-24;
  const double z = std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * std::numbers::pi * u2);
  return static_cast<float>(static_cast<double>(mean) + static_cast<double>(std) * z);
}

}  // namespace

std::uint32_t purpose_id(std::string_view name) {
  std::uint32_t h = 0x811C9DC5U;
  for (char c : name) {
    h ^= static_cast<unsigned char>(c);
    h *= 0x01000193U;
  }
  return h;
}

RandomKey RandomKey::derive(std::string_view name) const {
  // FNV-1a continued from this purpose over a separator and the name, so
  // derive("a").derive("b") differs from derive("b").derive("a").
  std::uint32_t h = purpose ^ 0x811C9DC5U;
  h *= 0x01000193U;
  h ^= static_cast<std::uint32_t>('/');
  h *= 0x01000193U;
  for (char c : name) {
    h ^= static_cast<unsigned char>(c);
    h *= 0x01000193U;
  }
  RandomKey out = *this;
  out.purpose = h;
  return out;
}

std::array<std::uint32_t, 4> philox4x32(std::array<std::uint32_t, 4> counter,
                                        std::array<std::uint32_t, 2> key) {
  const math::PhiloxBlock out =
      math::philox4x32_10({{counter[0], counter[1], counter[2], counter[3]}}, key[0], key[1]);
  return {out.v[0], out.v[1], out.v[2], out.v[3]};
}

std::uint32_t random_bits(const RandomKey& key, std::uint64_t index) {
  return stream_of(key).bits(index);
}

float uniform_float(std::uint32_t bits) {
  return static_cast<float>(bits >> 8U) * 0x1.0p-24F;
}

void fill_uniform(const RandomKey& key, float* out, std::int64_t n, float low, float high,
                  std::uint64_t first) {
  const math::PhiloxStream stream = stream_of(key);
  const float range = high - low;
  std::array<std::uint32_t, 4> bits{};
  std::uint64_t have = ~std::uint64_t{0};  // the block in `bits`
  for (std::int64_t i = 0; i < n; ++i) {
    const std::uint64_t index = first + static_cast<std::uint64_t>(i);
    if (index / 4 != have) {
      have = index / 4;
      bits = stream_block(stream, have);
    }
    // range * u is exact in double (24 + 24 bits), so this rounds the same
    // with or without FMA contraction, on every platform.
    const auto v = static_cast<float>(static_cast<double>(low) +
                                      static_cast<double>(range) * uniform_float(bits[index % 4]));
    out[i] = v < high ? v : std::nextafter(high, low);  // [low, high) even after rounding
  }
}

void fill_normal(const RandomKey& key, float* out, std::int64_t n, float mean, float std,
                 std::uint64_t first) {
  const math::PhiloxStream stream = stream_of(key);
  std::array<std::uint32_t, 4> bits{};
  std::uint64_t have = ~std::uint64_t{0};
  for (std::int64_t i = 0; i < n; ++i) {
    // Elements 2j and 2j+1 lie in one block: block (first+i)/2, outputs 2((first+i)%2) and +1.
    const std::uint64_t j = first + static_cast<std::uint64_t>(i);
    if (j / 2 != have) {
      have = j / 2;
      bits = stream_block(stream, have);
    }
    const std::size_t o = 2 * (j % 2);
    out[i] = box_muller(bits[o], bits[o + 1], mean, std);
  }
}

}  // namespace rig
