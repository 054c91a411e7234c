// Two reference points for translation quality on the test split: copying the
// source, and translating word by word with the most frequent single-word
// translation seen in the train split.
#pragma once

#include <cstddef>
#include <filesystem>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace rig::prepare {

// Source word -> its most frequent translation among the train pairs where both
// sides are one word (ties: the lexicographically smallest translation).
using WordDictionary = std::unordered_map<std::string, std::string>;
WordDictionary build_word_dictionary(const std::vector<std::string>& source_lines,
                                     const std::vector<std::string>& target_lines);

struct WordCounts {
  std::size_t translated = 0;
  std::size_t copied = 0;
};

// Each space-separated word translated through `dictionary` (looked up as is,
// then with its first letter in lower case; punctuation around it kept), words
// it does not know copied.
std::string translate_word_by_word(std::string_view line, const WordDictionary& dictionary,
                                   WordCounts& counts);

// Reads out_dir's train and test files for `direction` (de-en or en-de), writes
// out_dir/baselines/test.copy.<target> and test.dict.<target> and prints them.
void write_baselines(const std::filesystem::path& out_dir, const std::string& direction);

}  // namespace rig::prepare
