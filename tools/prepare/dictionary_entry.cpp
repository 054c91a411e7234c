#include "dictionary_entry.hpp"

namespace rig::prepare {
namespace {

constexpr std::string_view kEllipsis = "\xE2\x80\xA6";  // U+2026 …

char closing_of(char open) {
  switch (open) {
    case '(':
      return ')';
    case '[':
      return ']';
    case '{':
      return '}';
    case '<':
      return '>';
    default:
      return '\0';
  }
}

bool is_closing(char c) {
  return c == ')' || c == ']' || c == '}' || c == '>';
}

bool is_space(char c) {
  return c == ' ' || c == '\t' || c == '\r' || c == '\n';
}

// The ASCII punctuation an abbreviation marker may be followed by.
bool ends_marker(char c) {
  return is_space(c) || c == ',' || c == ';' || c == '.' || c == ')' || c == ']';
}

}  // namespace

std::string_view skip_reason_name(SkipReason reason) {
  switch (reason) {
    case SkipReason::kNone:
      return "used";
    case SkipReason::kComment:
      return "comment or empty line";
    case SkipReason::kNoSeparator:
      return "not exactly one ' :: '";
    case SkipReason::kUnbalancedBrackets:
      return "unbalanced brackets";
    case SkipReason::kSubEntryMismatch:
      return "German and English ' | ' sub-entry counts differ";
  }
  return "?";
}

bool split_top_level(std::string_view text, std::string_view separator,
                     std::vector<std::string_view>& parts) {
  parts.clear();
  std::string open;  // the closing brackets still expected, innermost last
  std::size_t start = 0;
  for (std::size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (const char close = closing_of(c); close != '\0') {
      open.push_back(close);
    } else if (is_closing(c)) {
      if (open.empty() || open.back() != c) return false;
      open.pop_back();
    } else if (open.empty() && text.substr(i, separator.size()) == separator) {
      parts.push_back(text.substr(start, i - start));
      start = i + separator.size();
      i = start - 1;
    }
  }
  if (!open.empty()) return false;
  parts.push_back(text.substr(start));
  return true;
}

std::string remove_abbreviation_markers(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  std::size_t i = 0;
  while (i < text.size()) {
    const bool at_word_start = i == 0 || is_space(text[i - 1]);
    if (text[i] == '/' && at_word_start) {
      std::size_t end = i + 1;
      while (end < text.size() && text[end] != '/' && !is_space(text[end])) ++end;
      const bool closed = end < text.size() && text[end] == '/' && end > i + 1;
      if (closed && (end + 1 == text.size() || ends_marker(text[end + 1]))) {
        i = end + 1;
        continue;
      }
    }
    out.push_back(text[i]);
    ++i;
  }
  return out;
}

std::string clean_alternative(std::string_view text) {
  // Drop bracket groups (nested ones with them) and the … placeholder.
  std::string kept;
  kept.reserve(text.size());
  int depth = 0;
  for (std::size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (closing_of(c) != '\0') {
      ++depth;
    } else if (is_closing(c)) {
      if (depth > 0) --depth;
    } else if (depth == 0) {
      if (text.substr(i, kEllipsis.size()) == kEllipsis) {
        kept.push_back(' ');
        i += kEllipsis.size() - 1;
      } else {
        kept.push_back(c);
      }
    }
  }
  // One space between words; none before , . ! ? (left by a removed group).
  std::string out;
  out.reserve(kept.size());
  bool pending_space = false;
  for (const char c : kept) {
    if (is_space(c)) {
      pending_space = !out.empty();
      continue;
    }
    const bool punctuation = c == ',' || c == '.' || c == '!' || c == '?';
    if (pending_space && !punctuation) out.push_back(' ');
    pending_space = false;
    out.push_back(c);
  }
  // A removed group can leave a comma at either end: "(context), word".
  std::size_t first = 0;
  std::size_t last = out.size();
  while (first < last && (out[first] == ',' || out[first] == ' ')) ++first;
  while (last > first && (out[last - 1] == ',' || out[last - 1] == ' ')) --last;
  return out.substr(first, last - first);
}

ParsedLine parse_dictionary_line(std::string_view line) {
  ParsedLine result;
  while (!line.empty() && is_space(line.back())) line.remove_suffix(1);
  if (line.empty() || line.front() == '#') {
    result.skipped = SkipReason::kComment;
    return result;
  }
  const std::string text = remove_abbreviation_markers(line);
  std::vector<std::string_view> sides;
  if (!split_top_level(text, " :: ", sides)) {
    result.skipped = SkipReason::kUnbalancedBrackets;
    return result;
  }
  if (sides.size() != 2) {
    result.skipped = SkipReason::kNoSeparator;
    return result;
  }
  std::vector<std::string_view> de_subs;
  std::vector<std::string_view> en_subs;
  split_top_level(sides[0], " | ", de_subs);
  split_top_level(sides[1], " | ", en_subs);
  if (de_subs.size() != en_subs.size()) {
    result.skipped = SkipReason::kSubEntryMismatch;
    return result;
  }
  std::vector<std::string_view> parts;
  auto alternatives_of = [&parts](std::string_view sub_entry) {
    split_top_level(sub_entry, "; ", parts);
    std::vector<std::string> alternatives;
    for (const std::string_view part : parts) {
      if (std::string cleaned = clean_alternative(part); !cleaned.empty()) {
        alternatives.push_back(std::move(cleaned));
      }
    }
    return alternatives;
  };
  for (std::size_t i = 0; i < de_subs.size(); ++i) {
    const std::vector<std::string> de = alternatives_of(de_subs[i]);
    const std::vector<std::string> en = alternatives_of(en_subs[i]);
    if (de.empty() || en.empty()) {
      ++result.empty_sub_entries;
      continue;
    }
    // Alternatives are synonyms, the first one the main form. Every German
    // alternative is paired with the first English one and the first German one
    // with every English alternative: each alternative gets a translation that
    // the dictionary states for its main sense, the pair count grows with
    // m + n - 1 rather than the cross product's m * n, and rare synonyms are
    // never paired only with rare synonyms (which can be a different sense).
    for (const std::string& de_alternative : de) result.pairs.push_back({de_alternative, en[0]});
    for (std::size_t k = 1; k < en.size(); ++k) result.pairs.push_back({de[0], en[k]});
  }
  return result;
}

}  // namespace rig::prepare
