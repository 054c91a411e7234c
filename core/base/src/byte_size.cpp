#include "rig/byte_size.hpp"

#include <fmt/format.h>

namespace rig {

std::string readable_bytes(std::size_t bytes) {
  constexpr double kKiB = 1024.0;
  constexpr double kMiB = kKiB * kKiB;
  const auto b = static_cast<double>(bytes);
  if (b < kKiB) return fmt::format("{} B", bytes);
  if (b < kMiB) return fmt::format("{:.1f} KiB", b / kKiB);
  if (b < kKiB * kMiB) return fmt::format("{:.1f} MiB", b / kMiB);
  return fmt::format("{:.2f} GiB", b / (kKiB * kMiB));
}

}  // namespace rig
