#include "cuda/runtime/event.hpp"

#include <utility>

#include "cuda/runtime/cuda_error.hpp"
#include "cuda/runtime/stream.hpp"

namespace rig::cuda {

Event::Event(Timing timing) {
  RIG_CUDA_CHECK(cudaEventCreateWithFlags(
      &event_, timing == Timing::on ? cudaEventDefault : cudaEventDisableTiming));
}

Event::~Event() {
  if (event_ != nullptr) cudaEventDestroy(event_);
}

Event::Event(Event&& other) noexcept : event_(std::exchange(other.event_, nullptr)) {}

Event& Event::operator=(Event&& other) noexcept {
  if (this != &other) {
    if (event_ != nullptr) cudaEventDestroy(event_);
    event_ = std::exchange(other.event_, nullptr);
  }
  return *this;
}

void Event::record(const Stream& stream) {
  RIG_CUDA_CHECK(cudaEventRecord(event_, stream.native()));
}

bool Event::completed() const {
  const cudaError_t code = cudaEventQuery(event_);
  if (code == cudaErrorNotReady) {
    cudaGetLastError();
    return false;
  }
  RIG_CUDA_CHECK(code);
  return true;
}

void Event::synchronize() const {
  RIG_CUDA_CHECK(cudaEventSynchronize(event_));
}

float Event::milliseconds_since(const Event& start) const {
  float ms = 0.0F;
  RIG_CUDA_CHECK(cudaEventElapsedTime(&ms, start.event_, event_));
  return ms;
}

}  // namespace rig::cuda
