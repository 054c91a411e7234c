#include "teacher_forcing.hpp"

#include <algorithm>
#include <stdexcept>
#include <vector>

#include <fmt/format.h>

namespace rig_transformer {

rig::Tensor teacher_forced_predictions(const rig::Tensor& argmax, const rig::Tensor& target_lengths,
                                       std::int64_t eos_id, std::int64_t pad_id) {
  if (argmax.dtype() != rig::DType::i64 || argmax.dim() != 2 ||
      target_lengths.dtype() != rig::DType::i64 || target_lengths.dim() != 1 ||
      target_lengths.size(0) != argmax.size(0)) {
    throw std::invalid_argument(fmt::format(
        "teacher_forced_predictions: argmax {} {} and target_lengths {} {}, expected i64 [B, T] "
        "and i64 [B]",
        rig::dtype_name(argmax.dtype()), rig::to_string(argmax.shape()),
        rig::dtype_name(target_lengths.dtype()), rig::to_string(target_lengths.shape())));
  }
  const std::int64_t width = argmax.size(1);
  std::vector<std::int64_t> tokens = argmax.to_int_vector();
  const std::vector<std::int64_t> lengths = target_lengths.to_int_vector();
  for (std::size_t b = 0; b < lengths.size(); ++b) {
    const auto row = tokens.begin() + static_cast<std::ptrdiff_t>(b) * width;
    const auto reference_end = row + std::clamp<std::int64_t>(lengths[b], 0, width);
    const auto eos = std::find(row, reference_end, eos_id);
    std::fill(eos == reference_end ? reference_end : eos + 1, row + width, pad_id);
  }
  return rig::Tensor::from_vector(tokens, argmax.shape(), argmax.device());
}

}  // namespace rig_transformer
