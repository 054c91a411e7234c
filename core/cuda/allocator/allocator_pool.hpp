// backend::MemoryPool over a DeviceCachingAllocator, with blocks for one
// stream: how a KernelDevice's tensors take memory from the GPU's allocator
// (runtime/gpu_device.cpp) and from the same bookkeeping over host memory on
// the emulated device (emulated/emulated_device.cpp), so that the emulator's
// memory figures are those a GPU would report.
#pragma once

#include "backend/memory.hpp"
#include "cuda/allocator/device_caching_allocator.hpp"

namespace rig::cuda {

class AllocatorPool : public backend::MemoryPool {
 public:
  AllocatorPool(DeviceCachingAllocator& allocator, StreamId stream)
      : allocator_(allocator), stream_(stream) {}

  backend::Block allocate(std::size_t bytes) override {
    const DeviceBlock block = allocator_.allocate(bytes, stream_);
    return {block.data, block.capacity, block.stream};
  }
  void deallocate(const backend::Block& block) noexcept override {
    allocator_.deallocate({block.data, block.capacity, block.stream});
  }
  AllocatorStats stats() const override { return allocator_.stats(); }
  void reset_peak() override { allocator_.reset_peak(); }
  void empty_cache() override { allocator_.empty_cache(); }
  std::optional<backend::DeviceCapacity> capacity() const override { return allocator_.capacity(); }

 private:
  DeviceCachingAllocator& allocator_;
  StreamId stream_;
};

}  // namespace rig::cuda
