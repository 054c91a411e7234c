// The shape of one kernel launch: the grid, the block and the dynamic shared
// memory. Plain host data, the same for the SIMT emulator and CUDA.
#pragma once

#include <cstddef>

namespace rig::simt {

inline constexpr unsigned kWarpSize = 32;
// Slots of Context::reduce_scratch (one per warp of the largest block).
inline constexpr unsigned kReduceSlots = 32;

struct Dim3 {
  unsigned x = 1, y = 1, z = 1;
  constexpr unsigned long long count() const { return static_cast<unsigned long long>(x) * y * z; }
  friend constexpr bool operator==(const Dim3&, const Dim3&) = default;
};

struct LaunchShape {
  Dim3 grid;
  Dim3 block;
  std::size_t shared_bytes = 0;  // dynamic shared memory per block
  friend constexpr bool operator==(const LaunchShape&, const LaunchShape&) = default;
};

}  // namespace rig::simt
