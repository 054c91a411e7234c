#include "cuda/runtime/stream.hpp"

#include <utility>

#include "cuda/runtime/cuda_error.hpp"
#include "cuda/runtime/device_guard.hpp"
#include "cuda/runtime/event.hpp"

namespace rig::cuda {

Stream::Stream(int device) : device_(device) {
  DeviceGuard guard(device);
  RIG_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
}

namespace {

// Waits for the stream's work before destroying it: the driver may hand the
// same handle to the next stream, and the caching allocator reuses a block
// freed on a stream for that stream's next allocation without waiting, so a
// reused handle must not have work of its predecessor still running.
void destroy(cudaStream_t stream) noexcept {
  if (stream == nullptr) return;
  cudaStreamSynchronize(stream);
  cudaStreamDestroy(stream);
}

}  // namespace

Stream::~Stream() {
  destroy(stream_);
}

Stream::Stream(Stream&& other) noexcept
    : stream_(std::exchange(other.stream_, nullptr)), device_(other.device_) {}

Stream& Stream::operator=(Stream&& other) noexcept {
  if (this != &other) {
    destroy(stream_);
    stream_ = std::exchange(other.stream_, nullptr);
    device_ = other.device_;
  }
  return *this;
}

void Stream::wait(const Event& event) const {
  RIG_CUDA_CHECK(cudaStreamWaitEvent(stream_, event.native(), 0));
}

void Stream::synchronize() const {
  RIG_CUDA_CHECK(cudaStreamSynchronize(stream_));
}

bool Stream::idle() const {
  const cudaError_t code = cudaStreamQuery(stream_);
  if (code == cudaErrorNotReady) {
    cudaGetLastError();
    return false;
  }
  RIG_CUDA_CHECK(code);
  return true;
}

}  // namespace rig::cuda
