// Asynchronous copies between pinned host buffers and device memory, queued on
// a stream: the call returns at once and the copy runs while the host and
// other streams go on. Pageable host memory would make them synchronous, so
// only PinnedBuffer is accepted.
#pragma once

#include <cstddef>

#include "cuda/runtime/pinned_buffer.hpp"
#include "cuda/runtime/stream.hpp"

namespace rig::cuda {

// Copies the first `bytes` of `source` to `device_destination` on `stream`.
// `source` must stay alive and unchanged until the stream has passed the copy.
void copy_to_device_async(std::byte* device_destination, const PinnedBuffer& source,
                          std::size_t bytes, const Stream& stream);

// Copies `bytes` from `device_source` into the start of `destination` on `stream`;
// read `destination` only after the stream (or an event after the copy) has passed it.
void copy_to_host_async(PinnedBuffer& destination, const std::byte* device_source,
                        std::size_t bytes, const Stream& stream);

}  // namespace rig::cuda
