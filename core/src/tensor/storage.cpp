// Storage: a device's bytes from the MemoryPool of its backend; the pool's
// counters per device.
#include <fmt/format.h>

#include <new>

#include "backend/backend.hpp"
#include "rig/tensor.hpp"
#include "tensor/out_of_memory.hpp"

namespace rig {

AllocatorStats allocator_stats(Device device) {
  return backend::backend_for(device).memory(device).stats();
}
std::optional<double> device_utilisation(Device device) {
  return backend::backend_for(device).device_utilisation(device);
}
bool set_convolution_autotuning(Device device, bool on) {
  return backend::backend_for(device).set_convolution_autotuning(device, on);
}
bool set_tf32(Device device, bool on) {
  return backend::backend_for(device).set_tf32(device, on);
}
void synchronize_device(Device device) {
  backend::backend_for(device).synchronize();
}
void reset_peak_bytes(Device device) {
  backend::backend_for(device).memory(device).reset_peak();
}
void empty_allocator_cache(Device device) {
  backend::backend_for(device).memory(device).empty_cache();
}

Storage::Storage(std::size_t bytes, Device device) : size_(bytes), device_(device) {
  backend::MemoryPool& pool = backend::backend_for(device).memory(device);
  backend::Block block;
  try {
    block = pool.allocate(bytes);
  } catch (const std::bad_alloc&) {
    throw out_of_memory(device, bytes, pool.stats(), pool.capacity());
  }
  data_ = block.data;
  capacity_ = block.capacity;
  stream_ = block.stream;
}

Storage::~Storage() {
  backend::backend_for(device_).memory(device_).deallocate({data_, capacity_, stream_});
}

}  // namespace rig
