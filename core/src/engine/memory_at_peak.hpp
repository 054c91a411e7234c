// The console's account of a device's peak memory: each label that made
// tensors live at the peak (the engine's phases: "the forward pass", "the
// model's parameters", ...), largest first, with its largest tensors.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "rig/memory_labels.hpp"

namespace rig::engine {

// Lines without the console's "*** " prefix; none for an empty picture.
std::vector<std::string> memory_at_peak_lines(const MemoryPicture& picture,
                                              std::size_t max_labels = 5,
                                              std::size_t tensors_per_label = 3);

}  // namespace rig::engine
