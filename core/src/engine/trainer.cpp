#include "engine/trainer.hpp"

#include <chrono>
#include <cmath>
#include <csignal>
#include <limits>

#include <fmt/format.h>

#include "engine/activity.hpp"
#include "engine/bottleneck.hpp"
#include "engine/device_data.hpp"
#include "engine/evaluator.hpp"
#include "engine/gradient_norm.hpp"
#include "engine/memory_at_peak.hpp"
#include "engine/ps/protocol.hpp"
#include "engine/ps/staleness_report.hpp"
#include "engine/queued_gradient_stats.hpp"
#include "engine/stop_signals.hpp"
#include "launch/progress_beacon.hpp"
#include "launch/test_faults.hpp"
#include "rig/byte_size.hpp"
#include "rig/error.hpp"
#include "rig/ops.hpp"

namespace rig::engine {
namespace {

constexpr double kMiB = 1024.0 * 1024.0;

using Clock = std::chrono::steady_clock;

double seconds_between(Clock::time_point begin, Clock::time_point end) {
  return std::chrono::duration<double>(end - begin).count();
}

// Consecutive overflowing steps after which automatic loss scaling gives up:
// the gradients are not finite at any scale, so the run has diverged.
constexpr std::int64_t kMaxConsecutiveOverflows = 50;

// Seconds spent in each phase, summed over an interval of steps.
struct PhaseTimes {
  double data = 0.0;
  double forward = 0.0;
  double backward = 0.0;
  double communication = 0.0;  // after backward: waiting for the reduction, agreeing
  double comm_busy = 0.0;      // the communicator ran this step's gradient reduction
  double comm_bytes = 0.0;     // gradient bytes reduced per rank
  double optimizer = 0.0;
  double step = 0.0;
  double objects = 0.0;  // over all ranks
  std::int64_t steps = 0;
  double gradient_norm = 0.0;
  double staleness = 0.0;  // parameter server: of the weights pulled
  std::int64_t staleness_max = 0;
  std::int64_t global_step = 0;  // parameter server: the servers' step after the last pull

  void add(const PhaseTimes& o) {
    staleness += o.staleness;
    staleness_max = std::max(staleness_max, o.staleness_max);
    global_step = std::max(global_step, o.global_step);
    data += o.data;
    forward += o.forward;
    backward += o.backward;
    communication += o.communication;
    comm_busy += o.comm_busy;
    comm_bytes += o.comm_bytes;
    optimizer += o.optimizer;
    step += o.step;
    objects += o.objects;
    steps += o.steps;
    gradient_norm += o.gradient_norm;
  }
};

// The train loss summed over an interval of steps, on the device: read only
// when the interval's line or summary is written.
class LossSum {
 public:
  explicit LossSum(Device device) : device_(device) { reset(); }
  void add(const Tensor& step_loss) { sum_ = ops::add(sum_, step_loss); }
  double mean(std::int64_t steps) const {
    return static_cast<double>(sum_.item()) / static_cast<double>(std::max<std::int64_t>(steps, 1));
  }
  void reset() { sum_ = Tensor::zeros({}, DType::f32, device_); }

 private:
  Device device_;
  Tensor sum_;
};

class TrainingLoop {
 public:
  TrainingLoop(const TrainerParts& parts, const TrainOptions& options, const Console& console)
      : p_(parts),
        o_(options),
        s_(options.settings),
        console_(console),
        state_(options.start),
        device_(parts.params.values().device()),
        print_loss_(device_),
        summary_loss_(device_),
        queued_stats_(device_),
        queues_stats_(!p_.loss_scaler.automatic() && p_.ps == nullptr),
        folds_publish_(p_.optimizer.folds_mixed_precision() &&
                       p_.params.compute_dtype() != DType::f32 && !s_.round_masters &&
                       p_.ps == nullptr),
        folds_unscale_(folds_publish_ && p_.reducer == nullptr && p_.deterministic == nullptr &&
                       !s_.max_grad_norm && !o_.larc) {
    fetch_ahead_explicitly(p_.data);  // in forward_backward, once the forward is queued
  }

  TrainResult run();

 private:
  // One attempted step; false when an overflow skipped the update.
  bool step(PhaseTimes& times);
  // Forward and backward of one micro-batch; returns its loss (f32, on the device).
  // Nothing when the epoch ended before micro-batch `micro` > 0 (next_batch).
  std::optional<Tensor> forward_backward(std::int64_t micro, PhaseTimes& times);
  // Reduction, unscaling and (several ranks) the agreement: the statistics of
  // the finished gradients, with step_loss turned into the mean over ranks;
  // nothing when the step queued them (queues_stats_).
  std::optional<GradientStats> finish_gradients(Tensor& step_loss, PhaseTimes& times);
  // The overflow branch: no update; stops when loss scaling cannot help.
  void skip_update(const GradientStats& grads, double loss_scale);
  // Without automatic loss scaling a non-finite loss or gradient ends training.
  [[noreturn]] void diverged(const GradientStats& grads, std::int64_t step) const;
  void update(const std::optional<GradientStats>& grads, PhaseTimes& times);
  // Reads the queued steps' statistics: their norms join the intervals, and
  // a step that diverged ends training, named. Returns the seconds it waited.
  double read_queued_stats();
  // Several ranks: the stop signal anyone received, and the mean loss over
  // ranks (non-finite when any rank's is), in one collective. The signals
  // and rank 0's checkpoint clock are read a step late (agreement_): every
  // rank acts on them after the same step, and no step waits for the device.
  Tensor agree(const Tensor& step_loss);
  // Acts on the pending agreement of an earlier step, if any.
  void collect_agreement();
  int stop_signal() const { return agrees() ? agreed_stop_signal_ : StopSignals::received(); }
  // Several ranks agree on the loss and on stopping at every step, except the
  // workers of an asynchronous parameter server, which never wait for each other.
  bool agrees() const {
    return p_.comm.size() > 1 && (p_.ps == nullptr || p_.ps->settings().max_staleness == 0);
  }
  bool asynchronous_workers() const { return p_.ps != nullptr && p_.comm.size() > 1 && !agrees(); }
  // Parameter server: this worker pushed its last gradient (worker 0 then
  // gathers the final state when it saves).
  void finish_pushing();
  void print_parameter_server();
  YAML::Node ps_state(const ps::SnapshotResult& snap) const;
  void print_bottleneck();
  // The next batch, in a new epoch when this one is over; nothing when the
  // epoch ended inside a step (micro > 0): the step begins again in the new
  // epoch, so that the micro-batches of a step never straddle two epochs.
  // That drops an epoch's tail of fewer than processes x iter_size batches,
  // the tail a run with iter_size times the processes drops (the data layer
  // drops its last incomplete batch of processes x batch_size), so that any N
  // x k with the same product sees the same samples in the same steps.
  std::optional<Batch> next_batch(std::int64_t micro);
  void after_step(PhaseTimes times);
  void print_sample(const Batch& batch);
  void write_summaries();
  // The fields a checkpoint needs beyond the step (and, under a parameter
  // server, the weights and optimizer state from the servers).
  void refresh_state();
  void save();
  void sync_buffers();
  void evaluate_now();
  void record_result();
  // A resumed checkpoint already at (or past) max_steps: no step, no save.
  TrainResult nothing_to_train();
  bool due(std::int64_t every) const { return every > 0 && state_.step % every == 0; }
  bool last_step() const { return state_.step == o_.max_steps; }

  const TrainerParts& p_;
  const TrainOptions& o_;
  const EngineSettings& s_;
  const Console& console_;
  TrainingState state_;
  Device device_;  // the parameters', the batches' and the loss's
  LossSum print_loss_;
  LossSum summary_loss_;
  QueuedGradientStats queued_stats_;
  // No host decision of a step needs its gradient statistics (no automatic
  // loss scaling or parameter server): they are queued, not read.
  bool queues_stats_;
  // Mixed precision folded into the optimizer's pass (Optimizer::
  // folds_mixed_precision): the update writes the model's 16-bit values
  // (folds_publish_), and reads the model's 16-bit gradients unscaled as it
  // reads them, as do the statistics (folds_unscale_: one process, nothing
  // that rewrites grads() first: no clipping, no LARC). The f32 master
  // gradients are then never written.
  bool folds_publish_;
  bool folds_unscale_;
  float step_unscale_ = 1.0F;  // this step's 1 / loss scale, where folds_unscale_
  Tensor last_loss_;           // the last step's, for the progress bar (read only when drawn)
  TrainResult result_;
  PhaseTimes print_interval_;
  PhaseTimes summary_interval_;
  PhaseTimes timed_;  // every step but the first (which warms caches)
  std::int64_t first_step_ = 0;
  std::int64_t consecutive_overflows_ = 0;
  double last_learning_rate_ = 0.0;
  Clock::time_point run_start_ = Clock::now();
  std::optional<Batch> sample_batch_;   // kept when samples are due this step
  int agreed_stop_signal_ = 0;          // several ranks stop together, at the same step
  bool agreed_checkpoint_due_ = false;  // several ranks: rank 0's clock asked for a checkpoint
  ops::LaterRead agreement_;            // the last agree()'s flags, not read yet
  int signal_sent_ = 0;                 // this rank's signal in agreement_
  bool clock_sent_ = false;             // rank 0: its clock's request is on its way
  Clock::time_point last_save_ = Clock::now();
  bool checkpoint_time_due() const {
    return s_.checkpoint_every_s > 0.0 &&
           seconds_between(last_save_, Clock::now()) >= s_.checkpoint_every_s;
  }
  // Parameter server: this worker sent its last push; the bytes it had moved
  // before this step; the final state worker 0 gathered.
  bool pushing_done_ = false;
  std::int64_t ps_bytes_before_ = 0;
  std::int64_t ps_applied_before_ = 0;
  std::optional<ps::SnapshotResult> final_snapshot_;
  // The device's utilisation (where it can tell), sampled at the logging steps.
  double utilisation_sum_ = 0.0;
  std::int64_t utilisation_samples_ = 0;
  std::optional<double> sample_utilisation() {
    const std::optional<double> u = device_utilisation(device_);
    if (u) {
      utilisation_sum_ += *u;
      ++utilisation_samples_;
    }
    return u;
  }
};

Tensor TrainingLoop::agree(const Tensor& step_loss) {
  const int signal = StopSignals::received();
  // Rank 0's clock says when a time-based checkpoint is due, for everyone
  // (once: not again while its request is on its way).
  const bool save_due = p_.comm.rank() == 0 && !clock_sent_ && checkpoint_time_due();
  clock_sent_ = clock_sent_ || save_due;
  // The ranks signalled, the sum of their signal numbers (so that every rank
  // names the signal the others got), and the checkpoint flag.
  const Tensor flags =
      Tensor::from_vector(std::vector<float>{signal != 0 ? 1.0F : 0.0F, static_cast<float>(signal),
                                             save_due ? 1.0F : 0.0F},
                          {3}, device_);
  Tensor sums = ops::concat({flags, step_loss.reshape({1})}, 0);
  p_.comm.allreduce(sums, ReduceOp::sum)->wait();
  // The step before's flags: their copy arrived while this step ran.
  collect_agreement();
  agreement_ = ops::read_later(sums.slice(0, 0, 3));
  signal_sent_ = signal;
  return ops::mul_scalar(sums.slice(0, 3, 4).reshape({}),
                         1.0F / static_cast<float>(p_.comm.size()));
}

void TrainingLoop::collect_agreement() {
  agreed_checkpoint_due_ = false;
  if (!agreement_.pending()) return;
  const std::vector<float> agreed = agreement_.values();
  if (agreed[0] > 0.0F) {
    const float mean = agreed[1] / agreed[0];
    // Different signals on different ranks: call it SIGTERM.
    agreed_stop_signal_ =
        mean == std::floor(mean) && (signal_sent_ == 0 || static_cast<int>(mean) == signal_sent_)
            ? static_cast<int>(mean)
            : SIGTERM;
  }
  agreed_checkpoint_due_ = agreed[2] > 0.0F;
  if (agreed_checkpoint_due_) clock_sent_ = false;
}

std::optional<Batch> TrainingLoop::next_batch(std::int64_t micro) {
  if (auto batch = p_.data.next_batch()) return batch;
  ++state_.epoch;
  p_.data.start_epoch(state_.epoch);
  if (micro > 0) return std::nullopt;
  if (auto batch = p_.data.next_batch()) return batch;
  throw UserError(fmt::format(
      "the training data layer produced no batch in epoch {}: is the data set smaller than one "
      "global batch (batch_size_per_gpu x processes x iter_size)?",
      state_.epoch));
}

bool TrainingLoop::step(PhaseTimes& times) {
  const auto step_begin = Clock::now();
  const double loss_scale = p_.loss_scaler.scale();
  GradientReducer* const reducer = p_.reducer;
  if (reducer != nullptr) reducer->arm(1.0 / loss_scale);
  p_.params.zero_grad();
  Tensor step_loss;
  bool began_again = false;
  for (std::int64_t micro = 0; micro < s_.iter_size; ++micro) {
    const std::optional<Tensor> loss = forward_backward(micro, times);
    if (!loss) {
      // The epoch ended inside the step: its micro-batches so far are dropped
      // (no bucket has left: they leave during the last micro-batch only).
      if (began_again) {
        throw UserError(fmt::format(
            "one epoch of the training data holds fewer than the {} micro-batches of a step "
            "(processes x iter_size): use a smaller batch_size_per_gpu or iter_size",
            static_cast<std::int64_t>(p_.comm.size()) * s_.iter_size));
      }
      began_again = true;
      p_.params.zero_grad();
      micro = -1;
      continue;
    }
    if (p_.deterministic != nullptr) p_.deterministic->micro_done(micro);
    step_loss = micro == 0 ? *loss : ops::add(step_loss, *loss);
  }
  if (s_.iter_size > 1)
    step_loss = ops::mul_scalar(step_loss, 1.0F / static_cast<float>(s_.iter_size));
  const ActivityScope activity("the optimizer update", state_.step);
  const std::optional<GradientStats> grads = finish_gradients(step_loss, times);
  if (grads && (!grads->loss_finite || !std::isfinite(grads->norm))) {
    skip_update(*grads, loss_scale);
    return false;
  }
  consecutive_overflows_ = 0;
  update(grads, times);
  print_loss_.add(step_loss);
  summary_loss_.add(step_loss);
  last_loss_ = step_loss;
  times.step += seconds_between(step_begin, Clock::now());
  times.steps = 1;
  ++state_.step;
  return true;
}

std::optional<Tensor> TrainingLoop::forward_backward(std::int64_t micro, PhaseTimes& times) {
  const std::int64_t step = state_.step;
  const auto world = static_cast<std::uint32_t>(p_.comm.size());
  const auto rank = static_cast<std::uint32_t>(p_.comm.rank());
  const auto t0 = Clock::now();
  std::optional<Batch> next = [&] {
    const ActivityScope activity("the data layer's batch", step);
    return next_batch(micro);
  }();
  if (!next) return std::nullopt;
  Batch batch = std::move(*next);
  // Keyed on the micro-batch's place in the global batch, not on the rank:
  // N processes and one process with iter_size N draw the same dropout.
  batch.rng = RandomKey{s_.random_seed, static_cast<std::uint64_t>(step), 0,
                        static_cast<std::uint32_t>(micro) * world + rank};
  const auto t1 = Clock::now();
  ModelOutput out = [&] {
    const ActivityScope activity("the forward pass", step);
    return p_.model.forward(batch, Mode::train);
  }();
  const auto forward_end = Clock::now();
  // The next batch's host work while the device runs this forward, its copy
  // alongside this backward (device_data.hpp).
  const bool fetched = [&] {
    const ActivityScope activity("the data layer's next batch", step);
    return fetch_ahead(p_.data);
  }();
  const auto t2 = Clock::now();
  // The loss is scaled for float16 gradients and averaged over micro-batches,
  // like one batch iter_size times larger. A non-finite loss is found with the
  // gradient statistics, after backward: no read of the device here.
  // (Deterministic reduction averages once, after its canonical sum.)
  const double factor = p_.loss_scaler.scale() /
                        (p_.deterministic != nullptr ? 1.0 : static_cast<double>(s_.iter_size));
  const Tensor scaled =
      factor != 1.0 ? ops::mul_scalar(out.loss, static_cast<float>(factor)) : out.loss;
  {
    // The last micro-batch completes the gradients: buckets leave as they fill.
    std::optional<autograd::ScopedLeafGradListener> listening;
    GradientReducer* const reducer = p_.reducer;
    if (reducer != nullptr && micro + 1 == s_.iter_size) {
      listening.emplace(*reducer);
    }
    const ActivityScope activity("the backward pass", step);
    scaled.backward();
  }
  const auto t3 = Clock::now();
  times.objects += static_cast<double>(batch.num_objects) * world;
  times.data += seconds_between(t0, t1) + seconds_between(forward_end, t2);
  times.forward += seconds_between(t1, forward_end);
  times.backward += seconds_between(t2, t3);
  p_.timeline.phase("data", step, t0, t1);
  p_.timeline.phase("forward", step, t1, forward_end);
  if (fetched) p_.timeline.phase("data", step, forward_end, t2);
  p_.timeline.phase("backward", step, t2, t3);
  const bool samples_due =
      s_.print_samples_steps && console_.enabled() && (step + 1) % *s_.print_samples_steps == 0;
  if (samples_due && micro + 1 == s_.iter_size) sample_batch_ = std::move(batch);
  const Tensor loss = out.loss.detach();
  return loss.dtype() == DType::f32 ? loss : loss.to(DType::f32);
}

std::optional<GradientStats> TrainingLoop::finish_gradients(Tensor& step_loss, PhaseTimes& times) {
  const auto c0 = Clock::now();
  const double loss_scale = p_.loss_scaler.scale();
  GradientReducer* const reducer = p_.reducer;
  ReductionStats reduction;
  if (reducer != nullptr) reduction = reducer->finish();
  if (p_.deterministic != nullptr) reduction = p_.deterministic->finish();
  // Unscaling moves 16-bit gradients into the f32 masters and divides them by
  // the loss scale: with f32 gradients and scale 1 it has nothing to do. The
  // reducer has unscaled each bucket before it left.
  if (reducer == nullptr && (p_.params.compute_dtype() != DType::f32 || loss_scale != 1.0)) {
    if (folds_unscale_) {
      step_unscale_ = static_cast<float>(1.0 / loss_scale);  // as unscale_grads rounds it
    } else {
      // The statistics after it give the largest gradient.
      p_.params.unscale_grads(1.0 / loss_scale, 0, p_.params.numel(), /*largest=*/false);
    }
  }
  // Every rank must take the same branch after this: skip on anyone's
  // overflow, stop when anyone got a signal. The loss printed is the global mean.
  if (agrees()) step_loss = agree(step_loss);
  // After the reduction, so every rank agrees on the norm, the largest
  // gradient (LogMax's statistic) and an overflow any rank saw: one trip to
  // the device when a decision needs them, otherwise queued for the logging.
  const Tensor finished = folds_unscale_ ? p_.params.compute_grads() : p_.params.grads();
  const float unscale = folds_unscale_ ? step_unscale_ : 1.0F;
  std::optional<GradientStats> grads;
  if (queues_stats_) {
    if (queued_stats_.full()) read_queued_stats();
    queued_stats_.push(state_.step, finished, step_loss, unscale);
  } else {
    grads = ops::gradient_stats(finished, step_loss, unscale);
  }
  const auto c1 = Clock::now();
  times.communication += seconds_between(c0, c1);
  times.comm_busy += reduction.busy_seconds;
  if (p_.ps == nullptr) times.comm_bytes += reduction.bytes;
  p_.timeline.phase("communication", state_.step, c0, c1);
  return grads;
}

void TrainingLoop::diverged(const GradientStats& grads, std::int64_t step) const {
  if (!grads.loss_finite) {
    throw UserError(
        fmt::format("train loss is {} at step {}: training diverged. Lower the learning rate, set "
                    "max_grad_norm, check the data, or (float16 / mixed) use loss_scaling: Backoff",
                    grads.loss, step));
  }
  throw UserError(
      fmt::format("gradients are not finite (inf or NaN) at step {} and loss_scaling is {}: lower "
                  "the learning rate or loss_scaling, or use loss_scaling: Backoff or LogMax",
                  step, p_.loss_scaler.describe()));
}

double TrainingLoop::read_queued_stats() {
  if (queued_stats_.empty()) return 0.0;
  const auto t0 = Clock::now();
  for (const QueuedGradientStats::Record& r : queued_stats_.take()) {
    if (!r.stats.loss_finite || !std::isfinite(r.stats.norm)) diverged(r.stats, r.step);
    print_interval_.gradient_norm += r.stats.norm;
    summary_interval_.gradient_norm += r.stats.norm;
  }
  return seconds_between(t0, Clock::now());
}

void TrainingLoop::skip_update(const GradientStats& grads, double loss_scale) {
  const std::int64_t step = state_.step;
  if (!p_.loss_scaler.automatic()) diverged(grads, step);
  p_.loss_scaler.update(true, grads.amax);
  console_.print("*** Overflow at step {}: loss scale {} -> {}, update skipped", step, loss_scale,
                 p_.loss_scaler.scale());
  ++result_.skipped_steps;
  if (++consecutive_overflows_ >= kMaxConsecutiveOverflows) {
    throw UserError(fmt::format(
        "gradients overflowed for {} consecutive steps (at step {}, loss scale now {}): "
        "training diverged; lower the learning rate or set max_grad_norm",
        consecutive_overflows_, step, p_.loss_scaler.scale()));
  }
  sample_batch_.reset();
}

void TrainingLoop::update(const std::optional<GradientStats>& grads, PhaseTimes& times) {
  const auto c1 = Clock::now();
  if (p_.ps != nullptr) {
    // The servers ran the optimizer on the pushed gradients: fetch its result.
    last_learning_rate_ = p_.lr_policy.learning_rate(state_.step);
    const ps::PullResult pulled = p_.ps->pull(state_.step + 1);
    p_.params.publish_values();
    const auto c2 = Clock::now();
    times.communication += seconds_between(c1, c2);
    p_.timeline.phase("communication", state_.step, c1, c2);
    if (asynchronous_workers()) {
      // Asynchronous workers go at their own pace: what the job trained on
      // since the last pull is the pushes the servers applied meanwhile (this
      // worker's objects per push), not this worker's batch times the workers.
      const double mine = times.objects / static_cast<double>(p_.comm.size());
      times.objects = mine * static_cast<double>(pulled.applied_pushes - ps_applied_before_);
    }
    ps_applied_before_ = pulled.applied_pushes;
    times.staleness = static_cast<double>(pulled.staleness);
    times.staleness_max = pulled.staleness;
    times.global_step = pulled.global_step;
    times.comm_bytes += static_cast<double>(p_.ps->bytes_moved() - ps_bytes_before_);
    ps_bytes_before_ = p_.ps->bytes_moved();
    times.gradient_norm += grads.value().norm;  // a parameter server reads them
    return;
  }
  if (s_.max_grad_norm) {
    if (grads) {
      clip_gradients(p_.params, grads->norm, *s_.max_grad_norm);
    } else {
      Tensor g = p_.params.grads();
      queued_stats_.clip_by_last_norm(g, *s_.max_grad_norm);  // by the queued norm
    }
  }
  last_learning_rate_ = p_.lr_policy.learning_rate(state_.step);
  if (o_.larc) apply_larc(p_.params, *o_.larc, last_learning_rate_);
  if (folds_publish_) {
    MixedPrecisionStep mixed;
    mixed.publish = p_.params.compute_values();
    if (folds_unscale_) {
      mixed.grads16 = p_.params.compute_grads();
      mixed.unscale = step_unscale_;
    }
    p_.optimizer.step_mixed(last_learning_rate_, mixed);
  } else {
    p_.optimizer.step(last_learning_rate_);
    // Pure float16 / bfloat16 keeps its weights representable in that type.
    if (s_.round_masters) p_.params.round_values_to(s_.compute_dtype);
    p_.params.publish_values();
  }
  // Only an automatic scaler reacts, and it reads the statistics every step.
  if (grads) p_.loss_scaler.update(false, grads->amax);
  const auto c2 = Clock::now();
  times.optimizer += seconds_between(c1, c2);
  p_.timeline.phase("optimizer", state_.step, c1, c2);
  if (grads) times.gradient_norm += grads->norm;  // else added when read
}

StepCosts costs_per_step(const PhaseTimes& t, int world_size) {
  const auto n = static_cast<double>(std::max<std::int64_t>(t.steps, 1));
  return {t.step / n,      t.data / n,       t.communication / n,
          t.comm_busy / n, t.comm_bytes / n, world_size};
}

void TrainingLoop::print_bottleneck() {
  StepCosts costs = costs_per_step(timed_, p_.comm.size());
  costs.parameter_server = p_.ps != nullptr;
  console_.print("*** Bottleneck: {}", describe_bottleneck(costs));
}

void TrainingLoop::print_sample(const Batch& batch) {
  // Its whole batch is decoded (beam search for a translation model): at a
  // large batch, the run's peak memory may be here.
  const ActivityScope activity("printing a training sample", state_.step);
  NoGradGuard no_grad;
  const Tensor predictions = p_.model.infer(batch);
  const std::vector<std::string> lines = p_.data.decode(batch, predictions);
  const std::vector<std::string> targets = p_.data.decode_targets(batch);
  if (lines.empty()) return;
  const std::int64_t index = batch.indices.empty() ? 0 : batch.indices.front();
  console_.print("*** Train sample {}: prediction: {}", index, lines.front());
  if (!targets.empty())
    console_.print("*** Train sample {}: target:     {}", index, targets.front());
}

void TrainingLoop::write_summaries() {
  const PhaseTimes& t = summary_interval_;
  if (p_.summaries == nullptr || t.steps == 0) return;
  const auto n = static_cast<double>(t.steps);
  Scalars scalars = {
      {"train_loss", summary_loss_.mean(t.steps)},
      {"learning_rate", last_learning_rate_},
      {"global_gradient_norm", t.gradient_norm / n},
      {"loss_scale", p_.loss_scaler.scale()},
      {"objects_per_second", t.step > 0.0 ? t.objects / t.step : 0.0},
      {"time/data", t.data / n},
      {"time/forward", t.forward / n},
      {"time/backward", t.backward / n},
      {"time/communication", t.communication / n},
      {"time/optimizer", t.optimizer / n},
      {"time/step", t.step / n},
  };
  // The device's allocator: what the step holds at its peak (PyTorch's
  // max_memory_allocated), the most it has held from the device (PyTorch's
  // max_memory_reserved) and what it keeps cached.
  const AllocatorStats memory = allocator_stats(device_);
  scalars.emplace_back("memory/peak_allocated_MiB", static_cast<double>(memory.peak_bytes) / kMiB);
  scalars.emplace_back("memory/peak_reserved_MiB",
                       static_cast<double>(memory.peak_reserved_bytes) / kMiB);
  scalars.emplace_back("memory/cached_MiB", static_cast<double>(memory.cached_bytes) / kMiB);
  if (const std::optional<double> u = sample_utilisation()) {
    scalars.emplace_back("device/utilisation_percent", *u);
  }
  if (p_.ps != nullptr) {
    scalars.emplace_back("ps/staleness_mean", t.staleness / n);
    scalars.emplace_back("ps/staleness_max", static_cast<double>(t.staleness_max));
    scalars.emplace_back("ps/global_step", static_cast<double>(t.global_step));
    scalars.emplace_back("comm/megabytes_per_step", t.comm_bytes / n / 1e6);
  } else if (p_.comm.size() > 1) {
    const StepCosts costs = costs_per_step(t, p_.comm.size());
    scalars.emplace_back("comm/busy_seconds", costs.comm_busy);
    scalars.emplace_back("comm/megabytes_per_step", costs.comm_bytes / 1e6);
    scalars.emplace_back("comm/bus_bandwidth_MBps", bus_bandwidth(costs) / 1e6);
    scalars.emplace_back("comm/hidden_percent", 100.0 * hidden_fraction(costs));
    scalars.emplace_back("comm/world_size", static_cast<double>(p_.comm.size()));
  }
  p_.summaries->write(state_.step, scalars);
  p_.summaries->flush();
}

void TrainingLoop::refresh_state() {
  // The final state is gathered once: the servers end after sending it.
  if (p_.ps != nullptr && !(pushing_done_ && final_snapshot_)) {
    // The servers hold the weights and the optimizer state: worker 0 gathers
    // them (after the last step, once every worker has finished).
    const ps::SnapshotResult snap = p_.ps->snapshot(p_.optimizer, state_.step, pushing_done_);
    p_.params.publish_values();
    if (pushing_done_) final_snapshot_ = snap;
    state_.parameter_server = ps_state(snap);
  }
  state_.data_position = p_.data.position();
  state_.config_hash = o_.config_hash;
  state_.random_seed = s_.random_seed;
  state_.loss_scaler = p_.loss_scaler.state();
  state_.loss_scale = p_.loss_scaler.scale();
  state_.max_steps = o_.max_steps;
  state_.processes = p_.comm.size();
  state_.iter_size = s_.iter_size;
}

// Batch-norm statistics are updated from each rank's own batches; before they
// are saved or used, every rank takes their mean (Horovod's advice; DDP
// instead copies rank 0's), so a checkpoint does not depend on one rank's data.
void TrainingLoop::sync_buffers() {
  if (p_.comm.size() == 1 || p_.params.buffer_numel() == 0) return;
  p_.comm.allreduce(p_.params.buffers(), ReduceOp::average)->wait();
}

void TrainingLoop::save() {
  if (o_.benchmark) return;
  sync_buffers();
  if (p_.comm.rank() != 0) return;
  const auto t0 = Clock::now();
  refresh_state();
  const auto root = o_.logdir / "checkpoints";
  const auto dir = save_checkpoint(root, p_.params, &p_.optimizer, state_, o_.config_yaml);
  prune_checkpoints(root, s_.num_checkpoints);
  last_save_ = Clock::now();
  console_.print("*** Saved checkpoint {}", dir.string());
  p_.timeline.phase("checkpoint", state_.step, t0, Clock::now());
}

void TrainingLoop::evaluate_now() {
  if (p_.eval_data == nullptr || o_.benchmark) return;
  sync_buffers();
  const auto t0 = Clock::now();
  const EvalResult eval =
      evaluate(p_.model, *p_.eval_data, p_.comm,
               eval_options(*p_.eval_data, s_.eval_bleu, s_.eval_bleu_samples, o_.logdir));
  p_.timeline.phase("eval", state_.step, t0, Clock::now());
  print_eval(console_, eval, state_.step);
  if (p_.summaries != nullptr) {
    Scalars scalars;
    for (const auto& [name, metric] : eval.metrics) {
      scalars.emplace_back("eval_" + name, metric.value());
    }
    p_.summaries->write(state_.step, scalars);
    p_.summaries->flush();
  }
  if (p_.best_models == nullptr || p_.comm.rank() != 0) return;
  const auto it = eval.metrics.find(p_.best_models->metric());
  if (it == eval.metrics.end()) {
    std::string known;
    for (const auto& [name, metric] : eval.metrics) known += (known.empty() ? "" : ", ") + name;
    throw UserError(
        fmt::format("best_model_metric '{}' is not an eval metric of this model (it reports: {})",
                    p_.best_models->metric(), known));
  }
  const double value = it->second.value();
  if (!p_.best_models->improves(value)) return;
  refresh_state();
  save_checkpoint(o_.logdir / "best_models", p_.params, &p_.optimizer, state_, o_.config_yaml);
  p_.best_models->record(state_.step, value);
  console_.print("*** New best {} {:.4f}: saved {}", p_.best_models->metric(), value,
                 (o_.logdir / "best_models" / fmt::format("ckpt-{}", state_.step)).string());
}

void TrainingLoop::after_step(PhaseTimes times) {
  const bool print_due = due(s_.print_loss_steps) || last_step();
  const bool summary_due =
      !o_.benchmark && (due(s_.save_summaries_steps) || (last_step() && s_.save_summaries_steps));
  const bool time_due = agrees() ? agreed_checkpoint_due_ : checkpoint_time_due();
  const bool save_due = (due(s_.save_checkpoint_steps) || time_due) && !last_step();
  const bool eval_due = due(s_.eval_steps) && !last_step();
  // What is logged, saved or evaluated comes from finite steps. The wait is
  // the device's time for the steps queued ahead of it: it belongs to them.
  if (print_due || summary_due || save_due || eval_due || sample_batch_.has_value()) {
    times.step += read_queued_stats();
  }
  print_interval_.add(times);
  summary_interval_.add(times);
  // The first steps warm caches, allocators and autotuners: untimed (unless
  // they are all the run has).
  const std::int64_t untimed =
      std::max<std::int64_t>(0, std::min(o_.untimed_steps, o_.max_steps - first_step_ - 1));
  if (state_.step > first_step_ + untimed) timed_.add(times);
  if (o_.benchmark && untimed > 0 && state_.step == first_step_ + untimed) {
    // The timed steps start on an idle device (as PyTorch's benchmarks do
    // after their warm-up): no warm-up work is left queued to count in theirs.
    synchronize_device(device_);
  }

  if (print_due) {
    const PhaseTimes& t = print_interval_;
    state_.train_loss = print_loss_.mean(t.steps);
    print_loss_.reset();
    state_.train_loss_step = state_.step;
    if (asynchronous_workers()) {
      // Asynchronous workers count their own steps; the servers' may differ.
      console_.print("*** Global step {}: *** Train loss: {:.4f} (worker 0; the servers are at {})",
                     state_.step, *state_.train_loss, t.global_step);
    } else {
      console_.print("*** Global step {}: *** Train loss: {:.4f}", state_.step, *state_.train_loss);
    }
    sample_utilisation();
    // The data share says at a glance whether the input pipeline keeps up.
    const double per_step = t.step / static_cast<double>(t.steps);
    if (p_.comm.size() > 1) {
      console_.print("time per step = {} (data {:.1f}%, communication {:.1f}%)",
                     format_duration(per_step), t.step > 0.0 ? 100.0 * t.data / t.step : 0.0,
                     t.step > 0.0 ? 100.0 * t.communication / t.step : 0.0);
    } else {
      console_.print("time per step = {} (data {:.1f}%)", format_duration(per_step),
                     t.step > 0.0 ? 100.0 * t.data / t.step : 0.0);
    }
    print_interval_ = {};
  }
  if (sample_batch_) {
    print_sample(*sample_batch_);
    sample_batch_.reset();
  }
  if (summary_due) {
    write_summaries();
    summary_interval_ = {};
    summary_loss_.reset();
  }
  if (save_due) save();
  if (eval_due) evaluate_now();
}

void TrainingLoop::record_result() {
  result_.steps = state_.step;
  result_.steps_run = state_.step - first_step_;
  result_.final_loss = state_.train_loss;
  result_.final_loss_step = state_.train_loss_step;
}

TrainResult TrainingLoop::nothing_to_train() {
  console_.print(
      "*** Nothing to train: the checkpoint is at step {} and max_steps is {}; raise max_steps "
      "(--max_steps=N) to train further",
      state_.step, o_.max_steps);
  record_result();
  // train_eval still evaluates what it resumed, as it would after training.
  evaluate_now();
  return result_;
}

TrainResult TrainingLoop::run() {
  if (state_.data_position && !state_.data_position.IsNull()) {
    p_.data.seek(state_.data_position);
  } else {
    p_.data.start_epoch(state_.epoch);
  }
  if (state_.loss_scaler && !state_.loss_scaler.IsNull()) {
    p_.loss_scaler.load_state(state_.loss_scaler);
  }
  first_step_ = state_.step;
  if (p_.ps != nullptr) {
    ps_bytes_before_ = p_.ps->bytes_moved();
    ps_applied_before_ = p_.ps->applied_pushes();
  }
  if (first_step_ >= o_.max_steps) {
    finish_pushing();
    return nothing_to_train();
  }
  const StopSignals signals;
  launch::ProgressBeacon beacon(p_.comm.rank() == 0);
  const auto loop_start = Clock::now();
  while (state_.step < o_.max_steps) {
    PhaseTimes times;
    if (step(times)) after_step(times);
    beacon.reached(state_.step);
    launch::test_fault_after_step(state_.step, p_.comm.rank());
    console_.progress(state_.step - first_step_, o_.max_steps - first_step_,
                      seconds_between(loop_start, Clock::now()), [&] {
                        return last_loss_.defined() ? fmt::format("loss {:.4f}", last_loss_.item())
                                                    : std::string();
                      });
    if (stop_signal() != 0) {
      result_.stop_signal = stop_signal();
      break;
    }
  }
  console_.clear_bar();
  read_queued_stats();  // a stop signal may end training between logging steps
  if (agrees()) {
    // The last step's agreement: a signal during it stops the run as before.
    collect_agreement();
    if (result_.stop_signal == 0) result_.stop_signal = agreed_stop_signal_;
  }

  record_result();
  finish_pushing();
  if (result_.stop_signal != 0) {
    console_.print("*** Stopped by signal {} at step {}", result_.stop_signal, state_.step);
    if (state_.step > first_step_) save();
    return result_;
  }
  console_.print("*** Finished training");
  if (timed_.steps > 0) {
    result_.avg_step_seconds = timed_.step / static_cast<double>(timed_.steps);
    result_.objects_per_second = timed_.objects / timed_.step;
    console_.print("*** Avg time per step: {:.6f}s", result_.avg_step_seconds);
    console_.print("*** Avg objects per second: {:.3f}", result_.objects_per_second);
    const std::int64_t untimed = state_.step - first_step_ - timed_.steps;
    console_.print("*** Timed steps: {} (after {} untimed warm-up step{})", timed_.steps, untimed,
                   untimed == 1 ? "" : "s");
    console_.print("*** Avg data time per step: {:.6f}s ({:.1f}% of the step)",
                   timed_.data / static_cast<double>(timed_.steps),
                   100.0 * timed_.data / timed_.step);
    print_bottleneck();
  }
  sample_utilisation();
  if (utilisation_samples_ > 0) {
    console_.print(
        "*** Device utilisation on {}: kernels ran {:.0f}% of the time (NVML's GPU-Util, mean of "
        "{} sample(s) at the logging steps)",
        to_string(device_), utilisation_sum_ / static_cast<double>(utilisation_samples_),
        utilisation_samples_);
  }
  const AllocatorStats memory = allocator_stats(device_);
  // Allocated: PyTorch's max_memory_allocated; held: its max_memory_reserved
  // (what nvidia-smi shows, less the CUDA context). cached_bytes is what the
  // allocator holds free at the end, not a peak.
  console_.print(
      "*** Peak memory on {}: {} allocated by tensors, {} held by the allocator ({} free in its "
      "cache at the end)",
      to_string(device_), readable_bytes(memory.peak_bytes),
      readable_bytes(memory.peak_reserved_bytes), readable_bytes(memory.cached_bytes));
  for (const std::string& line : memory_at_peak_lines(memory_at_peak(device_))) {
    console_.print("*** {}", line);
  }
  if (result_.skipped_steps > 0) {
    console_.print("*** Skipped {} step(s) on loss-scale overflow", result_.skipped_steps);
  }
  if (state_.step > first_step_) {
    save();
    print_parameter_server();
    evaluate_now();
  }
  return result_;
}

YAML::Node TrainingLoop::ps_state(const ps::SnapshotResult& snap) const {
  YAML::Node node;
  node["workers"] = p_.comm.size();
  node["servers"] = static_cast<int>(p_.ps->shards().size());
  node["max_staleness"] = p_.ps->settings().max_staleness;
  node["global_step"] = snap.global_step;
  for (const std::int64_t c : snap.clocks) node["worker_clocks"].push_back(c);
  return node;
}

void TrainingLoop::finish_pushing() {
  if (p_.ps == nullptr) return;
  // Worker 0 gathers the final state in save(), unless nothing is saved.
  const bool ran = state_.step > first_step_;
  // Asynchronous workers end at different times: evaluation and the last
  // checkpoint use the weights after every worker's last push.
  const bool final_pull = ran && p_.ps->settings().max_staleness != 0;
  p_.ps->done(p_.comm.rank() == 0 && !o_.benchmark && ran, final_pull);
  pushing_done_ = true;
  if (final_pull) {
    p_.ps->pull(ps::kFinalClock);
    p_.params.publish_values();
  }
}

void TrainingLoop::print_parameter_server() {
  if (!final_snapshot_) return;
  const ps::SnapshotResult& snap = *final_snapshot_;
  ps::write_staleness_histogram(o_.logdir / "parameter_server.yaml", ps_state(snap),
                                snap.staleness);
  console_.print("*** Parameter server: global step {}; {}", snap.global_step,
                 ps::describe_staleness(snap.staleness));
  if (snap.dropped_workers > 0 || snap.refused_pushes > 0) {
    console_.print("*** Parameter server: {} worker(s) dropped as stragglers, {} push(es) refused",
                   snap.dropped_workers, snap.refused_pushes);
  }
}

}  // namespace

TrainResult train(const TrainerParts& parts, const TrainOptions& options, const Console& console) {
  TrainingLoop loop(parts, options, console);
  return loop.run();
}

}  // namespace rig::engine
