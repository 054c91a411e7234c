// CRC-32C (Castagnoli), as TFRecord framing and checkpoint checksums use it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace rig::util {

std::uint32_t crc32c(const void* data, std::size_t size, std::uint32_t crc = 0);
inline std::uint32_t crc32c(std::string_view bytes) {
  return crc32c(bytes.data(), bytes.size());
}
// TFRecord's masked form: rotate right by 15 and add 0xa282ead8.
inline std::uint32_t masked_crc32c(std::uint32_t crc) {
  return ((crc >> 15) | (crc << 17)) + 0xa282ead8U;
}

}  // namespace rig::util
