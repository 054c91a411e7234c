// Training a built model: resume or start, the optimizer and lr policy, the
// trainer's hooks (evaluation, summaries, best models, the gradient reducer),
// the loop, and the verdict on target_loss.
#pragma once

#include <optional>

#include "engine/console.hpp"
#include "engine/resolve.hpp"
#include "engine/run.hpp"
#include "engine/run_parts.hpp"
#include "engine/settings.hpp"
#include "rig/communicator.hpp"

namespace rig::engine {

// What every mode builds first: the data layer (its batches on the run's
// device), the declared and allocated parameters, and the model. Built in
// place: the model keeps references into `params`.
struct BuiltModel {
  ProcessPlace place;
  std::shared_ptr<DataLayer> data;
  ParameterStore params;
  std::shared_ptr<Model> model;
};

// Everything a mode needs besides the model.
struct RunInputs {
  const RunOptions& options;
  const ResolvedExperiment& primary;
  const std::optional<ResolvedExperiment>& eval;  // train_eval's evaluation
  const EngineSettings& settings;
  Communicator& comm;
  const Console& console;
};

// The train / train_eval modes: the process exit code (128 + signal when
// stopped by one, 1 when target_loss was missed).
int train_model(const RunInputs& in, BuiltModel& built);

}  // namespace rig::engine
