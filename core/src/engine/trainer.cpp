#include "engine/trainer.hpp"

#include <chrono>
#include <cmath>

#include <fmt/format.h>

#include "engine/evaluator.hpp"
#include "rig/error.hpp"
#include "rig/ops.hpp"

namespace rig::engine {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// Fetches the next batch, moving on to the next epoch when one ends.
Batch next_batch(DataLayer& data, std::int64_t& epoch) {
  if (auto batch = data.next_batch()) return std::move(*batch);
  ++epoch;
  data.start_epoch(epoch);
  if (auto batch = data.next_batch()) return std::move(*batch);
  throw UserError(fmt::format(
      "the training data layer produced no batch in epoch {}: is the data set smaller than one "
      "global batch (batch_size_per_gpu x processes x iter_size)?",
      epoch));
}

// Scales gradients so that their global L2 norm is at most max_norm; returns the norm.
double clip_gradients(ParameterStore& params, double max_norm) {
  Tensor grads = params.grads();
  float* g = grads.data<float>();
  const std::int64_t n = grads.numel();
  double squares = 0.0;
  for (std::int64_t i = 0; i < n; ++i) squares += static_cast<double>(g[i]) * g[i];
  const double norm = std::sqrt(squares);
  if (norm > max_norm) {
    const auto scale = static_cast<float>(max_norm / (norm + 1e-6));
    for (std::int64_t i = 0; i < n; ++i) g[i] *= scale;
  }
  return norm;
}

}  // namespace

TrainResult train(const TrainerParts& parts, const TrainOptions& options, const Console& console) {
  const EngineSettings& s = options.settings;
  TrainingState state = options.start;
  if (state.data_position && !state.data_position.IsNull()) {
    parts.data.seek(state.data_position);
  } else {
    parts.data.start_epoch(state.epoch);
  }

  TrainResult result;
  double interval_loss = 0.0;
  std::int64_t interval_steps = 0;
  double timed_seconds = 0.0;
  std::int64_t timed_steps = 0;
  double timed_objects = 0.0;
  auto interval_start = Clock::now();
  const std::int64_t first_step = state.step;

  auto save = [&] {
    if (options.benchmark || parts.comm.rank() != 0) return;
    state.data_position = parts.data.position();
    state.config_hash = options.config_hash;
    auto dir =
        save_checkpoint(options.logdir, parts.params, &parts.optimizer, state, options.config_yaml);
    console.print("*** Saved checkpoint {}", dir.string());
  };
  auto run_eval = [&] {
    if (parts.eval_data == nullptr || options.benchmark) return;
    print_eval(console, evaluate(parts.model, *parts.eval_data, parts.comm), state.step);
  };

  while (state.step < options.max_steps) {
    const auto step_start = Clock::now();
    parts.params.zero_grad();
    double step_loss = 0.0;
    std::int64_t step_objects = 0;
    for (std::int64_t micro = 0; micro < s.iter_size; ++micro) {
      Batch batch = next_batch(parts.data, state.epoch);
      batch.rng = RandomKey{s.random_seed, static_cast<std::uint64_t>(state.step),
                            static_cast<std::uint32_t>(parts.comm.rank()),
                            static_cast<std::uint32_t>(micro)};
      ModelOutput out = parts.model.forward(batch, Mode::train);
      const float loss = out.loss.item();
      if (!std::isfinite(loss)) {
        throw UserError(fmt::format(
            "train loss is {} at step {}: training diverged (lower the learning rate, set "
            "max_grad_norm, or check the data)",
            loss, state.step));
      }
      // Accumulated micro-batches average, like one batch iter_size times larger.
      Tensor scaled = s.iter_size > 1
                          ? ops::mul_scalar(out.loss, 1.0F / static_cast<float>(s.iter_size))
                          : out.loss;
      scaled.backward();
      step_loss += loss / static_cast<double>(s.iter_size);
      step_objects += batch.num_objects;
    }
    if (parts.comm.size() > 1)
      parts.comm.allreduce(parts.params.grads(), ReduceOp::average)->wait();
    if (s.max_grad_norm) clip_gradients(parts.params, *s.max_grad_norm);
    parts.optimizer.step(parts.lr_policy.learning_rate(state.step));
    ++state.step;

    const double step_seconds = seconds_since(step_start);
    // The first step warms caches and allocators; it is not timed.
    if (state.step > first_step + 1 || options.max_steps - first_step == 1) {
      timed_seconds += step_seconds;
      ++timed_steps;
      timed_objects += static_cast<double>(step_objects) * parts.comm.size();
    }
    interval_loss += step_loss;
    ++interval_steps;

    if (state.step % s.print_loss_steps == 0 || state.step == options.max_steps) {
      result.final_loss = interval_loss / static_cast<double>(interval_steps);
      console.print("*** Global step {}: *** Train loss: {:.4f}", state.step, result.final_loss);
      console.print("time per step = {}", format_duration(seconds_since(interval_start) /
                                                          static_cast<double>(interval_steps)));
      interval_loss = 0.0;
      interval_steps = 0;
      interval_start = Clock::now();
    }
    if (s.save_checkpoint_steps > 0 && state.step % s.save_checkpoint_steps == 0 &&
        state.step != options.max_steps) {
      save();
    }
    if (state.step % s.eval_steps == 0 && state.step != options.max_steps) run_eval();
  }

  console.print("*** Finished training");
  result.steps = state.step;
  if (timed_steps > 0) {
    result.avg_step_seconds = timed_seconds / static_cast<double>(timed_steps);
    result.objects_per_second = timed_objects / timed_seconds;
    console.print("*** Avg time per step: {:.6f}s", result.avg_step_seconds);
    console.print("*** Avg objects per second: {:.3f}", result.objects_per_second);
  }
  if (state.step > first_step) {
    save();
    run_eval();
  }
  return result;
}

}  // namespace rig::engine
