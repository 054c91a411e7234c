#include "prepare_de_en.hpp"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <map>
#include <thread>
#include <unordered_map>

#include <fmt/format.h>

#include "corpus.hpp"
#include "dictionary_entry.hpp"
#include "line_files.hpp"
#include "rig/error.hpp"

namespace rig::prepare {
namespace {

namespace fs = std::filesystem;

class Stopwatch {
 public:
  double lap() {
    const auto now = std::chrono::steady_clock::now();
    const double seconds = std::chrono::duration<double>(now - last_).count();
    last_ = now;
    return seconds;
  }

 private:
  std::chrono::steady_clock::time_point last_ = std::chrono::steady_clock::now();
};

void check_output_dir(const PrepareOptions& options) {
  const fs::path& dir = options.out_dir;
  if (fs::exists(dir)) {
    if (!fs::is_directory(dir)) {
      throw rig::UserError(fmt::format("{}: exists and is not a directory", dir.string()));
    }
    if (!fs::is_empty(dir) && !options.force) {
      throw rig::UserError(fmt::format(
          "{}: directory exists and is not empty; pass --force to overwrite its corpus files",
          dir.string()));
    }
  }
  fs::create_directories(dir);
}

void require_dictionary(const fs::path& dictionary) {
  if (!fs::is_regular_file(dictionary)) {
    throw rig::UserError(fmt::format(
        "dictionary {} not found: apt-get install trans-de-en (or pass --dictionary FILE)",
        dictionary.string()));
  }
}

// Dictionary lines -> normalised candidate pairs, counting what was skipped.
std::vector<TextPair> read_dictionary(const fs::path& dictionary,
                                      const TextNormalizer& normalizer) {
  const std::vector<std::string> lines = read_lines(dictionary);
  std::map<SkipReason, std::size_t> skipped;
  std::size_t empty_sub_entries = 0;
  std::vector<TextPair> pairs;
  // Many pairs share a side (the first alternative); normalise each text once.
  std::unordered_map<std::string, std::string> normalized;
  auto normalize = [&](const std::string& text) -> const std::string& {
    auto [it, inserted] = normalized.try_emplace(text);
    if (inserted) it->second = normalizer.normalize(text);
    return it->second;
  };
  for (const std::string& line : lines) {
    ParsedLine parsed = parse_dictionary_line(line);
    ++skipped[parsed.skipped];
    empty_sub_entries += parsed.empty_sub_entries;
    for (const TextPair& pair : parsed.pairs)
      pairs.push_back({normalize(pair.de), normalize(pair.en)});
  }
  fmt::print("read {} lines from {}\n", lines.size(), dictionary.string());
  for (const auto& [reason, count] : skipped) {
    fmt::print("  {:>8} {}\n", count,
               reason == SkipReason::kNone ? "lines used"
                                           : fmt::format("skipped: {}", skip_reason_name(reason)));
  }
  fmt::print("  {:>8} aligned sub-entries left out: no text on one side after cleaning\n",
             empty_sub_entries);
  fmt::print("  {:>8} candidate pairs\n", pairs.size());
  return pairs;
}

std::vector<TextPair> filter_pairs(const std::vector<TextPair>& pairs, std::size_t max_chars) {
  std::map<PairRejection, std::size_t> rejected;
  std::vector<TextPair> kept;
  for (const TextPair& pair : pairs) {
    const PairRejection rejection = check_pair(pair, max_chars);
    if (rejection == PairRejection::kKept) {
      kept.push_back(pair);
    } else {
      ++rejected[rejection];
    }
  }
  for (const auto& [rejection, count] : rejected) {
    fmt::print(
        "  {:>8} pairs dropped: {}{}\n", count, pair_rejection_name(rejection),
        rejection == PairRejection::kTooLong ? fmt::format(" (> {} characters)", max_chars) : "");
  }
  std::vector<TextPair> unique = remove_duplicates(kept);
  fmt::print("  {:>8} pairs dropped: exact duplicates\n", kept.size() - unique.size());
  return unique;
}

void write_split(const fs::path& dir, const std::string& name, const std::vector<TextPair>& pairs) {
  std::vector<std::string> de;
  std::vector<std::string> en;
  de.reserve(pairs.size());
  en.reserve(pairs.size());
  for (const TextPair& pair : pairs) {
    de.push_back(pair.de);
    en.push_back(pair.en);
  }
  write_lines(dir / (name + ".de"), de);
  write_lines(dir / (name + ".en"), en);
}

// Encodes `lines` on `threads` threads (the processor is safe to share).
std::vector<std::string> encode_all(const PieceEncoder& encoder,
                                    const std::vector<std::string>& lines, int threads) {
  std::vector<std::string> encoded(lines.size());
  const std::size_t workers = static_cast<std::size_t>(std::max(1, threads));
  const std::size_t chunk = (lines.size() + workers - 1) / workers;
  {
    std::vector<std::jthread> pool;
    for (std::size_t w = 0; w < workers; ++w) {
      pool.emplace_back([&, w] {
        const std::size_t end = std::min(lines.size(), (w + 1) * chunk);
        for (std::size_t i = w * chunk; i < end; ++i) encoded[i] = encoder.encode(lines[i]);
      });
    }
  }
  return encoded;
}

// The vocab file's first lines must be the special pieces in id order.
void check_vocab(const fs::path& vocab) {
  const std::vector<std::string> lines = read_lines(vocab);
  const char* expected[] = {"<pad>", "</s>", "<s>", "<unk>"};
  for (std::size_t id = 0; id < 4; ++id) {
    if (id >= lines.size() || lines[id].substr(0, lines[id].find('\t')) != expected[id]) {
      throw rig::RunError(
          fmt::format("{}: line {} is not {}", vocab.string(), id + 1, expected[id]));
    }
  }
}

}  // namespace

void prepare_de_en(const PrepareOptions& options) {
  if (options.direction != "de-en" && options.direction != "en-de") {
    throw rig::UserError(
        fmt::format("--direction: expected de-en or en-de, found '{}'", options.direction));
  }
  const std::string source = options.direction.substr(0, 2);
  const std::string target = options.direction.substr(3, 2);
  require_dictionary(options.dictionary);
  check_output_dir(options);
  Stopwatch watch;
  const TextNormalizer normalizer;

  const std::vector<TextPair> candidates = read_dictionary(options.dictionary, normalizer);
  const std::vector<TextPair> pairs = filter_pairs(candidates, options.max_chars);
  fmt::print("  {:>8} distinct pairs kept\n", pairs.size());
  SplitOptions split_options;
  split_options.dev_pairs = options.dev_pairs;
  split_options.test_pairs = options.test_pairs;
  const Splits splits = split_by_german_hash(pairs, split_options);
  fmt::print(
      "  {:>8} pairs dropped: German phrase held out for dev/test, English side under {} words\n",
      splits.held_out_short_dropped, split_options.min_held_out_words);
  const double prepare_seconds = watch.lap();

  const fs::path& dir = options.out_dir;
  const std::map<std::string, const std::vector<TextPair>*> by_name = {
      {"train", &splits.train}, {"dev", &splits.dev}, {"test", &splits.test}};
  for (const auto& [name, split] : by_name) write_split(dir, name, *split);
  fmt::print("splits ({} -> {}; the German side decides the split):\n", source, target);
  for (const char* name : {"train", "dev", "test"}) {
    fmt::print("  {:<5} {:>8} pairs  {}/{}.{} -> {}.{}\n", name, by_name.at(name)->size(),
               dir.string(), name, source, name, target);
  }

  fmt::print("training the shared BPE model on train.de + train.en ({} threads)...\n",
             options.bpe.num_threads);
  std::fflush(stdout);  // the training takes minutes: show how far it got
  train_shared_bpe({dir / "train.de", dir / "train.en"}, dir / "m_common", options.bpe);
  check_vocab(dir / "m_common.vocab");
  const double train_seconds = watch.lap();

  const PieceEncoder encoder(dir / "m_common.model");
  std::size_t mismatches = 0;
  std::size_t pieces = 0;
  std::size_t lines = 0;
  for (const char* name : {"train", "dev", "test"}) {
    for (const char* language : {"de", "en"}) {
      const std::string file = fmt::format("{}.{}", name, language);
      const std::vector<std::string> raw = read_lines(dir / file);
      const std::vector<std::string> encoded = encode_all(encoder, raw, options.bpe.num_threads);
      for (std::size_t i = 0; i < raw.size(); ++i) {
        mismatches += detokenize(encoded[i]) != raw[i];
        pieces += count_words(encoded[i]);
      }
      lines += raw.size();
      write_lines(dir / fmt::format("{}.tok.{}", name, language), encoded);
    }
  }
  const double encode_seconds = watch.lap();
  fmt::print("shared BPE model {}/m_common.model (vocab {}), {:.2f} pieces per line\n",
             dir.string(), options.bpe.vocab_size,
             lines == 0 ? 0.0 : static_cast<double>(pieces) / static_cast<double>(lines));
  if (mismatches != 0) {
    throw rig::RunError(fmt::format(
        "{} tokenized lines do not detokenize to their raw line (normaliser and model disagree)",
        mismatches));
  }
  fmt::print("every tokenized line detokenizes to its raw line\n");
  fmt::print(
      "time: dictionary {:.1f} s, BPE training {:.1f} s, encoding {:.1f} s, total {:.1f} s\n",
      prepare_seconds, train_seconds, encode_seconds,
      prepare_seconds + train_seconds + encode_seconds);
}

}  // namespace rig::prepare
