#include "corpus.hpp"

#include <fmt/format.h>

#include "../common/text_batch.hpp"
#include "rig/error.hpp"

namespace parallel_text {

namespace text = rig_data::text;

bool frame_row(std::vector<std::int32_t>& ids, const Framing& framing) {
  const std::int64_t extra = framing.use_start_token ? 2 : 1;
  const bool longer = static_cast<std::int64_t>(ids.size()) + extra > framing.max_length;
  if (longer && framing.long_lines == LongLines::truncate) {
    ids.resize(static_cast<std::size_t>(framing.max_length - extra));
  }
  if (framing.use_start_token) ids.insert(ids.begin(), text::kGo);
  ids.push_back(text::kEos);
  return longer;
}

void encode_pieces(std::string_view line, std::string_view delimiter, const Vocabulary& vocab,
                   std::vector<std::int32_t>& ids) {
  ids.clear();
  for_each_piece(line, delimiter, [&](std::string_view piece) { ids.push_back(vocab.id(piece)); });
}

Corpus read_corpus(const std::string& plugin, const TextFile& source, const TextFile* target,
                   const Vocabulary& src_vocab, const Vocabulary& tgt_vocab,
                   const CorpusOptions& options) {
  if (target != nullptr && target->size() != source.size()) {
    throw rig::UserError(fmt::format(
        "{}: {} has {} lines but {} has {}; the files must hold the same sentences, line by line",
        plugin, source.name(), source.size(), target->name(), target->size()));
  }
  Corpus corpus;
  const auto n = static_cast<std::size_t>(source.size());
  corpus.lines.reserve(n);
  corpus.source.reserve(n, n * 16);
  if (target != nullptr) corpus.target.reserve(n, n * 16);
  std::vector<std::int32_t> src;
  std::vector<std::int32_t> tgt;
  const Framing& framing = options.framing;
  for (std::int64_t i = 0; i < source.size(); ++i) {
    encode_pieces(source.line(i), options.delimiter, src_vocab, src);
    if (target != nullptr) encode_pieces(target->line(i), options.delimiter, tgt_vocab, tgt);
    if (options.skip_empty && (src.empty() || (target != nullptr && tgt.empty()))) {
      ++corpus.counts.skipped_empty;
      continue;
    }
    bool longer = frame_row(src, framing);
    if (target != nullptr) longer = frame_row(tgt, framing) || longer;
    if (longer) {
      if (framing.long_lines == LongLines::skip) {
        ++corpus.counts.skipped_long;
        continue;
      }
      ++(framing.long_lines == LongLines::truncate ? corpus.counts.truncated
                                                   : corpus.counts.kept_long);
    }
    corpus.source.append(src);
    if (target != nullptr) corpus.target.append(tgt);
    corpus.lines.push_back(i);
  }
  return corpus;
}

}  // namespace parallel_text
