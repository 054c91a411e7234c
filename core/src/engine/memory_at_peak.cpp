#include "engine/memory_at_peak.hpp"

#include <algorithm>

#include <fmt/format.h>

#include "rig/byte_size.hpp"

namespace rig::engine {

namespace {

// "36 x bf16 [64,125,2048] 563 MiB"
std::string tensors_text(const LiveStorages& s) {
  return fmt::format("{}{} {} {}", s.count > 1 ? fmt::format("{} x ", s.count) : std::string(),
                     dtype_name(s.dtype), to_string(s.shape), readable_bytes(s.bytes));
}

}  // namespace

std::vector<std::string> memory_at_peak_lines(const MemoryPicture& picture, std::size_t max_labels,
                                              std::size_t tensors_per_label) {
  const std::vector<LabelledStorages> labels = by_label(picture);
  if (labels.empty()) return {};
  std::vector<std::string> lines;
  lines.push_back(
      fmt::format("Tensors at the peak, {}, by what made them:", readable_bytes(picture.bytes)));
  std::size_t width = 0;
  const std::size_t shown = std::min(max_labels, labels.size());
  for (std::size_t i = 0; i < shown; ++i)
    width = std::max(width, shown_label(labels[i].label).size());
  for (std::size_t i = 0; i < shown; ++i) {
    const LabelledStorages& l = labels[i];
    std::string line =
        fmt::format("  {:<{}} {:>10}:", shown_label(l.label), width, readable_bytes(l.bytes));
    const std::size_t n = std::min(tensors_per_label, l.storages.size());
    for (std::size_t j = 0; j < n; ++j) {
      line += fmt::format("{} {}", j == 0 ? "" : ",", tensors_text(l.storages[j]));
    }
    if (l.storages.size() > n) line += fmt::format(" and {} more shapes", l.storages.size() - n);
    lines.push_back(line);
  }
  if (labels.size() > shown) {
    std::size_t rest = 0;
    for (std::size_t i = shown; i < labels.size(); ++i) rest += labels[i].bytes;
    lines.push_back(fmt::format("  {} more: {}", labels.size() - shown, readable_bytes(rest)));
  }
  return lines;
}

}  // namespace rig::engine
