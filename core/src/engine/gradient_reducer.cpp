#include "engine/gradient_reducer.hpp"

#include <algorithm>
#include <stdexcept>

namespace rig::engine {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_between(Clock::time_point begin, Clock::time_point end) {
  return std::chrono::duration<double>(end - begin).count();
}

}  // namespace

std::vector<Bucket> plan_buckets(const ParameterStore& params, std::int64_t cap_bytes) {
  const auto& infos = params.parameters();
  std::vector<Bucket> buckets;
  Bucket current;
  std::int64_t end = 0;  // one past the current bucket's last element
  auto close = [&] {
    if (current.parameters.empty()) return;
    current.numel = end - current.offset;
    buckets.push_back(std::move(current));
    current = {};
  };
  for (std::size_t i = infos.size(); i-- > 0;) {
    const ParameterInfo& p = infos[i];
    const std::int64_t p_end = p.offset + shape_numel(p.shape);
    if (!current.parameters.empty() &&
        (end - p.offset) * static_cast<std::int64_t>(sizeof(float)) > cap_bytes) {
      close();
    }
    if (current.parameters.empty()) end = p_end;
    current.offset = p.offset;
    current.parameters.push_back(i);
  }
  close();
  return buckets;
}

GradientReducer::GradientReducer(ParameterStore& params, Communicator& comm,
                                 BucketSettings settings, BucketPush push)
    : params_(params), comm_(comm), settings_(settings), push_(std::move(push)) {
  const auto cap_bytes = static_cast<std::int64_t>(settings.cap_mb * 1024.0 * 1024.0);
  buckets_ = plan_buckets(params, std::max<std::int64_t>(cap_bytes, 1));
  pending_.resize(buckets_.size());
  for (std::size_t b = 0; b < buckets_.size(); ++b) {
    for (const std::size_t i : buckets_[b].parameters) {
      bucket_of_leaf_[params.parameters()[i].value.impl()] = b;
    }
    if (settings.fp16_compression)
      scratch_.push_back(Tensor::empty({buckets_[b].numel}, DType::f16));
  }
}

std::int64_t GradientReducer::bytes_per_step() const {
  std::int64_t bytes = 0;
  for (const Bucket& b : buckets_) {
    bytes += b.numel * static_cast<std::int64_t>(settings_.fp16_compression ? 2 : 4);
  }
  return bytes;
}

void GradientReducer::arm(double unscale) {
  unscale_ = unscale;
  for (std::size_t b = 0; b < buckets_.size(); ++b) pending_[b] = buckets_[b].parameters.size();
  next_launch_ = 0;
  in_flight_.clear();
  armed_ = true;
}

void GradientReducer::leaf_grad_ready(const TensorImpl& leaf) {
  if (!armed_) return;
  const auto it = bucket_of_leaf_.find(&leaf);
  if (it == bucket_of_leaf_.end()) return;  // an input that requires a gradient, not a parameter
  std::size_t& pending = pending_[it->second];
  if (pending > 0) --pending;
  launch_ready();
}

void GradientReducer::launch_ready() {
  while (next_launch_ < buckets_.size() && pending_[next_launch_] == 0) launch(next_launch_++);
}

void GradientReducer::launch(std::size_t bucket) {
  const Bucket& b = buckets_[bucket];
  // 16-bit gradients, or scaled ones, leave as true f32 gradients.
  if (params_.compute_dtype() != DType::f32 || unscale_ != 1.0) {
    params_.unscale_grads(unscale_, b.offset, b.numel, /*largest=*/false);
  }
  Tensor slice = params_.grads().slice(0, b.offset, b.offset + b.numel);
  InFlight op{nullptr, slice, {}};
  if (push_) {
    push_(b.offset, slice);  // queued: the slice may change once this returns
    op.request = std::make_unique<CompletedRequest>();
  } else if (settings_.fp16_compression) {
    op.scratch = scratch_[bucket];
    op.scratch.copy_from(slice);  // rounds to f16
    op.request = comm_.allreduce(op.scratch, ReduceOp::average);
  } else {
    op.request = comm_.allreduce(slice, ReduceOp::average);
  }
  in_flight_.push_back(std::move(op));
}

ReductionStats GradientReducer::finish() {
  if (!armed_) throw std::logic_error("GradientReducer::finish without arm()");
  const auto backward_end = Clock::now();
  for (std::size_t b = next_launch_; b < buckets_.size(); ++b) pending_[b] = 0;
  launch_ready();
  armed_ = false;
  return wait_all(backward_end);
}

ReductionStats GradientReducer::wait_all(Clock::time_point backward_end) {
  ReductionStats stats;
  stats.timing_known = true;
  stats.buckets = static_cast<int>(in_flight_.size());
  for (InFlight& op : in_flight_) {
    op.request->wait();
    if (op.scratch.defined()) op.slice.copy_from(op.scratch);
    const CommTiming t = op.request->timing();
    stats.timing_known = stats.timing_known && t.known;
    if (t.known) stats.busy_seconds += seconds_between(t.start, t.end);
    stats.bytes += static_cast<double>((op.scratch.defined() ? op.scratch : op.slice).nbytes());
  }
  stats.exposed_seconds = seconds_between(backward_end, Clock::now());
  // A communicator that cannot say when its operations ran: count what we waited for.
  if (!stats.timing_known) stats.busy_seconds = stats.exposed_seconds;
  in_flight_.clear();
  return stats;
}

}  // namespace rig::engine
