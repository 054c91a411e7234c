#include "baselines.hpp"

#include <fmt/format.h>

#include <map>

#include "line_files.hpp"
#include "rig/error.hpp"

namespace rig::prepare {
namespace {

namespace fs = std::filesystem;

bool is_edge_punctuation(char c) {
  constexpr std::string_view kPunctuation = ".,;:!?\"'()[]";
  return kPunctuation.find(c) != std::string_view::npos;
}

// The word with its first letter in lower case (ASCII and Latin-1: Ä, Ö, Ü, ...).
std::string lower_first(std::string_view word) {
  std::string out(word);
  if (out.empty()) return out;
  if (out[0] >= 'A' && out[0] <= 'Z') {
    out[0] = static_cast<char>(out[0] - 'A' + 'a');
  } else if (out.size() >= 2 && static_cast<unsigned char>(out[0]) == 0xC3) {
    const auto second = static_cast<unsigned char>(out[1]);
    if (second >= 0x80 && second <= 0x9E && second != 0x97) {  // U+00C0..U+00DE but ×
      out[1] = static_cast<char>(second + 0x20);
    }
  }
  return out;
}

std::vector<std::string_view> split_words(std::string_view line) {
  std::vector<std::string_view> words;
  std::size_t start = 0;
  while (start < line.size()) {
    const std::size_t end = std::min(line.find(' ', start), line.size());
    if (end > start) words.push_back(line.substr(start, end - start));
    start = end + 1;
  }
  return words;
}

}  // namespace

WordDictionary build_word_dictionary(const std::vector<std::string>& source_lines,
                                     const std::vector<std::string>& target_lines) {
  std::unordered_map<std::string, std::map<std::string, std::size_t>> counts;
  for (std::size_t i = 0; i < source_lines.size() && i < target_lines.size(); ++i) {
    const std::string& source = source_lines[i];
    const std::string& target = target_lines[i];
    if (source.empty() || target.empty()) continue;
    if (source.find(' ') != std::string::npos || target.find(' ') != std::string::npos) continue;
    ++counts[source][target];
  }
  WordDictionary dictionary;
  for (const auto& [source, targets] : counts) {
    // std::map iterates in order: the first of the most frequent wins ties.
    const std::string* best = nullptr;
    std::size_t best_count = 0;
    for (const auto& [target, count] : targets) {
      if (count > best_count) {
        best = &target;
        best_count = count;
      }
    }
    dictionary.emplace(source, *best);
  }
  return dictionary;
}

std::string translate_word_by_word(std::string_view line, const WordDictionary& dictionary,
                                   WordCounts& counts) {
  std::string out;
  for (const std::string_view word : split_words(line)) {
    std::size_t first = 0;
    std::size_t last = word.size();
    while (first < last && is_edge_punctuation(word[first])) ++first;
    while (last > first && is_edge_punctuation(word[last - 1])) --last;
    const std::string core(word.substr(first, last - first));
    auto found = dictionary.find(core);
    if (found == dictionary.end() && !core.empty()) found = dictionary.find(lower_first(core));
    if (!out.empty()) out.push_back(' ');
    if (core.empty() || found == dictionary.end()) {
      out += word;
      ++counts.copied;
    } else {
      out += word.substr(0, first);
      out += found->second;
      out += word.substr(last);
      ++counts.translated;
    }
  }
  return out;
}

void write_baselines(const fs::path& out_dir, const std::string& direction) {
  if (direction != "de-en" && direction != "en-de") {
    throw rig::UserError(
        fmt::format("--direction: expected de-en or en-de, found '{}'", direction));
  }
  const std::string source = direction.substr(0, 2);
  const std::string target = direction.substr(3, 2);
  const auto corpus_file = [&](const std::string& name) {
    const fs::path file = out_dir / name;
    if (!fs::is_regular_file(file)) {
      throw rig::UserError(
          fmt::format("{}: not found; prepare the corpus first with tools/prepare-de-en {}",
                      file.string(), out_dir.string()));
    }
    return read_lines(file);
  };
  const std::vector<std::string> train_source = corpus_file("train." + source);
  const std::vector<std::string> train_target = corpus_file("train." + target);
  const std::vector<std::string> test_source = corpus_file("test." + source);
  const std::vector<std::string> test_target = corpus_file("test." + target);
  if (train_source.size() != train_target.size() || test_source.size() != test_target.size()) {
    throw rig::UserError(fmt::format(
        "{}: train.{{de,en}} or test.{{de,en}} have different line counts", out_dir.string()));
  }
  const WordDictionary dictionary = build_word_dictionary(train_source, train_target);
  WordCounts counts;
  std::vector<std::string> word_by_word;
  word_by_word.reserve(test_source.size());
  for (const std::string& line : test_source) {
    word_by_word.push_back(translate_word_by_word(line, dictionary, counts));
  }
  const fs::path dir = out_dir / "baselines";
  fs::create_directories(dir);
  const fs::path copy_file = dir / ("test.copy." + target);
  const fs::path dict_file = dir / ("test.dict." + target);
  write_lines(copy_file, test_source);
  write_lines(dict_file, word_by_word);
  fmt::print(
      "{} -> {}: {} test sentences; word dictionary of {} source words from the train\n"
      "  split's single-word pairs\n",
      source, target, test_source.size(), dictionary.size());
  fmt::print("copy baseline:       {}\n", copy_file.string());
  fmt::print("dictionary baseline: {} ({} words translated, {} copied)\n", dict_file.string(),
             counts.translated, counts.copied);
}

}  // namespace rig::prepare
