// Batch lookups.
#include "rig/batch.hpp"

#include <stdexcept>

#include <fmt/format.h>

namespace rig {

const Tensor& Batch::at(const std::string& name) const {
  if (auto it = tensors.find(name); it != tensors.end()) return it->second;
  std::vector<std::string> names;
  names.reserve(tensors.size());
  for (const auto& [key, value] : tensors) names.push_back(key);
  throw std::invalid_argument(fmt::format(
      "the batch has no tensor '{}'; it has: {}", name,
      names.empty() ? std::string("(none)") : fmt::format("{}", fmt::join(names, ", "))));
}

Batch Batch::to(Device device) const {
  Batch moved = *this;
  for (auto& [name, tensor] : moved.tensors) {
    if (tensor.defined()) tensor = tensor.to(device);
  }
  return moved;
}

}  // namespace rig
