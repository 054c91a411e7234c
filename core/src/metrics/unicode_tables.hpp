// Unicode data for reproducing Python's str.lower(), str.split() and
// str.rstrip() exactly (SacreBLEU runs on Python str). Generated from Python
// by gen_unicode_tables.py into unicode_tables.cpp; every table is sorted.
#pragma once

#include <cstdint>
#include <span>

namespace rig::bleu::unicode {

struct CaseMapping {
  std::uint32_t from;
  std::uint32_t to;
};
// A lowercase mapping to more than one code point (U+0130 -> "i\u0307").
struct MultiLower {
  std::uint32_t from;
  std::uint32_t count;
  std::uint32_t to[3];
};
struct CodeRange {
  std::uint32_t first;
  std::uint32_t last;  // inclusive
};

extern const std::span<const CaseMapping> kLowerSingle;
extern const std::span<const MultiLower> kLowerMulti;
extern const std::span<const CodeRange> kCased;
extern const std::span<const CodeRange> kCaseIgnorable;
extern const std::span<const CodeRange> kWhitespace;  // str.isspace()

}  // namespace rig::bleu::unicode
