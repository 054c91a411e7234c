// What the text2text data layers (parallel_text, synthetic_text) share: the
// special token ids, padded id rows as batch tensors, and turning predicted
// ids back into text (docs/data-text.md has the batch layout).
#pragma once

#include <algorithm>
#include <cstdint>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include <fmt/format.h>
#include <yaml-cpp/yaml.h>

#include "rig/batch.hpp"

namespace rig_data::text {

// OpenSeq2Seq's SpecialTextTokens: lines 0..3 of every vocab file.
enum SpecialId : std::int32_t { kPad = 0, kEos = 1, kGo = 2, kUnk = 3 };
constexpr std::int32_t kNumSpecial = 4;
constexpr const char* kSpecialPieces[kNumSpecial] = {"<pad>", "</s>", "<s>", "<unk>"};
// SentencePiece's word-boundary marker U+2581, in UTF-8.
constexpr std::string_view kWordBoundary = "\xE2\x96\x81";

inline std::int64_t round_up8(std::int64_t n) {
  return (n + 7) / 8 * 8;
}

// Writes rows[0..n) (each already holding its <s> and EOS) as `<side>_ids`
// i64 [n, L] (PAD after each row; L the longest row, rounded up to a multiple
// of 8 when pad8) and `<side>_lengths` i64 [n]. Returns the tokens written
// (without PAD). row_at(r) gives a std::span<const std::int32_t>.
template <class RowAt>
std::int64_t put_rows(rig::Batch& batch, const std::string& side, std::int64_t n, bool pad8,
                      RowAt&& row_at) {
  std::int64_t width = 0;
  for (std::int64_t r = 0; r < n; ++r) {
    width = std::max(width, static_cast<std::int64_t>(row_at(r).size()));
  }
  if (pad8) width = round_up8(width);
  rig::Tensor ids = rig::Tensor::zeros({n, width}, rig::DType::i64);  // PAD is 0
  rig::Tensor lengths = rig::Tensor::empty({n}, rig::DType::i64);
  auto* id = ids.data<std::int64_t>();
  auto* length = lengths.data<std::int64_t>();
  std::int64_t tokens = 0;
  for (std::int64_t r = 0; r < n; ++r) {
    const std::span<const std::int32_t> row = row_at(r);
    std::copy(row.begin(), row.end(), id + r * width);
    length[r] = static_cast<std::int64_t>(row.size());
    tokens += length[r];
  }
  batch.tensors[side + "_ids"] = std::move(ids);
  batch.tensors[side + "_lengths"] = std::move(lengths);
  return tokens;
}

// info() of a text2text data layer.
inline YAML::Node text2text_info(std::int64_t src_vocab_size, std::int64_t tgt_vocab_size) {
  YAML::Node info;
  info["task"] = "text2text";
  info["src_vocab_size"] = src_vocab_size;
  info["tgt_vocab_size"] = tgt_vocab_size;
  info["pad_id"] = static_cast<int>(kPad);
  info["eos_id"] = static_cast<int>(kEos);
  info["go_id"] = static_cast<int>(kGo);
  info["unk_id"] = static_cast<int>(kUnk);
  return info;
}

// Checks that predictions are token ids i64 [rows, L] and calls
// emit(r, ids of row r up to its first EOS) for every row.
template <class Emit>
void for_each_prediction(const std::string& plugin, const rig::Tensor& predictions,
                         std::int64_t rows, Emit&& emit) {
  if (predictions.dtype() != rig::DType::i64 || predictions.dim() != 2 ||
      predictions.size(0) != rows) {
    throw std::invalid_argument(
        fmt::format("{}: expected token ids i64 [{}, L] to decode, got {} {}", plugin, rows,
                    rig::dtype_name(predictions.dtype()), rig::to_string(predictions.shape())));
  }
  const std::int64_t width = predictions.size(1);
  const auto* p = predictions.data<std::int64_t>();
  for (std::int64_t r = 0; r < rows; ++r) {
    const std::int64_t* row = p + r * width;
    const std::int64_t* end = std::find(row, row + width, std::int64_t{kEos});
    emit(r, std::span<const std::int64_t>(row, end));
  }
}

// SentencePiece pieces -> text: concatenated, U+2581 (the word-boundary
// marker) turned into a space, leading and trailing spaces trimmed.
inline std::string detokenize(const std::vector<std::string_view>& pieces) {
  std::string text;
  for (const auto piece : pieces) {
    for (std::size_t i = 0; i < piece.size();) {
      if (piece.compare(i, kWordBoundary.size(), kWordBoundary) == 0) {
        text += ' ';
        i += kWordBoundary.size();
      } else {
        text += piece[i++];
      }
    }
  }
  const auto first = text.find_first_not_of(' ');
  if (first == std::string::npos) return {};
  return text.substr(first, text.find_last_not_of(' ') - first + 1);
}

}  // namespace rig_data::text
