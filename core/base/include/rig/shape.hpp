// Shapes, strides (in elements) and axis lists, and the shape arithmetic every
// layer shares: element counts, contiguous strides, NumPy broadcasting.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "rig/small_vector.hpp"

namespace rig {

// Shapes, strides and axis lists keep up to kInlineDims entries inside the
// object (no heap allocation); they convert to and from std::vector<int64_t>.
inline constexpr std::size_t kInlineDims = 6;
using Shape = SmallVector<std::int64_t, kInlineDims>;
using Strides = SmallVector<std::int64_t, kInlineDims>;  // in elements
using Axes = SmallVector<std::int64_t, kInlineDims>;
std::string to_string(const Shape& shape);  // "[32,64]"
std::int64_t shape_numel(const Shape& shape);
Strides contiguous_strides(const Shape& shape);
// NumPy broadcasting of two shapes; throws std::invalid_argument naming `op` and both shapes.
Shape broadcast_shapes(const Shape& a, const Shape& b, std::string_view op);

}  // namespace rig
