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

Tensor Batch::host(const std::string& name) const {
  if (auto it = host_tensors.find(name); it != host_tensors.end()) return it->second;
  const Tensor& t = at(name);
  return t.device() == Device::cpu() ? t : t.to_host();
}

Batch Batch::to(Device device) const {
  Batch moved = *this;
  moved.host_tensors.clear();
  for (auto& [name, tensor] : moved.tensors) {
    if (!tensor.defined() || tensor.device() == device) continue;
    if (device.is_cpu()) {
      // Back to the host: the data layer's own tensors where they were kept.
      const auto kept = host_tensors.find(name);
      tensor = kept != host_tensors.end() ? kept->second : tensor.to_host();
    } else {
      if (tensor.device().is_cpu()) moved.host_tensors.emplace(name, tensor);
      tensor = tensor.to(device);
    }
  }
  return moved;
}

}  // namespace rig
