// Parsing one line of Debian's trans-de-en dictionary (/usr/share/trans/de-en,
// from dict.tu-chemnitz.de) into German-English translation pairs.
//
// Line format: `German side :: English side`. Each side splits on ` | ` into
// aligned sub-entries (the i-th German one translates the i-th English one);
// within a sub-entry `; ` separates alternatives (synonyms). Annotations
// ({f}, [Am.], (context), <search form>, /abbrev./, …) are stripped.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace rig::prepare {

struct TextPair {
  std::string de;
  std::string en;
  bool operator==(const TextPair&) const = default;
};

// Why a whole line gave no pairs (kNone: it was used).
enum class SkipReason {
  kNone,
  kComment,             // empty or starts with '#'
  kNoSeparator,         // not exactly one top-level ` :: `
  kUnbalancedBrackets,  // an unclosed or stray ( [ { <
  kSubEntryMismatch,    // different numbers of ` | ` sub-entries on the two sides
};
std::string_view skip_reason_name(SkipReason reason);

struct ParsedLine {
  SkipReason skipped = SkipReason::kNone;
  std::vector<TextPair> pairs;
  // Aligned sub-entries left out because one side had no text after cleaning.
  std::size_t empty_sub_entries = 0;
};

// Splits `text` at each `separator` outside brackets ((), [], {}, <>).
// Returns false (and leaves `parts` unspecified) when the brackets do not balance.
bool split_top_level(std::string_view text, std::string_view separator,
                     std::vector<std::string_view>& parts);

// Removes abbreviation markers such as ` /Abf./` or ` /NATO/`: a slash-delimited
// word without spaces that starts after a space (or at the start) and ends before
// a space, punctuation or the end. Slashes inside words ("Abfahrt/Abflug") stay.
std::string remove_abbreviation_markers(std::string_view text);

// One alternative's text without its annotations: bracket groups (with their
// content), the `…` placeholder, runs of whitespace collapsed, no space before
// , . ! ? and none at either end. Expects balanced brackets.
std::string clean_alternative(std::string_view text);

// The translation pairs of one dictionary line.
ParsedLine parse_dictionary_line(std::string_view line);

}  // namespace rig::prepare
