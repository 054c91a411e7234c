// Philox4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3",
// SC'11; the constants of Random123) and the streams built on it.
#include "rig/random.hpp"

#include <cmath>
#include <numbers>

#include "rig/kernel_attributes.hpp"

namespace rig {

namespace {

constexpr std::uint32_t kM0 = 0xD2511F53U;
constexpr std::uint32_t kM1 = 0xCD9E8D57U;
constexpr std::uint32_t kW0 = 0x9E3779B9U;  // golden ratio
constexpr std::uint32_t kW1 = 0xBB67AE85U;  // sqrt(3) - 1

inline std::array<std::uint32_t, 4> philox(std::array<std::uint32_t, 4> c,
                                           std::array<std::uint32_t, 2> k) {
  for (int round = 0; round < 10; ++round) {
    if (round > 0) {
      k[0] += kW0;
      k[1] += kW1;
    }
    const std::uint64_t p0 = static_cast<std::uint64_t>(kM0) * c[0];
    const std::uint64_t p1 = static_cast<std::uint64_t>(kM1) * c[2];
    c = {static_cast<std::uint32_t>(p1 >> 32U) ^ c[1] ^ k[0], static_cast<std::uint32_t>(p1),
         static_cast<std::uint32_t>(p0 >> 32U) ^ c[3] ^ k[1], static_cast<std::uint32_t>(p0)};
  }
  return c;
}

// The Philox key and the counter of block `block` of a stream (see random.hpp).
struct Stream {
  std::array<std::uint32_t, 2> key;
  std::array<std::uint32_t, 4> counter;  // counter[0] and the top of counter[1] take the block
  explicit Stream(const RandomKey& k)
      : key{static_cast<std::uint32_t>(k.seed), static_cast<std::uint32_t>(k.seed >> 32U)},
        counter{0, k.rank, static_cast<std::uint32_t>(k.step),
                k.purpose ^ static_cast<std::uint32_t>(k.step >> 32U)} {}
  std::array<std::uint32_t, 4> block(std::uint64_t b) const {
    std::array<std::uint32_t, 4> c = counter;
    c[0] = static_cast<std::uint32_t>(b);
    c[1] ^= static_cast<std::uint32_t>(b >> 32U) << 16U;
    return philox(c, key);
  }
};

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
  return philox(counter, key);
}

std::uint32_t random_bits(const RandomKey& key, std::uint64_t index) {
  return Stream(key).block(index / 4)[index % 4];
}

float uniform_float(std::uint32_t bits) {
  return static_cast<float>(bits >> 8U) * 0x1.0p-24F;
}

void fill_uniform(const RandomKey& key, float* out, std::int64_t n, float low, float high,
                  std::uint64_t first) {
  const Stream stream(key);
  const float range = high - low;
  std::array<std::uint32_t, 4> bits{};
  std::uint64_t have = ~std::uint64_t{0};  // the block in `bits`
  for (std::int64_t i = 0; i < n; ++i) {
    const std::uint64_t index = first + static_cast<std::uint64_t>(i);
    if (index / 4 != have) {
      have = index / 4;
      bits = stream.block(have);
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
  const Stream stream(key);
  std::array<std::uint32_t, 4> bits{};
  std::uint64_t have = ~std::uint64_t{0};
  for (std::int64_t i = 0; i < n; ++i) {
    // Elements 2j and 2j+1 lie in one block: block (first+i)/2, outputs 2((first+i)%2) and +1.
    const std::uint64_t j = first + static_cast<std::uint64_t>(i);
    if (j / 2 != have) {
      have = j / 2;
      bits = stream.block(have);
    }
    const std::size_t o = 2 * (j % 2);
    out[i] = box_muller(bits[o], bits[o + 1], mean, std);
  }
}

}  // namespace rig
