// A parallel corpus as token ids: the source and target lines encoded with
// their vocabularies, framed (<s> when asked, EOS), held as flat id rows.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "text_file.hpp"
#include "vocabulary.hpp"

namespace parallel_text {

enum class LongLines { truncate, skip, keep };

// Id rows stored back to back: row i is ids[offsets[i], offsets[i + 1]).
class TokenRows {
 public:
  std::int64_t size() const { return static_cast<std::int64_t>(offsets_.size()) - 1; }
  std::span<const std::int32_t> row(std::int64_t i) const {
    const auto k = static_cast<std::size_t>(i);
    return {ids_.data() + offsets_[k], static_cast<std::size_t>(offsets_[k + 1] - offsets_[k])};
  }
  std::int64_t length(std::int64_t i) const {
    const auto k = static_cast<std::size_t>(i);
    return offsets_[k + 1] - offsets_[k];
  }
  void append(std::span<const std::int32_t> row) {
    ids_.insert(ids_.end(), row.begin(), row.end());
    offsets_.push_back(static_cast<std::int64_t>(ids_.size()));
  }
  void reserve(std::size_t rows, std::size_t ids) {
    offsets_.reserve(rows + 1);
    ids_.reserve(ids);
  }

 private:
  std::vector<std::int32_t> ids_;
  std::vector<std::int64_t> offsets_{0};
};

// How a line becomes a row.
struct Framing {
  std::int64_t max_length = 0;  // tokens of a row, <s> and EOS included
  bool use_start_token = false;
  LongLines long_lines = LongLines::truncate;
};

// Frames the piece ids of one line in place: <s> first when asked, EOS last,
// the pieces cut so that the row holds max_length tokens when the line is
// longer and long_lines is truncate. Returns whether the line was longer.
bool frame_row(std::vector<std::int32_t>& ids, const Framing& framing);

// Calls f(piece) for the pieces of `line` split at `delimiter`; empty pieces
// (from repeated delimiters) are left out.
template <class F>
void for_each_piece(std::string_view line, std::string_view delimiter, F&& f) {
  std::size_t start = 0;
  while (start <= line.size()) {
    std::size_t end = line.find(delimiter, start);
    if (end == std::string_view::npos) end = line.size();
    if (end > start) f(line.substr(start, end - start));
    start = end + delimiter.size();
  }
}

// The ids of the pieces of `line` split at `delimiter`.
void encode_pieces(std::string_view line, std::string_view delimiter, const Vocabulary& vocab,
                   std::vector<std::int32_t>& ids);

struct CorpusOptions {
  std::string delimiter = " ";
  Framing framing;
  bool skip_empty = false;  // leave out pairs with an empty source or target line
};

// What reading left out or changed, in pairs.
struct CorpusCounts {
  std::int64_t skipped_empty = 0;
  std::int64_t truncated = 0;
  std::int64_t skipped_long = 0;
  std::int64_t kept_long = 0;
};

struct Corpus {
  TokenRows source;
  TokenRows target;                 // no rows without a target file
  std::vector<std::int64_t> lines;  // the 0-based line number of each pair, increasing
  CorpusCounts counts;
  std::int64_t size() const { return static_cast<std::int64_t>(lines.size()); }
};

// Encodes the files; `target` may be null (infer mode without target_file).
// Files of different line counts are a UserError naming both.
Corpus read_corpus(const std::string& plugin, const TextFile& source, const TextFile* target,
                   const Vocabulary& src_vocab, const Vocabulary& tgt_vocab,
                   const CorpusOptions& options);

}  // namespace parallel_text
