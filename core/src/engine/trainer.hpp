// The training loop: fetch, forward, backward, reduce, clip, step, hooks.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>

#include "engine/checkpoint.hpp"
#include "engine/console.hpp"
#include "engine/settings.hpp"
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
  DataLayer* eval_data = nullptr;  // train_eval: evaluated every eval_steps and at the end
};

struct TrainOptions {
  EngineSettings settings;
  std::int64_t max_steps = 0;
  bool benchmark = false;  // timing only: no checkpoints, no evaluation
  std::filesystem::path logdir;
  std::string config_yaml;  // saved inside every checkpoint
  std::string config_hash;
  TrainingState start;  // where a resumed run picks up
};

struct TrainResult {
  std::int64_t steps = 0;   // global step at the end
  double final_loss = 0.0;  // mean train loss over the last print interval
  double avg_step_seconds = 0.0;
  double objects_per_second = 0.0;
};

TrainResult train(const TrainerParts& parts, const TrainOptions& options, const Console& console);

}  // namespace rig::engine
