#include "corpus.hpp"

#include <algorithm>
#include <unordered_map>
#include <unordered_set>
#include <utility>

namespace rig::prepare {
namespace {

// Decodes the code point at text[i] and advances i (a stray byte decodes as itself).
std::uint32_t next_codepoint(std::string_view text, std::size_t& i) {
  const auto byte = [&](std::size_t k) { return static_cast<unsigned char>(text[k]); };
  const unsigned char lead = byte(i);
  std::size_t length = 1;
  std::uint32_t value = lead;
  if (lead >= 0xF0) {
    length = 4;
    value = lead & 0x07U;
  } else if (lead >= 0xE0) {
    length = 3;
    value = lead & 0x0FU;
  } else if (lead >= 0xC0) {
    length = 2;
    value = lead & 0x1FU;
  }
  if (length == 1 || i + length > text.size()) {
    ++i;
    return lead;
  }
  for (std::size_t k = 1; k < length; ++k) value = (value << 6) | (byte(i + k) & 0x3FU);
  i += length;
  return value;
}

bool is_word_codepoint(std::uint32_t c) {
  if (c < 0x80) {
    return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
  }
  if (c < 0xC0 || c == 0xD7 || c == 0xF7) return false;
  if (c >= 0x2000 && c <= 0x2BFF) return false;
  if (c >= 0x3000 && c <= 0x303F) return false;
  return true;
}

}  // namespace

std::size_t count_codepoints(std::string_view text) {
  std::size_t count = 0;
  for (std::size_t i = 0; i < text.size(); ++count) next_codepoint(text, i);
  return count;
}

std::size_t count_words(std::string_view text) {
  std::size_t words = 0;
  bool in_word = false;
  for (const char c : text) {
    if (c == ' ') {
      in_word = false;
    } else if (!in_word) {
      in_word = true;
      ++words;
    }
  }
  return words;
}

bool has_word_character(std::string_view text) {
  for (std::size_t i = 0; i < text.size();) {
    if (is_word_codepoint(next_codepoint(text, i))) return true;
  }
  return false;
}

std::uint64_t fnv1a64(std::string_view text) {
  std::uint64_t hash = 0xcbf29ce484222325ULL;
  for (const char c : text) {
    hash ^= static_cast<unsigned char>(c);
    hash *= 0x100000001b3ULL;
  }
  return hash;
}

std::string_view pair_rejection_name(PairRejection rejection) {
  switch (rejection) {
    case PairRejection::kKept:
      return "kept";
    case PairRejection::kEmpty:
      return "a side is empty";
    case PairRejection::kNoWordCharacter:
      return "a side has no letter or digit";
    case PairRejection::kTooLong:
      return "a side is too long";
    case PairRejection::kUnbalancedLength:
      return "lengths too unbalanced";
  }
  return "?";
}

PairRejection check_pair(const TextPair& pair, std::size_t max_chars) {
  if (pair.de.empty() || pair.en.empty()) return PairRejection::kEmpty;
  if (!has_word_character(pair.de) || !has_word_character(pair.en)) {
    return PairRejection::kNoWordCharacter;
  }
  const std::size_t de = count_codepoints(pair.de);
  const std::size_t en = count_codepoints(pair.en);
  if (de > max_chars || en > max_chars) return PairRejection::kTooLong;
  if (std::max(de, en) > 3 * std::min(de, en) + 10) return PairRejection::kUnbalancedLength;
  return PairRejection::kKept;
}

std::vector<TextPair> remove_duplicates(const std::vector<TextPair>& pairs) {
  std::unordered_set<std::string> seen;
  std::vector<TextPair> unique;
  for (const TextPair& pair : pairs) {
    // A tab never occurs inside a side (whitespace is collapsed to spaces).
    if (seen.insert(pair.de + '\t' + pair.en).second) unique.push_back(pair);
  }
  return unique;
}

Splits split_by_german_hash(const std::vector<TextPair>& pairs, const SplitOptions& options) {
  // Candidate German phrases for dev/test, each with its hash.
  std::unordered_map<std::string_view, std::size_t> held_out_pairs;  // phrase -> long pairs
  for (const TextPair& pair : pairs) {
    if (count_words(pair.de) >= options.min_held_out_words &&
        count_words(pair.en) >= options.min_held_out_words) {
      ++held_out_pairs[pair.de];
    }
  }
  std::vector<std::pair<std::uint64_t, std::string_view>> candidates;
  candidates.reserve(held_out_pairs.size());
  for (const auto& [phrase, count] : held_out_pairs)
    candidates.emplace_back(fnv1a64(phrase), phrase);
  std::sort(candidates.begin(), candidates.end());

  enum class Split { kTrain, kDev, kTest };
  std::unordered_map<std::string_view, Split> held_out;
  std::size_t dev = 0;
  std::size_t test = 0;
  for (const auto& [hash, phrase] : candidates) {
    if (dev < options.dev_pairs) {
      held_out[phrase] = Split::kDev;
      dev += held_out_pairs[phrase];
    } else if (test < options.test_pairs) {
      held_out[phrase] = Split::kTest;
      test += held_out_pairs[phrase];
    } else {
      break;
    }
  }

  Splits splits;
  for (const TextPair& pair : pairs) {
    const auto found = held_out.find(pair.de);
    if (found == held_out.end()) {
      splits.train.push_back(pair);
    } else if (count_words(pair.en) < options.min_held_out_words) {
      ++splits.held_out_short_dropped;
    } else {
      (found->second == Split::kDev ? splits.dev : splits.test).push_back(pair);
    }
  }
  return splits;
}

}  // namespace rig::prepare
