// The gradient statistics of steps whose host decisions do not need them (no
// automatic loss scaling, no parameter server; clipping reads the norm on the
// device): each step queues its statistics on the device, and the trainer
// reads them all at once when it logs, saves, evaluates or ends, so such a
// step never waits for the device.
#pragma once

#include <cstdint>
#include <vector>

#include "rig/op_types.hpp"
#include "rig/tensor.hpp"

namespace rig::engine {

class QueuedGradientStats {
 public:
  // Steps queued at most: a full queue is read before the next push.
  static constexpr std::int64_t kCapacity = 1024;

  struct Record {
    std::int64_t step = 0;
    GradientStats stats;
  };

  explicit QueuedGradientStats(Device device) : device_(device) {}

  // Queues step `step`'s statistics of grads (each times `scale`: the model's
  // 16-bit gradients, unscaled as read) and loss (an f32 scalar; may be undefined).
  void push(std::int64_t step, const Tensor& grads, const Tensor& loss, float scale = 1.0F);
  bool full() const { return static_cast<std::int64_t>(steps_.size()) == kCapacity; }
  bool empty() const { return steps_.empty(); }
  // Every queued record, oldest first, in one read of the device; empties the queue.
  std::vector<Record> take();
  // Clips grads by the global norm of the last step pushed, on the device
  // (ops::clip_by_recorded_norm_). Throws when nothing is queued.
  void clip_by_last_norm(Tensor& grads, double max_norm) const;

 private:
  Device device_;
  Tensor records_;  // i64 [kCapacity * kGradientStatsWords], made by the first push
  std::vector<std::int64_t> steps_;
};

}  // namespace rig::engine
