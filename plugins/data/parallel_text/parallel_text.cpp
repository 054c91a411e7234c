// parallel_text: a parallel corpus of two line-aligned files of
// delimiter-separated pieces (OpenSeq2Seq's ParallelTextDataLayer), batched
// by pairs (batch_size_per_gpu) or, with batch_tokens, by padded tokens in
// length buckets. docs/data-text.md describes the parameters and batches.
#include <cstdint>
#include <cstdio>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "../common/epoch_sampler.hpp"
#include "../common/text_batch.hpp"
#include "corpus.hpp"
#include "piece_model.hpp"
#include "rig/error.hpp"
#include "rig/plugin.hpp"
#include "text_file.hpp"
#include "token_batch_sampler.hpp"
#include "vocabulary.hpp"

namespace {

using parallel_text::Corpus;
using parallel_text::LongLines;
using parallel_text::TextFile;
using parallel_text::Vocabulary;
namespace text = rig_data::text;

constexpr const char* kPlugin = "parallel_text";

LongLines long_lines_of(const std::string& value) {
  if (value == "skip") return LongLines::skip;
  if (value == "keep") return LongLines::keep;
  return LongLines::truncate;
}

std::string counts_line(const Corpus& corpus, rig::Mode mode, std::int64_t max_length,
                        const std::string& files) {
  const auto& c = corpus.counts;
  std::vector<std::string> parts;
  if (c.skipped_empty > 0) parts.push_back(fmt::format("skipped {} empty lines", c.skipped_empty));
  if (c.truncated > 0) {
    parts.push_back(fmt::format("truncated {} lines over max_length {}", c.truncated, max_length));
  }
  if (c.skipped_long > 0) {
    parts.push_back(fmt::format("skipped {} lines over max_length {}", c.skipped_long, max_length));
  }
  if (c.kept_long > 0) {
    parts.push_back(fmt::format("kept {} lines over max_length {}", c.kept_long, max_length));
  }
  if (parts.empty()) return {};
  return fmt::format("{}: {}: {} ({})", kPlugin, rig::to_string(mode), fmt::join(parts, ", "),
                     files);
}

class ParallelText final : public rig::DataLayer {
 public:
  ParallelText(const YAML::Node& params, const rig::DataLayerContext& ctx)
      : mode_(ctx.run.mode),
        delimiter_(params["delimiter"].as<std::string>()),
        pad_lengths_(params["pad_lengths_to_eight"].as<bool>()),
        pad_vocab_(params["pad_vocab_to_eight"].as<bool>()),
        repeat_(params["repeat"].as<bool>()),
        src_vocab_(kPlugin, "src_vocab_file", params["src_vocab_file"].as<std::string>()),
        tgt_vocab_(kPlugin, "tgt_vocab_file", params["tgt_vocab_file"].as<std::string>()) {
    framing_.max_length = params["max_length"].as<std::int64_t>();
    framing_.use_start_token = params["use_start_token"].as<bool>();
    framing_.long_lines = long_lines_of(params["long_lines"].as<std::string>());
    if (delimiter_.empty()) throw rig::UserError(fmt::format("{}: delimiter is empty", kPlugin));
    if (framing_.max_length < (framing_.use_start_token ? 3 : 2)) {
      throw rig::UserError(fmt::format("{}: max_length {} leaves no room for a piece next to EOS{}",
                                       kPlugin, framing_.max_length,
                                       framing_.use_start_token ? " and <s>" : ""));
    }
    if (const auto model = params["sentencepiece_model"].as<std::string>(); !model.empty()) {
      piece_model_.emplace(kPlugin, "sentencepiece_model", model);
      piece_model_->check(src_vocab_);
    }
    tgt_joiner_ = joiner_of(tgt_vocab_);
    load(params, ctx);
  }

  YAML::Node info() const override {
    YAML::Node info = text::text2text_info(vocab_size(src_vocab_), vocab_size(tgt_vocab_));
    info["num_samples"] = corpus_.size();
    return info;
  }

  // Unknown with token batching: its batches do not hold a fixed number of pairs.
  std::int64_t epoch_size() const override { return tokens_ ? -1 : corpus_.size(); }

  void start_epoch(std::int64_t epoch) override {
    check_repeat(epoch);
    if (tokens_) {
      tokens_->start_epoch(epoch);
    } else {
      pairs_->start_epoch(epoch);
    }
  }

  std::optional<rig::Batch> next_batch() override {
    auto pairs = tokens_ ? tokens_->next() : pairs_->next();
    if (!pairs) return std::nullopt;
    return make_batch(*pairs);
  }

  YAML::Node position() const override {
    return tokens_ ? tokens_->position() : pairs_->position();
  }
  void seek(const YAML::Node& position) override {
    if (position.IsMap() && position["epoch"]) check_repeat(position["epoch"].as<std::int64_t>());
    if (tokens_) {
      tokens_->seek(position);
    } else {
      pairs_->seek(position);
    }
  }

  std::vector<std::string> decode(const rig::Batch& batch,
                                  const rig::Tensor& predictions) const override {
    std::vector<std::string> lines(batch.indices.size());
    text::for_each_prediction(kPlugin, predictions, static_cast<std::int64_t>(lines.size()),
                              [&](std::int64_t r, std::span<const std::int64_t> ids) {
                                std::vector<std::string_view> pieces;
                                for (const auto id : ids) {
                                  // Special ids, and those of pad_vocab_to_eight's padding.
                                  if (id < text::kNumSpecial || id >= tgt_vocab_.size()) continue;
                                  pieces.push_back(tgt_vocab_.piece(id));
                                }
                                lines[static_cast<std::size_t>(r)] = join(pieces, tgt_joiner_);
                              });
    return lines;
  }

  // The target line of each pair as written in target_file (not truncated,
  // no <unk>); none for a batch without targets (typed lines, or infer mode
  // without target_file).
  std::vector<std::string> decode_targets(const rig::Batch& batch) const override {
    std::vector<std::string> lines;
    if (!target_text_ || batch.tensors.find("target_ids") == batch.tensors.end()) return lines;
    lines.reserve(batch.indices.size());
    for (const auto line : batch.indices) {
      lines.push_back(join(split(target_text_->line(line)), tgt_joiner_));
    }
    return lines;
  }

  // Raw text lines, cut into pieces by sentencepiece_model.
  rig::Batch encode_lines(const std::vector<std::string>& lines) const override {
    if (!piece_model_) {
      throw rig::UserError(fmt::format(
          "{}: typed lines are raw text, which needs data_layer_params.sentencepiece_model (the "
          "SentencePiece model of src_vocab_file)",
          kPlugin));
    }
    parallel_text::Framing framing = framing_;
    if (framing.long_lines == LongLines::skip) framing.long_lines = LongLines::truncate;
    std::vector<std::vector<std::int32_t>> rows(lines.size());
    for (std::size_t r = 0; r < lines.size(); ++r) {
      for (const auto& piece : piece_model_->encode(lines[r])) {
        rows[r].push_back(src_vocab_.id(piece));
      }
      parallel_text::frame_row(rows[r], framing);
    }
    rig::Batch batch;
    const auto n = static_cast<std::int64_t>(rows.size());
    batch.num_objects = text::put_rows(batch, "source", n, pad_lengths_, [&](std::int64_t r) {
      return std::span<const std::int32_t>(rows[static_cast<std::size_t>(r)]);
    });
    for (std::int64_t r = 0; r < n; ++r) batch.indices.push_back(r);
    return batch;
  }

 private:
  void load(const YAML::Node& params, const rig::DataLayerContext& ctx) {
    const bool train = mode_ == rig::Mode::train;
    const TextFile source(kPlugin, "source_file", params["source_file"].as<std::string>());
    const auto target_path = params["target_file"].as<std::string>();
    if (target_path.empty() && mode_ != rig::Mode::infer) {
      throw rig::UserError(fmt::format("{}: {} mode needs target_file (the reference sentences)",
                                       kPlugin, rig::to_string(mode_)));
    }
    if (!target_path.empty()) target_text_.emplace(kPlugin, "target_file", target_path);
    parallel_text::CorpusOptions options;
    options.delimiter = delimiter_;
    options.framing = framing_;
    const auto empty_lines = params["empty_lines"].as<std::string>();
    options.skip_empty = empty_lines == "skip" || (empty_lines == "auto" && train);
    corpus_ = parallel_text::read_corpus(kPlugin, source, target_text_ ? &*target_text_ : nullptr,
                                         src_vocab_, tgt_vocab_, options);
    const std::string files =
        target_text_ ? fmt::format("{}, {}", source.name(), target_text_->name()) : source.name();
    if (corpus_.size() == 0) {
      throw rig::UserError(
          fmt::format("{}: no sentence pair is left to read ({})", kPlugin, files));
    }

    const std::uint64_t seed = rig_data::mix(params["seed"].as<std::uint64_t>()) ^ ctx.run.seed;
    const bool shuffle = params["shuffle"].as<bool>();
    const auto budget = params["batch_tokens"].as<std::int64_t>();
    if (train && budget > 0) {
      tokens_.emplace(kPlugin, token_costs(budget, files), budget,
                      params["bucket_chunk_size"].as<std::int64_t>(), seed, shuffle, ctx.run.rank,
                      ctx.run.world_size);
    } else {
      pairs_.emplace(kPlugin, corpus_.size(), seed, train, ctx.batch_size, ctx.run.rank,
                     ctx.run.world_size, shuffle);
    }
    // Last: a layer that fails to start says only why.
    const std::string counts = counts_line(corpus_, mode_, framing_.max_length, files);
    if (!counts.empty() && ctx.run.rank == 0) fmt::print(stderr, "{}\n", counts);
  }

  // The padded tokens each pair takes in a token batch: its longer row.
  std::vector<std::int64_t> token_costs(std::int64_t budget, const std::string& files) const {
    std::vector<std::int64_t> cost(static_cast<std::size_t>(corpus_.size()));
    for (std::int64_t i = 0; i < corpus_.size(); ++i) {
      std::int64_t c = std::max(corpus_.source.length(i), corpus_.target.length(i));
      if (pad_lengths_) c = text::round_up8(c);
      cost[static_cast<std::size_t>(i)] = c;
      if (c > budget) {
        throw rig::UserError(fmt::format(
            "{}: batch_tokens {} cannot hold line {} ({}), which takes {} padded tokens; raise "
            "batch_tokens or lower max_length",
            kPlugin, budget, corpus_.lines[static_cast<std::size_t>(i)] + 1, files, c));
      }
    }
    return cost;
  }

  void check_repeat(std::int64_t epoch) const {
    if (repeat_ || mode_ != rig::Mode::train || epoch == 0) return;
    throw rig::UserError(fmt::format(
        "{}: repeat is false, so the training data ends after one epoch; set max_steps within "
        "it or repeat: true",
        kPlugin));
  }

  rig::Batch make_batch(const std::vector<std::int64_t>& pairs) const {
    rig::Batch batch;
    const auto n = static_cast<std::int64_t>(pairs.size());
    const auto pair = [&](std::int64_t r) { return pairs[static_cast<std::size_t>(r)]; };
    const std::int64_t source_tokens =
        text::put_rows(batch, "source", n, pad_lengths_,
                       [&](std::int64_t r) { return corpus_.source.row(pair(r)); });
    batch.num_objects = source_tokens;
    if (target_text_) {
      const std::int64_t target_tokens =
          text::put_rows(batch, "target", n, pad_lengths_,
                         [&](std::int64_t r) { return corpus_.target.row(pair(r)); });
      if (mode_ != rig::Mode::infer) batch.num_objects = target_tokens;
    }
    batch.indices.reserve(pairs.size());
    for (const auto p : pairs) batch.indices.push_back(corpus_.lines[static_cast<std::size_t>(p)]);
    return batch;
  }

  std::int64_t vocab_size(const Vocabulary& vocab) const {
    return pad_vocab_ ? text::round_up8(vocab.size()) : vocab.size();
  }

  // SentencePiece pieces are glued and their U+2581 turned into spaces; the
  // pieces of a vocab without U+2581 (whole words) are joined with the delimiter.
  std::string joiner_of(const Vocabulary& vocab) const {
    for (std::int64_t id = text::kNumSpecial; id < vocab.size(); ++id) {
      if (vocab.piece(id).find(text::kWordBoundary) != std::string::npos) return {};
    }
    return delimiter_;
  }

  static std::string join(const std::vector<std::string_view>& pieces, const std::string& joiner) {
    if (joiner.empty()) return text::detokenize(pieces);
    return fmt::format("{}", fmt::join(pieces, joiner));
  }

  std::vector<std::string_view> split(std::string_view line) const {
    std::vector<std::string_view> pieces;
    parallel_text::for_each_piece(line, delimiter_,
                                  [&](std::string_view piece) { pieces.push_back(piece); });
    return pieces;
  }

  rig::Mode mode_;
  std::string delimiter_;
  bool pad_lengths_;
  bool pad_vocab_;
  bool repeat_;
  parallel_text::Framing framing_;
  Vocabulary src_vocab_;
  Vocabulary tgt_vocab_;
  std::string tgt_joiner_;
  std::optional<parallel_text::PieceModel> piece_model_;
  std::optional<TextFile> target_text_;  // for decode_targets
  Corpus corpus_;
  std::optional<rig_data::EpochSampler> pairs_;
  std::optional<parallel_text::TokenBatchSampler> tokens_;
};

}  // namespace

RIG_PLUGIN(data_layer, "parallel_text", "0.1.0",
           "line-aligned source/target files of pieces (OpenSeq2Seq's ParallelTextDataLayer), "
           "batched by pairs or by tokens in length buckets",
           ParallelText)
