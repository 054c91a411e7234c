// The SentencePiece model of the source side (libsentencepiece): encodes the
// raw lines typed in interactive infer, after checking at start-up that it
// and the vocab file agree on every id.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "vocabulary.hpp"

namespace sentencepiece {
class SentencePieceProcessor;
}

namespace parallel_text {

class PieceModel {
 public:
  // Loads the model file named by parameter `key`; a missing or unreadable
  // file is a UserError.
  PieceModel(const std::string& plugin, const std::string& key, const std::string& path);
  ~PieceModel();
  PieceModel(PieceModel&&) noexcept;
  PieceModel& operator=(PieceModel&&) noexcept;

  // Vocab line i must be the model's piece i, for every i, and the counts
  // must agree; else a UserError naming both files and the first id that
  // differs.
  void check(const Vocabulary& vocab) const;
  // The pieces of one raw text line.
  std::vector<std::string> encode(std::string_view line) const;

 private:
  std::string plugin_;
  std::string name_;  // "sentencepiece_model PATH"
  std::unique_ptr<sentencepiece::SentencePieceProcessor> processor_;
};

}  // namespace parallel_text
