// The training loop: fetch, forward, backward (scaled loss), unscale, reduce,
// clip, LARC, step; then the hooks: loss lines, samples, progress bar,
// summaries, timeline, checkpoints, evaluation, best models, stop signals.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>

#include "engine/checkpoint.hpp"
#include "engine/console.hpp"
#include "engine/deterministic_reduction.hpp"
#include "engine/gradient_reducer.hpp"
#include "engine/larc.hpp"
#include "engine/loss_scaler.hpp"
#include "engine/ps/client.hpp"
#include "engine/settings.hpp"
#include "engine/summary_writer.hpp"
#include "engine/timeline.hpp"
#include "rig/communicator.hpp"
#include "rig/data_layer.hpp"
#include "rig/lr_policy.hpp"
#include "rig/model.hpp"
#include "rig/optimizer.hpp"

namespace rig::engine {

struct TrainerParts {
  Model& model;
  DataLayer& data;
  Optimizer& optimizer;
  LrPolicy& lr_policy;
  Communicator& comm;
  ParameterStore& params;
  LossScaler& loss_scaler;
  Timeline& timeline;
  DataLayer* eval_data = nullptr;      // train_eval: evaluated every eval_steps and at the end
  SummaryWriter* summaries = nullptr;  // rank 0, unless benchmarking or save_summaries_steps 0
  BestModels* best_models = nullptr;   // train_eval with num_best_models > 0
  GradientReducer* reducer = nullptr;  // more than one process
  // A parameter-server job's worker: the reducer pushes the gradients, the
  // servers run the optimizer, and each step ends with a pull.
  ps::Client* ps = nullptr;
  // communicator_params/deterministic: in place of the reducer.
  DeterministicReduction* deterministic = nullptr;
};

struct TrainOptions {
  EngineSettings settings;
  std::int64_t max_steps = 0;
  bool benchmark = false;  // timing only: no checkpoints, no evaluation, no summaries
  std::filesystem::path logdir;
  std::string config_yaml;  // saved inside every checkpoint
  std::string config_hash;
  TrainingState start;  // where a resumed run picks up
  std::optional<LarcSettings> larc;
  // The first steps of this run, untimed in the averages it prints (they
  // warm caches, allocators and autotuners); a run of no more steps times
  // them all. With benchmark, the device is drained after them, so that the
  // timed steps start on an idle device.
  std::int64_t untimed_steps = 1;
};

struct TrainResult {
  std::int64_t steps = 0;      // global step at the end
  std::int64_t steps_run = 0;  // by this run: 0 when the checkpoint was already at max_steps
  // The last train loss printed (the mean over its print interval) and its
  // step: this run's, or, when it printed none, the resumed checkpoint's;
  // empty when neither has one.
  std::optional<double> final_loss;
  std::int64_t final_loss_step = 0;
  double avg_step_seconds = 0.0;
  double objects_per_second = 0.0;
  std::int64_t skipped_steps = 0;  // loss-scale overflows
  int stop_signal = 0;             // SIGINT / SIGTERM that ended the run early, or 0
};

TrainResult train(const TrainerParts& parts, const TrainOptions& options, const Console& console);

}  // namespace rig::engine
