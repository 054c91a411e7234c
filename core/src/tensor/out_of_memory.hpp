// What a failed allocation tells the user: how much more did not fit, what
// rig held on the device (tensors, and the allocator's cache it gave back
// before the last try, and which of the engine's phases made the tensors),
// and the device's size and free memory where known.
#pragma once

#include <cstddef>
#include <optional>
#include <vector>

#include "backend/memory.hpp"
#include "rig/allocator_stats.hpp"
#include "rig/device.hpp"
#include "rig/error.hpp"
#include "rig/memory_labels.hpp"

namespace rig {

// `live`: by_label(memory_now(device)), what made the tensors rig holds.
OutOfMemoryError out_of_memory(Device device, std::size_t requested, const AllocatorStats& held,
                               const std::optional<backend::DeviceCapacity>& capacity,
                               const std::vector<LabelledStorages>& live = {});

}  // namespace rig
