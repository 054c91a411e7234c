#include "tensor/out_of_memory.hpp"

#include <algorithm>

#include <fmt/format.h>

#include "rig/byte_size.hpp"

namespace rig {

OutOfMemoryError out_of_memory(Device device, std::size_t requested, const AllocatorStats& held,
                               const std::optional<backend::DeviceCapacity>& capacity,
                               const std::vector<LabelledStorages>& live) {
  const std::string name = to_string(device);
  std::string facts = fmt::format("a tensor of {} did not fit. ", readable_bytes(requested));
  facts += capacity ? fmt::format("{} has {}: ", device.is_cpu() ? "The host" : name,
                                  readable_bytes(capacity->total))
                    : std::string();
  facts += fmt::format("rig's tensors hold {}", readable_bytes(held.current_bytes));
  // What made them (rig/memory_labels.hpp): the engine's phases, largest first.
  std::string made_by;
  for (std::size_t i = 0; i < live.size() && i < 3; ++i) {
    made_by += fmt::format("{}{} {}", i == 0 ? "" : ", ", shown_label(live[i].label),
                           readable_bytes(live[i].bytes));
  }
  if (!made_by.empty()) facts += fmt::format(" (made by {})", made_by);
  // The allocator empties its cache and tries again before it fails: what
  // it still caches could not be given back.
  if (held.cached_bytes > 0) {
    facts += fmt::format(", its allocator caches {} more", readable_bytes(held.cached_bytes));
  }
  if (capacity) {
    const std::size_t rig = held.current_bytes + held.cached_bytes;
    const std::size_t used = capacity->total - std::min(capacity->total, capacity->available);
    const std::size_t other = used - std::min(used, rig);
    if (other > 0) {
      facts += fmt::format(", {} is used outside rig's allocator ({})", readable_bytes(other),
                           device.is_cpu() ? "rig's own code and other programs"
                                           : "the CUDA context, libraries, other processes");
    }
    facts += fmt::format(", {} is free", readable_bytes(capacity->available));
  }
  facts += ".";
  return {name, facts};
}

}  // namespace rig
