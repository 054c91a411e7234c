// A vocab file: one piece per line (SentencePiece's .vocab format
// `piece<TAB>score`; only the first column is read), the line number is the id,
// lines 0..3 are <pad>, </s>, <s>, <unk>.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace parallel_text {

class Vocabulary {
 public:
  // Reads and checks the file named by parameter `key`: misplaced special
  // tokens, empty or repeated pieces are a UserError naming the file and lines.
  Vocabulary(const std::string& plugin, const std::string& key, const std::string& path);

  std::int64_t size() const { return static_cast<std::int64_t>(pieces_.size()); }
  // The id of a piece, <unk>'s when the vocab does not hold it.
  std::int32_t id(std::string_view piece) const;
  const std::string& piece(std::int64_t id) const { return pieces_[static_cast<std::size_t>(id)]; }
  const std::string& path() const { return path_; }
  std::string name() const { return key_ + " " + path_; }

 private:
  // The id of `piece`, or -1. An open-addressing table of ids (one probe
  // touches one slot and the piece's string): corpora look up every piece.
  std::int32_t find(std::string_view piece, std::size_t hash) const;

  std::string key_;
  std::string path_;
  std::vector<std::string> pieces_;
  std::vector<std::int32_t> slots_;  // id, or -1 for an empty slot; size a power of 2
  std::size_t mask_ = 0;
};

}  // namespace parallel_text
