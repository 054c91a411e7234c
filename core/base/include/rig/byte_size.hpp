// Byte counts as people read them, for logs and messages.
#pragma once

#include <cstddef>
#include <string>

#include "rig/export.hpp"

namespace rig {

// "812 B", "3.4 KiB", "96.0 MiB", "12.41 GiB".
RIG_API std::string readable_bytes(std::size_t bytes);

}  // namespace rig
