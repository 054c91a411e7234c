// An owned CUDA stream on one device (RAII, move-only).
#pragma once

#include <cuda_runtime_api.h>

#include "cuda/allocator/device_caching_allocator.hpp"

namespace rig::cuda {

class Event;

class Stream {
 public:
  // A non-blocking stream on `device`: it does not wait for the legacy default stream.
  explicit Stream(int device);
  ~Stream();  // waits for the work queued on it (see stream.cu)
  Stream(Stream&& other) noexcept;
  Stream& operator=(Stream&& other) noexcept;
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;

  cudaStream_t native() const { return stream_; }
  StreamId id() const { return reinterpret_cast<StreamId>(stream_); }
  int device() const { return device_; }

  // Work queued on this stream after the call waits for `event` (no host wait).
  void wait(const Event& event) const;
  // Blocks the calling thread until everything queued so far has finished.
  void synchronize() const;
  // Whether everything queued so far has finished.
  bool idle() const;

 private:
  cudaStream_t stream_ = nullptr;
  int device_ = 0;
};

}  // namespace rig::cuda
