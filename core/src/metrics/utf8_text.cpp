#include "metrics/utf8_text.hpp"

#include <algorithm>

#include "metrics/unicode_tables.hpp"

namespace rig::bleu::text {
namespace {

// Code points stand for invalid bytes as in Python's surrogateescape: a lone
// surrogate U+DC80..U+DCFF, which valid UTF-8 never yields and no table holds.
constexpr char32_t kEscapedByte = 0xDC00;

struct Unit {
  char32_t code;
  std::size_t size;  // bytes in the input
};

bool is_continuation(unsigned char b) {
  return (b & 0xC0) == 0x80;
}

// The code point starting at s[i], or one escaped byte where s[i] does not
// start a valid sequence (the ranges of Unicode's table 3-7).
Unit decode_at(std::string_view s, std::size_t i) {
  const auto byte = [&](std::size_t k) { return static_cast<unsigned char>(s[i + k]); };
  const unsigned char b0 = byte(0);
  const std::size_t left = s.size() - i;
  if (b0 < 0x80) return {b0, 1};
  unsigned char lo = 0x80, hi = 0xBF;  // allowed range of the second byte
  std::size_t size = 0;
  char32_t code = 0;
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    size = 2, code = b0 & 0x1F;
  } else if (b0 >= 0xE0 && b0 <= 0xEF) {
    size = 3, code = b0 & 0x0F;
    if (b0 == 0xE0) lo = 0xA0;  // no overlongs
    if (b0 == 0xED) hi = 0x9F;  // no surrogates
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    size = 4, code = b0 & 0x07;
    if (b0 == 0xF0) lo = 0x90;  // no overlongs
    if (b0 == 0xF4) hi = 0x8F;  // nothing above U+10FFFF
  } else {
    return {kEscapedByte + b0, 1};
  }
  if (left < size || byte(1) < lo || byte(1) > hi) return {kEscapedByte + b0, 1};
  for (std::size_t k = 1; k < size; ++k) {
    if (!is_continuation(byte(k))) return {kEscapedByte + b0, 1};
    code = (code << 6) | (byte(k) & 0x3F);
  }
  return {code, size};
}

bool is_escaped_byte(char32_t c) {
  return c >= kEscapedByte + 0x80 && c <= kEscapedByte + 0xFF;
}

void append_utf8(std::string& out, char32_t c) {
  if (is_escaped_byte(c)) {
    out += static_cast<char>(c - kEscapedByte);
  } else if (c < 0x80) {
    out += static_cast<char>(c);
  } else if (c < 0x800) {
    out += static_cast<char>(0xC0 | (c >> 6));
    out += static_cast<char>(0x80 | (c & 0x3F));
  } else if (c < 0x10000) {
    out += static_cast<char>(0xE0 | (c >> 12));
    out += static_cast<char>(0x80 | ((c >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (c & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (c >> 18));
    out += static_cast<char>(0x80 | ((c >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((c >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (c & 0x3F));
  }
}

bool in_ranges(std::span<const unicode::CodeRange> ranges, char32_t c) {
  auto it = std::upper_bound(ranges.begin(), ranges.end(), c,
                             [](char32_t v, const unicode::CodeRange& r) { return v < r.first; });
  return it != ranges.begin() && c <= std::prev(it)->last;
}

bool is_cased(char32_t c) {
  return in_ranges(unicode::kCased, c);
}
bool is_case_ignorable(char32_t c) {
  return in_ranges(unicode::kCaseIgnorable, c);
}

// Python's handle_capital_sigma: U+03A3 lowers to final sigma U+03C2 when a
// cased letter precedes it and none follows (case-ignorables skipped).
char32_t lower_sigma(const std::vector<char32_t>& codes, std::size_t i) {
  std::size_t j = i;
  while (j > 0 && is_case_ignorable(codes[j - 1])) --j;
  if (j == 0 || !is_cased(codes[j - 1])) return 0x3C3;
  std::size_t k = i + 1;
  while (k < codes.size() && is_case_ignorable(codes[k])) ++k;
  return k < codes.size() && is_cased(codes[k]) ? 0x3C3 : 0x3C2;
}

}  // namespace

bool is_space(char32_t c) {
  return in_ranges(unicode::kWhitespace, c);
}

std::string lower(std::string_view s) {
  std::vector<char32_t> codes;
  codes.reserve(s.size());
  for (std::size_t i = 0; i < s.size();) {
    const Unit u = decode_at(s, i);
    codes.push_back(u.code);
    i += u.size;
  }
  std::string out;
  out.reserve(s.size());
  for (std::size_t i = 0; i < codes.size(); ++i) {
    const char32_t c = codes[i];
    if (c < 0x80) {
      out += static_cast<char>(c >= 'A' && c <= 'Z' ? c + ('a' - 'A') : c);
      continue;
    }
    if (c == 0x3A3) {
      append_utf8(out, lower_sigma(codes, i));
      continue;
    }
    const auto& multi = unicode::kLowerMulti;
    auto m = std::find_if(multi.begin(), multi.end(), [&](const auto& e) { return e.from == c; });
    if (m != multi.end()) {
      for (std::uint32_t k = 0; k < m->count; ++k) append_utf8(out, m->to[k]);
      continue;
    }
    const auto& single = unicode::kLowerSingle;
    auto it =
        std::lower_bound(single.begin(), single.end(), c,
                         [](const unicode::CaseMapping& e, char32_t v) { return e.from < v; });
    append_utf8(out, it != single.end() && it->from == c ? it->to : c);
  }
  return out;
}

std::string_view rstrip(std::string_view s) {
  std::size_t end = 0;  // one past the last non-space code point
  for (std::size_t i = 0; i < s.size();) {
    const Unit u = decode_at(s, i);
    i += u.size;
    if (!is_space(u.code)) end = i;
  }
  return s.substr(0, end);
}

std::vector<std::string_view> split(std::string_view s) {
  std::vector<std::string_view> words;
  std::size_t start = 0;
  bool in_word = false;
  for (std::size_t i = 0; i < s.size();) {
    const Unit u = decode_at(s, i);
    const bool space = u.code < 0x80 ? (u.code == ' ' || (u.code >= 0x09 && u.code <= 0x0D) ||
                                        (u.code >= 0x1C && u.code <= 0x1F))
                                     : is_space(u.code);
    if (space && in_word) words.push_back(s.substr(start, i - start));
    if (!space && !in_word) start = i;
    in_word = !space;
    i += u.size;
  }
  if (in_word) words.push_back(s.substr(start));
  return words;
}

}  // namespace rig::bleu::text
