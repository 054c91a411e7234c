// The bookkeeping behind rig/memory_labels.hpp: per device, the live
// storages' bytes by (label, dtype, shape), and the picture at the peak.
// Storage counts itself in at construction and out at destruction.
#pragma once

#include <cstddef>

#include "rig/device.hpp"
#include "rig/dtype.hpp"
#include "rig/shape.hpp"

namespace rig::detail {

struct LedgerEntry;  // one (label, dtype, shape) of one device; lives as long as the process

// Counts a storage whose block is `bytes` under this thread's current label.
LedgerEntry* count_in(Device device, DType dtype, const Shape& shape, std::size_t bytes);
void count_out(LedgerEntry* entry, std::size_t bytes);
// The peak starts again from what is live now.
void reset_ledger_peak(Device device);

}  // namespace rig::detail
