// What a device's memory is holding: every storage is counted under the label
// current on the thread that allocated it (the innermost MemoryLabel; the
// engine labels its phases "the forward pass", "the backward pass", "the
// model's parameters", ...), with its dtype and shape. The picture at the
// highest total since reset_peak_bytes() is kept, so a run can say what its
// peak memory was made of (what PyTorch users piece together from memory
// snapshots), and an allocation that fails can say what was live.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "rig/device.hpp"
#include "rig/dtype.hpp"
#include "rig/export.hpp"
#include "rig/shape.hpp"

namespace rig {

// Labels the storages this thread allocates while it lives; nested labels
// replace the outer one until they end.
class RIG_API MemoryLabel {
 public:
  explicit MemoryLabel(const char* label);  // a literal: it outlives every storage
  ~MemoryLabel();
  MemoryLabel(const MemoryLabel&) = delete;
  MemoryLabel& operator=(const MemoryLabel&) = delete;

 private:
  const char* previous_;
};

// The storages of one label, dtype and shape alive at one time.
struct LiveStorages {
  std::string label;  // empty: allocated outside every MemoryLabel
  DType dtype = DType::u8;
  Shape shape;
  std::int64_t count = 0;
  std::size_t bytes = 0;  // the allocator's blocks (as AllocatorStats counts them)
};

struct MemoryPicture {
  std::size_t bytes = 0;               // all live storages' blocks
  std::vector<LiveStorages> storages;  // largest bytes first
};

// The live storages of DEVICE at the highest total since the last
// reset_peak_bytes(DEVICE) (or since the start), and now.
RIG_API MemoryPicture memory_at_peak(Device device);
RIG_API MemoryPicture memory_now(Device device);

// A picture's storages by label, the largest total first.
struct LabelledStorages {
  std::string label;
  std::size_t bytes = 0;
  std::vector<LiveStorages> storages;  // largest first
};
RIG_API std::vector<LabelledStorages> by_label(const MemoryPicture& picture);
// A label as messages show it: the empty label (storages made outside every
// MemoryLabel) as "code outside the engine's phases".
RIG_API std::string_view shown_label(std::string_view label);

}  // namespace rig
