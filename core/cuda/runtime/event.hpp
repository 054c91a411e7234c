// An owned CUDA event (RAII, move-only): a point in a stream's work that other
// streams can wait for and the host can query.
#pragma once

#include <cuda_runtime_api.h>

namespace rig::cuda {

class Stream;

class Event {
 public:
  enum class Timing { off, on };
  // timing off (the default) is cheaper: what stream ordering needs.
  explicit Event(Timing timing = Timing::off);
  ~Event();
  Event(Event&& other) noexcept;
  Event& operator=(Event&& other) noexcept;
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;

  cudaEvent_t native() const { return event_; }

  // Marks the point after everything queued on `stream` so far.
  void record(const Stream& stream);
  // Whether the recorded point has been reached (true when never recorded).
  bool completed() const;
  // Blocks the calling thread until it has been reached.
  void synchronize() const;
  // Milliseconds from `start` to this event; both recorded with Timing::on.
  float milliseconds_since(const Event& start) const;

 private:
  cudaEvent_t event_ = nullptr;
};

}  // namespace rig::cuda
