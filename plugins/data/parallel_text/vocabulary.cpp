#include "vocabulary.hpp"

#include <functional>

#include <fmt/format.h>

#include "../common/text_batch.hpp"
#include "rig/error.hpp"
#include "text_file.hpp"

namespace parallel_text {

namespace text = rig_data::text;

Vocabulary::Vocabulary(const std::string& plugin, const std::string& key, const std::string& path)
    : key_(key), path_(path) {
  const TextFile file(plugin, key, path);
  pieces_.reserve(static_cast<std::size_t>(file.size()));
  std::size_t capacity = 16;
  while (capacity < 2 * static_cast<std::size_t>(file.size())) capacity *= 2;
  slots_.assign(capacity, -1);
  mask_ = capacity - 1;
  for (std::int64_t i = 0; i < file.size(); ++i) {
    const std::string_view line = file.line(i);
    const std::string piece(line.substr(0, line.find('\t')));
    if (i < text::kNumSpecial && piece != text::kSpecialPieces[i]) {
      throw rig::UserError(fmt::format(
          "{}: {}: line {} must be '{}' (lines 1-4 are <pad>, </s>, <s>, <unk>: ids 0-3), found "
          "'{}'",
          plugin, name(), i + 1, text::kSpecialPieces[i], piece));
    }
    if (piece.empty()) {
      throw rig::UserError(fmt::format("{}: {}: line {} holds no piece", plugin, name(), i + 1));
    }
    const std::size_t hash = std::hash<std::string_view>{}(piece);
    if (const std::int32_t seen = find(piece, hash); seen >= 0) {
      throw rig::UserError(fmt::format("{}: {}: piece '{}' on line {} repeats line {}", plugin,
                                       name(), piece, i + 1, seen + 1));
    }
    std::size_t slot = hash & mask_;
    while (slots_[slot] >= 0) slot = (slot + 1) & mask_;
    slots_[slot] = static_cast<std::int32_t>(i);
    pieces_.push_back(piece);
  }
  if (size() < text::kNumSpecial) {
    throw rig::UserError(
        fmt::format("{}: {}: {} line(s); a vocab starts with the 4 lines <pad>, </s>, <s>, <unk>",
                    plugin, name(), size()));
  }
}

std::int32_t Vocabulary::find(std::string_view piece, std::size_t hash) const {
  for (std::size_t slot = hash & mask_;; slot = (slot + 1) & mask_) {
    const std::int32_t id = slots_[slot];
    if (id < 0 || pieces_[static_cast<std::size_t>(id)] == piece) return id;
  }
}

std::int32_t Vocabulary::id(std::string_view piece) const {
  const std::int32_t found = find(piece, std::hash<std::string_view>{}(piece));
  return found < 0 ? text::kUnk : found;
}

}  // namespace parallel_text
