// Turning dictionary pairs into a corpus: filtering, de-duplication and the
// deterministic train/dev/test split by a hash of the German side.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "dictionary_entry.hpp"

namespace rig::prepare {

// UTF-8 helpers (input is assumed valid UTF-8; stray bytes count as characters).
std::size_t count_codepoints(std::string_view text);
std::size_t count_words(std::string_view text);  // space-separated tokens
// True when `text` has a letter or digit: ASCII alphanumerics, or any non-ASCII
// character outside the Latin-1 symbols, the general punctuation / symbol blocks
// (U+2000..U+2BFF) and CJK punctuation (U+3000..U+303F).
bool has_word_character(std::string_view text);

// 64-bit FNV-1a: a stable hash (same value on every platform and run).
std::uint64_t fnv1a64(std::string_view text);

enum class PairRejection { kKept, kEmpty, kNoWordCharacter, kTooLong, kUnbalancedLength };
std::string_view pair_rejection_name(PairRejection rejection);

// kTooLong when a side has more than max_chars characters; kUnbalancedLength
// when the longer side has more than 3 x the shorter side's characters + 10
// (a definition or a list, not a translation: "AWG" :: "Waste Management Act").
PairRejection check_pair(const TextPair& pair, std::size_t max_chars);

// The pairs without exact duplicates, first occurrences kept in order.
std::vector<TextPair> remove_duplicates(const std::vector<TextPair>& pairs);

struct SplitOptions {
  std::size_t dev_pairs = 2000;
  std::size_t test_pairs = 2000;
  std::size_t min_held_out_words = 3;  // on both sides of a dev/test pair
};

struct Splits {
  std::vector<TextPair> train, dev, test;
  // Pairs of a dev/test German phrase whose English side is shorter than
  // min_held_out_words: dropped, since their German side may not be in train.
  std::size_t held_out_short_dropped = 0;
};

// Splits by German phrase, so one German phrase is in one split only. German
// phrases of at least min_held_out_words words that have a pair whose English
// side has as many are candidates for dev/test; in the order of their FNV-1a
// hash (ties by the text) they fill dev until it holds dev_pairs pairs, then
// test until test_pairs; every other phrase goes to train. Within a split the
// pairs keep their input order.
Splits split_by_german_hash(const std::vector<TextPair>& pairs, const SplitOptions& options);

}  // namespace rig::prepare
