#include "piece_model.hpp"

#include <algorithm>
#include <exception>
#include <filesystem>

#include <fmt/format.h>
#include <sentencepiece_processor.h>

#include "rig/error.hpp"

namespace parallel_text {

PieceModel::PieceModel(const std::string& plugin, const std::string& key, const std::string& path)
    : plugin_(plugin),
      name_(key + " " + path),
      processor_(std::make_unique<sentencepiece::SentencePieceProcessor>()) {
  std::error_code error;
  if (!std::filesystem::is_regular_file(path, error)) {
    throw rig::UserError(fmt::format("{}: {}: file not found", plugin_, name_));
  }
  // Its status names sentencepiece's own source lines: not for the user. Some
  // corrupt models make it throw instead (its Darts trie refuses an empty
  // piece): the same error, not an exception from inside the library.
  bool loaded = false;
  try {
    loaded = processor_->Load(path).ok();
  } catch (const std::exception&) {
    loaded = false;
  }
  if (!loaded) {
    throw rig::UserError(fmt::format(
        "{}: {}: not a SentencePiece model (the .model file spm_train writes, not the .vocab)",
        plugin_, name_));
  }
}

PieceModel::~PieceModel() = default;
PieceModel::PieceModel(PieceModel&&) noexcept = default;
PieceModel& PieceModel::operator=(PieceModel&&) noexcept = default;

void PieceModel::check(const Vocabulary& vocab) const {
  const std::int64_t model_size = processor_->GetPieceSize();
  const std::int64_t common = std::min(model_size, vocab.size());
  for (std::int64_t id = 0; id < common; ++id) {
    const std::string& piece = processor_->IdToPiece(static_cast<int>(id));
    if (piece != vocab.piece(id)) {
      throw rig::UserError(fmt::format(
          "{}: {} does not match {}: id {} (line {}) is '{}' in the vocab but '{}' in the model",
          plugin_, vocab.name(), name_, id, id + 1, vocab.piece(id), piece));
    }
  }
  if (model_size != vocab.size()) {
    throw rig::UserError(fmt::format(
        "{}: {} does not match {}: the vocab has {} pieces, the model {} (first missing id {})",
        plugin_, vocab.name(), name_, vocab.size(), model_size, common));
  }
}

std::vector<std::string> PieceModel::encode(std::string_view line) const {
  std::vector<std::string> pieces;
  sentencepiece::util::Status status;
  try {
    status = processor_->Encode(std::string(line), &pieces);
  } catch (const std::exception& e) {
    throw rig::UserError(
        fmt::format("{}: {} cannot encode '{}': {}", plugin_, name_, line, e.what()));
  }
  if (!status.ok()) {
    throw rig::UserError(
        fmt::format("{}: {} cannot encode '{}': {}", plugin_, name_, line, status.ToString()));
  }
  return pieces;
}

}  // namespace parallel_text
