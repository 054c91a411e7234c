#include "sentencepiece_model.hpp"

#include <sentencepiece_processor.h>
#include <sentencepiece_trainer.h>

#include <fmt/format.h>

#include <unordered_map>

#include "rig/error.hpp"

namespace rig::prepare {
namespace {

constexpr std::string_view kWordBoundary = "\xE2\x96\x81";  // U+2581 ▁

// Feeds a fixed list of sentences to the trainer.
class ListIterator : public sentencepiece::SentenceIterator {
 public:
  explicit ListIterator(std::vector<std::string> lines) : lines_(std::move(lines)) {}
  bool done() const override { return next_ >= lines_.size(); }
  void Next() override { ++next_; }
  const std::string& value() const override { return lines_[next_]; }
  sentencepiece::util::Status status() const override { return {}; }

 private:
  std::vector<std::string> lines_;
  std::size_t next_ = 0;
};

void check(const sentencepiece::util::Status& status, std::string_view what) {
  if (!status.ok())
    throw rig::RunError(fmt::format("sentencepiece: {}: {}", what, status.ToString()));
}

// Pieces joined into text, U+2581 turned back into spaces, trimmed.
std::string join_pieces(const std::vector<std::string>& pieces) {
  std::string text;
  for (const std::string& piece : pieces) text += piece;
  std::string out;
  out.reserve(text.size());
  for (std::size_t i = 0; i < text.size(); ++i) {
    if (text.compare(i, kWordBoundary.size(), kWordBoundary) == 0) {
      out.push_back(' ');
      i += kWordBoundary.size() - 1;
    } else {
      out.push_back(text[i]);
    }
  }
  const std::size_t first = out.find_first_not_of(' ');
  if (first == std::string::npos) return {};
  return out.substr(first, out.find_last_not_of(' ') - first + 1);
}

}  // namespace

TextNormalizer::TextNormalizer()
    : model_(std::make_unique<sentencepiece::SentencePieceProcessor>()) {
  ListIterator sentences({"a"});
  std::string serialized;
  const std::unordered_map<std::string, std::string> args = {
      {"model_type", "char"},        {"vocab_size", "5"},
      {"hard_vocab_limit", "false"}, {"normalization_rule_name", "nmt_nfkc"},
      {"num_threads", "1"},          {"minloglevel", "2"}};
  check(sentencepiece::SentencePieceTrainer::Train(args, &sentences, &serialized),
        "building the normaliser");
  check(model_->LoadFromSerializedProto(serialized), "loading the normaliser");
}

TextNormalizer::~TextNormalizer() = default;

std::string TextNormalizer::normalize(std::string_view text) const {
  // Unknown characters come back as their normalised surface, so every
  // character survives even though the model knows only "a".
  return join_pieces(model_->EncodeAsPieces(text));
}

void train_shared_bpe(const std::vector<std::filesystem::path>& inputs,
                      const std::filesystem::path& model_prefix, const BpeOptions& options) {
  std::string input_list;
  for (const auto& input : inputs) {
    if (!input_list.empty()) input_list.push_back(',');
    input_list += input.string();
  }
  // The key-value form (not one argument string): paths may contain spaces.
  // input_sentence_size=0: every sentence, no random sampling; no shuffling.
  const std::unordered_map<std::string, std::string> args = {
      {"input", input_list},
      {"model_prefix", model_prefix.string()},
      {"model_type", "bpe"},
      {"vocab_size", std::to_string(options.vocab_size)},
      {"character_coverage", fmt::format("{}", options.character_coverage)},
      {"pad_id", "0"},
      {"eos_id", "1"},
      {"bos_id", "2"},
      {"unk_id", "3"},
      {"pad_piece", "<pad>"},
      {"eos_piece", "</s>"},
      {"bos_piece", "<s>"},
      {"unk_piece", "<unk>"},
      {"normalization_rule_name", "nmt_nfkc"},
      {"input_sentence_size", "0"},
      {"shuffle_input_sentence", "false"},
      {"num_threads", std::to_string(options.num_threads)},
      {"minloglevel", "2"},
  };
  const auto status = sentencepiece::SentencePieceTrainer::Train(args);
  if (!status.ok()) {
    // The corpus and --vocab-size are what the user controls: too small a vocabulary
    // for the corpus's characters, or more pieces than the corpus can give.
    throw rig::UserError(fmt::format("training the BPE model with --vocab-size {} failed: {}",
                                     options.vocab_size, status.ToString()));
  }
}

PieceEncoder::PieceEncoder(const std::filesystem::path& model_file)
    : model_(std::make_unique<sentencepiece::SentencePieceProcessor>()) {
  check(model_->Load(model_file.string()), "loading " + model_file.string());
}

PieceEncoder::~PieceEncoder() = default;

std::string PieceEncoder::encode(std::string_view line) const {
  std::string out;
  for (const std::string& piece : model_->EncodeAsPieces(line)) {
    if (!out.empty()) out.push_back(' ');
    out += piece;
  }
  return out;
}

std::string detokenize(std::string_view pieces) {
  std::vector<std::string> parts;
  std::size_t start = 0;
  while (start <= pieces.size()) {
    const std::size_t space = std::min(pieces.find(' ', start), pieces.size());
    parts.emplace_back(pieces.substr(start, space - start));
    start = space + 1;
  }
  return join_pieces(parts);
}

}  // namespace rig::prepare
