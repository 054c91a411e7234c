// The SentencePiece parts of corpus preparation (libsentencepiece, in-process):
// NFKC normalisation, training the shared BPE model and encoding lines to pieces.
#pragma once

#include <filesystem>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace sentencepiece {
class SentencePieceProcessor;
}

namespace rig::prepare {

// SentencePiece's own "nmt_nfkc" normalisation (NFKC, control characters
// dropped, whitespace runs collapsed, trimmed): the normalisation the trained
// model applies, so a normalised line is exactly what its pieces detokenize to.
// libsentencepiece 0.1.97 exposes the normaliser only inside a model, so this
// trains a throwaway character model on one sentence (milliseconds) and reads
// the normalised text back from its pieces.
class TextNormalizer {
 public:
  TextNormalizer();
  ~TextNormalizer();
  TextNormalizer(const TextNormalizer&) = delete;
  TextNormalizer& operator=(const TextNormalizer&) = delete;
  std::string normalize(std::string_view text) const;

 private:
  std::unique_ptr<sentencepiece::SentencePieceProcessor> model_;
};

struct BpeOptions {
  int vocab_size = 8000;
  int num_threads = 2;
  double character_coverage = 0.9999;
};

// Trains a BPE model on every line of `inputs` (no sampling, no shuffling:
// deterministic) with pad=0 <pad>, eos=1 </s>, bos=2 <s>, unk=3 <unk>, writing
// model_prefix.model and model_prefix.vocab. Throws rig::UserError when
// sentencepiece refuses (a --vocab-size that does not fit the corpus).
void train_shared_bpe(const std::vector<std::filesystem::path>& inputs,
                      const std::filesystem::path& model_prefix, const BpeOptions& options);

// Encodes lines into space-delimited pieces with a trained model.
class PieceEncoder {
 public:
  explicit PieceEncoder(const std::filesystem::path& model_file);
  ~PieceEncoder();
  PieceEncoder(const PieceEncoder&) = delete;
  PieceEncoder& operator=(const PieceEncoder&) = delete;
  std::string encode(std::string_view line) const;

 private:
  std::unique_ptr<sentencepiece::SentencePieceProcessor> model_;
};

// Space-delimited pieces back to text: concatenate, U+2581 -> space, trim.
std::string detokenize(std::string_view pieces);

}  // namespace rig::prepare
