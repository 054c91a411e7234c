// Storage: a device's bytes from the MemoryPool of its backend; the pool's
// counters per device.
#include <fmt/format.h>

#include <new>

#include "backend/backend.hpp"
#include "rig/memory_labels.hpp"
#include "rig/tensor.hpp"
#include "tensor/memory_ledger.hpp"
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
  detail::reset_ledger_peak(device);
}
void empty_allocator_cache(Device device) {
  backend::backend_for(device).memory(device).empty_cache();
}

Storage::Storage(std::size_t bytes, Device device, DType dtype, const Shape& shape)
    : size_(bytes), device_(device) {
  backend::MemoryPool& pool = backend::backend_for(device).memory(device);
  backend::Block block;
  try {
    block = pool.allocate(bytes);
  } catch (const std::bad_alloc&) {
    throw out_of_memory(device, bytes, pool.stats(), pool.capacity(), by_label(memory_now(device)));
  }
  data_ = block.data;
  capacity_ = block.capacity;
  stream_ = block.stream;
  try {
    ledger_entry_ = detail::count_in(device, dtype, shape, capacity_);
  } catch (...) {
    pool.deallocate(block);
    throw;
  }
}

Storage::~Storage() {
  detail::count_out(ledger_entry_, capacity_);
  backend::backend_for(device_).memory(device_).deallocate({data_, capacity_, stream_});
}

}  // namespace rig
