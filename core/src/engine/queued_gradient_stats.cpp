#include "engine/queued_gradient_stats.hpp"

#include <stdexcept>

#include "rig/ops.hpp"

namespace rig::engine {

void QueuedGradientStats::push(std::int64_t step, const Tensor& grads, const Tensor& loss,
                               float scale) {
  if (full()) throw std::logic_error("QueuedGradientStats::push on a full queue: take() first");
  if (!records_.defined()) {
    records_ = Tensor::zeros({kCapacity * kGradientStatsWords}, DType::i64, device_);
  }
  ops::gradient_stats_into(grads, loss, records_, static_cast<std::int64_t>(steps_.size()), scale);
  steps_.push_back(step);
}

void QueuedGradientStats::clip_by_last_norm(Tensor& grads, double max_norm) const {
  if (steps_.empty()) throw std::logic_error("QueuedGradientStats::clip_by_last_norm: none queued");
  ops::clip_by_recorded_norm_(grads, records_, static_cast<std::int64_t>(steps_.size()) - 1,
                              max_norm);
}

std::vector<QueuedGradientStats::Record> QueuedGradientStats::take() {
  std::vector<Record> records;
  if (steps_.empty()) return records;
  const std::vector<GradientStats> stats =
      ops::read_gradient_stats(records_, static_cast<std::int64_t>(steps_.size()));
  records.reserve(stats.size());
  for (std::size_t i = 0; i < stats.size(); ++i) records.push_back({steps_[i], stats[i]});
  steps_.clear();
  return records;
}

}  // namespace rig::engine
