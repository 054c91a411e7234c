#include "cuda/runtime/device_memory.hpp"

#include <cstdlib>
#include <memory>
#include <new>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>

#include "cuda/runtime/cuda_error.hpp"
#include "cuda/runtime/device_guard.hpp"

namespace rig::cuda {
namespace {

cudaEvent_t as_event(DeviceMemorySource::Marker marker) {
  return reinterpret_cast<cudaEvent_t>(marker);
}

bool caching_enabled() {
  const char* env = std::getenv("RIG_ALLOCATOR");
  return env == nullptr || std::string_view(env) != "system";
}

}  // namespace

CudaMemorySource::~CudaMemorySource() {
  for (cudaEvent_t event : spare_events_) cudaEventDestroy(event);
}

std::byte* CudaMemorySource::allocate(std::size_t bytes) {
  DeviceGuard guard(device_);
  void* p = nullptr;
  const cudaError_t code = cudaMalloc(&p, bytes);
  if (code == cudaErrorMemoryAllocation) {
    cudaGetLastError();  // not sticky: the caller may free its cache and retry
    throw std::bad_alloc();
  }
  RIG_CUDA_CHECK(code);
  return static_cast<std::byte*>(p);
}

std::optional<backend::DeviceCapacity> CudaMemorySource::capacity() const {
  DeviceGuard guard(device_);
  std::size_t free = 0;
  std::size_t total = 0;
  if (cudaMemGetInfo(&free, &total) != cudaSuccess) {
    cudaGetLastError();
    return std::nullopt;
  }
  return backend::DeviceCapacity{total, free};
}

void CudaMemorySource::release(std::byte* data) noexcept {
  // cudaFree waits for the work still using the block.
  cudaFree(data);
}

DeviceMemorySource::Marker CudaMemorySource::record(StreamId stream) {
  cudaEvent_t event = nullptr;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!spare_events_.empty()) {
      event = spare_events_.back();
      spare_events_.pop_back();
    }
  }
  if (event == nullptr) {
    DeviceGuard guard(device_);
    RIG_CUDA_CHECK(cudaEventCreateWithFlags(&event, cudaEventDisableTiming));
  }
  const cudaError_t code = cudaEventRecord(event, reinterpret_cast<cudaStream_t>(stream));
  if (code != cudaSuccess) {
    release_marker(reinterpret_cast<Marker>(event));
    RIG_CUDA_CHECK(code);
  }
  return reinterpret_cast<Marker>(event);
}

bool CudaMemorySource::completed(Marker marker) {
  const cudaError_t code = cudaEventQuery(as_event(marker));
  if (code == cudaErrorNotReady) {
    cudaGetLastError();
    return false;
  }
  RIG_CUDA_CHECK(code);
  return true;
}

void CudaMemorySource::wait(Marker marker) {
  RIG_CUDA_CHECK(cudaEventSynchronize(as_event(marker)));
}

void CudaMemorySource::release_marker(Marker marker) noexcept {
  std::lock_guard<std::mutex> lock(mutex_);
  try {
    spare_events_.push_back(as_event(marker));
  } catch (...) {
    cudaEventDestroy(as_event(marker));  // no room to keep it
  }
}

DeviceCachingAllocator& device_allocator(int device) {
  struct PerDevice {
    CudaMemorySource source;
    DeviceCachingAllocator allocator;
    explicit PerDevice(int d) : source(d), allocator(source, caching_enabled()) {}
  };
  static std::mutex mutex;
  // Leaked on purpose: buffers may be freed by static destructors, and the
  // CUDA runtime may already be shut down when this one's would run.
  static auto* per_device = new std::vector<std::unique_ptr<PerDevice>>();
  static const int count = device_count();  // fixed for the process's life
  if (device < 0 || device >= count) {
    throw std::invalid_argument("device_allocator: no device cuda:" + std::to_string(device) +
                                " (" + std::to_string(count) + " visible)");
  }
  std::lock_guard<std::mutex> lock(mutex);
  if (per_device->size() < static_cast<std::size_t>(count)) per_device->resize(count);
  auto& slot = (*per_device)[static_cast<std::size_t>(device)];
  if (!slot) slot = std::make_unique<PerDevice>(device);
  return slot->allocator;
}

DeviceBuffer::DeviceBuffer(std::size_t bytes, const Stream& stream)
    : allocator_(&device_allocator(stream.device())),
      block_(allocator_->allocate(bytes, stream.id())) {}

DeviceBuffer::~DeviceBuffer() {
  free();
}

DeviceBuffer::DeviceBuffer(DeviceBuffer&& other) noexcept
    : allocator_(std::exchange(other.allocator_, nullptr)),
      block_(std::exchange(other.block_, DeviceBlock{})),
      used_on_(std::move(other.used_on_)) {}

DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& other) noexcept {
  if (this != &other) {
    free();
    allocator_ = std::exchange(other.allocator_, nullptr);
    block_ = std::exchange(other.block_, DeviceBlock{});
    used_on_ = std::move(other.used_on_);
  }
  return *this;
}

void DeviceBuffer::record_use(const Stream& stream) {
  if (stream.id() == block_.stream) return;
  for (StreamId id : used_on_) {
    if (id == stream.id()) return;
  }
  used_on_.push_back(stream.id());
}

void DeviceBuffer::free() noexcept {
  if (allocator_ == nullptr || block_.data == nullptr) return;
  allocator_->deallocate(block_, used_on_);
  block_ = DeviceBlock{};
  used_on_.clear();
}

}  // namespace rig::cuda
