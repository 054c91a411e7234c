#include "engine/ps/two_bit.hpp"

#include <stdexcept>

#include <fmt/format.h>

namespace rig::engine::ps {
namespace {

constexpr std::uint8_t kZero = 0;
constexpr std::uint8_t kPlus = 1;
constexpr std::uint8_t kMinus = 2;

}  // namespace

std::size_t compressed_2bit_bytes(std::int64_t count) {
  return static_cast<std::size_t>((count + 3) / 4);
}

std::vector<std::byte> compress_2bit(const float* gradients, float* residual, std::int64_t count,
                                     float threshold) {
  std::vector<std::byte> out(compressed_2bit_bytes(count), std::byte{0});
  for (std::int64_t i = 0; i < count; ++i) {
    float& r = residual[i];
    r += gradients[i];
    std::uint8_t code = kZero;
    if (r >= threshold) {
      code = kPlus;
      r -= threshold;
    } else if (r <= -threshold) {
      code = kMinus;
      r += threshold;
    }
    const auto at = static_cast<std::size_t>(i / 4);
    const auto shift = static_cast<unsigned>(2 * (i % 4));
    out[at] |= std::byte{static_cast<std::uint8_t>(code << shift)};
  }
  return out;
}

void decompress_2bit(const std::vector<std::byte>& payload, std::int64_t count, float threshold,
                     float* out) {
  if (payload.size() != compressed_2bit_bytes(count)) {
    throw std::runtime_error(
        fmt::format("parameter server: a 2-bit push of {} elements holds {} bytes, expected {}",
                    count, payload.size(), compressed_2bit_bytes(count)));
  }
  for (std::int64_t i = 0; i < count; ++i) {
    const auto bits = std::to_integer<std::uint8_t>(payload[static_cast<std::size_t>(i / 4)]);
    const auto code = static_cast<std::uint8_t>((bits >> (2 * (i % 4))) & 3U);
    out[i] = code == kPlus ? threshold : code == kMinus ? -threshold : 0.0F;
  }
}

}  // namespace rig::engine::ps
