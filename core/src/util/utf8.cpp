#include "rig/utf8.hpp"

namespace rig {

std::optional<std::size_t> first_invalid_utf8(std::string_view text) {
  const auto* s = reinterpret_cast<const unsigned char*>(text.data());
  const std::size_t n = text.size();
  std::size_t i = 0;
  while (i < n) {
    const unsigned c = s[i];
    if (c < 0x80U) {
      ++i;
      continue;
    }
    std::size_t len = 0;
    unsigned lo = 0x80U;  // the allowed range of the second byte (no overlongs, surrogates)
    unsigned hi = 0xBFU;
    if (c >= 0xC2U && c <= 0xDFU) {
      len = 2;
    } else if (c >= 0xE0U && c <= 0xEFU) {
      len = 3;
      if (c == 0xE0U) lo = 0xA0U;
      if (c == 0xEDU) hi = 0x9FU;
    } else if (c >= 0xF0U && c <= 0xF4U) {
      len = 4;
      if (c == 0xF0U) lo = 0x90U;
      if (c == 0xF4U) hi = 0x8FU;
    } else {
      return i;
    }
    if (i + len > n || s[i + 1] < lo || s[i + 1] > hi) return i;
    for (std::size_t k = 2; k < len; ++k) {
      if ((s[i + k] & 0xC0U) != 0x80U) return i;
    }
    i += len;
  }
  return std::nullopt;
}

}  // namespace rig
