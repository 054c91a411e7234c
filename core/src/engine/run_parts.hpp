// The plugins of a run, built from a resolved experiment the same way by
// `rig run` and by `rig validate` (which stops before reading a batch, a
// checkpoint or starting the communicator), so that validation runs every
// check the plugins themselves make.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "engine/resolve.hpp"
#include "engine/settings.hpp"
#include "rig/data_layer.hpp"
#include "rig/lr_policy.hpp"
#include "rig/model.hpp"
#include "rig/optimizer.hpp"
#include "rig/parameter_store.hpp"

namespace rig::engine {

// Where this process stands in the job.
struct ProcessPlace {
  int rank = 0;
  int world_size = 1;
};

RunContext make_run_context(Mode mode, const EngineSettings& settings, ProcessPlace place);

std::shared_ptr<DataLayer> make_data_layer(const ResolvedExperiment& exp, Mode mode,
                                           const EngineSettings& settings, ProcessPlace place);

// Declares the model's parameters in `params` (not yet allocated).
std::shared_ptr<Model> make_model(const ResolvedExperiment& exp, Mode mode,
                                  const EngineSettings& settings, ProcessPlace place,
                                  const DataLayer& data, ParameterStore& params);

// `params` allocated.
std::shared_ptr<Optimizer> make_optimizer(const ResolvedExperiment& exp,
                                          const EngineSettings& settings, ProcessPlace place,
                                          ParameterStore& params);

// How many steps a training run takes, and the epoch length the lr policy is given.
struct StepPlan {
  std::int64_t max_steps = 0;
  std::int64_t steps_per_epoch = 0;         // of the data, 0 when unknown
  std::int64_t policy_steps_per_epoch = 0;  // OpenSeq2Seq fills it only for num_epochs runs
};

// max_steps, or num_epochs x steps per epoch (the data layer's epoch over the
// global batch), or bench_steps when benchmarking.
StepPlan plan_steps(const EngineSettings& settings, std::int64_t epoch_size, ProcessPlace place,
                    std::optional<std::int64_t> bench_steps);

// An lr policy for a run of `max_steps` steps (plan.max_steps unless a resume
// compares it with another length).
std::shared_ptr<LrPolicy> make_lr_policy(const ResolvedExperiment& exp, const StepPlan& plan,
                                         std::int64_t max_steps);

// "key.path: before -> after" for every scalar that differs between two configs.
std::vector<std::string> config_differences(const YAML::Node& before, const YAML::Node& after);

// train_eval trains and evaluates one model: eval_params may not change it.
void check_train_eval_model(const ResolvedExperiment& train, const ResolvedExperiment& eval);

}  // namespace rig::engine
