#include "engine/run_parts.hpp"

#include <cmath>
#include <set>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "rig/error.hpp"

namespace rig::engine {
namespace {

// Lists "key: old -> new" for every scalar that differs.
void diff_nodes(const YAML::Node& a, const YAML::Node& b, const std::string& path,
                std::vector<std::string>& out) {
  if (a.IsMap() && b.IsMap()) {
    std::set<std::string> keys;
    for (const auto& kv : a) keys.insert(kv.first.as<std::string>());
    for (const auto& kv : b) keys.insert(kv.first.as<std::string>());
    for (const auto& k : keys) {
      diff_nodes(a[k], b[k], path.empty() ? k : path + "." + k, out);
    }
    return;
  }
  auto text = [](const YAML::Node& n) {
    if (!n) return std::string("(absent)");
    YAML::Emitter e;
    e << YAML::Flow << n;
    return std::string(e.c_str());
  };
  if (text(a) != text(b)) out.push_back(fmt::format("{}: {} -> {}", path, text(a), text(b)));
}

}  // namespace

std::vector<std::string> config_differences(const YAML::Node& before, const YAML::Node& after) {
  std::vector<std::string> diffs;
  diff_nodes(before, after, "", diffs);
  return diffs;
}

RunContext make_run_context(Mode mode, const EngineSettings& settings, ProcessPlace place) {
  RunContext run;
  run.mode = mode;
  run.dtype = settings.compute_dtype;
  run.rank = place.rank;
  run.world_size = place.world_size;
  run.seed = settings.random_seed;
  run.device = settings.device;
  run.logdir = settings.logdir;
  return run;
}

std::shared_ptr<DataLayer> make_data_layer(const ResolvedExperiment& exp, Mode mode,
                                           const EngineSettings& settings, ProcessPlace place) {
  return exp.plugin(PluginKind::data_layer)
      .make_data_layer(
          exp.params(PluginKind::data_layer),
          DataLayerContext{make_run_context(mode, settings, place), settings.batch_size_per_gpu});
}

std::shared_ptr<Model> make_model(const ResolvedExperiment& exp, Mode mode,
                                  const EngineSettings& settings, ProcessPlace place,
                                  const DataLayer& data, ParameterStore& params) {
  return exp.plugin(PluginKind::model)
      .make_model(exp.params(PluginKind::model),
                  ModelContext{make_run_context(mode, settings, place), data.info(), params});
}

std::shared_ptr<Optimizer> make_optimizer(const ResolvedExperiment& exp,
                                          const EngineSettings& settings, ProcessPlace place,
                                          ParameterStore& params) {
  return exp.plugin(PluginKind::optimizer)
      .make_optimizer(exp.params(PluginKind::optimizer),
                      OptimizerContext{make_run_context(Mode::train, settings, place), params});
}

StepPlan plan_steps(const EngineSettings& settings, std::int64_t epoch_size, ProcessPlace place,
                    std::optional<std::int64_t> bench_steps) {
  StepPlan plan;
  const std::int64_t global_batch =
      settings.batch_size_per_gpu * place.world_size * settings.iter_size;
  plan.steps_per_epoch = epoch_size > 0 ? epoch_size / global_batch : 0;
  if (bench_steps) {
    plan.max_steps = *bench_steps;
    return plan;
  }
  if (settings.max_steps) {
    plan.max_steps = *settings.max_steps;
    return plan;
  }
  if (plan.steps_per_epoch <= 0) {
    throw UserError(fmt::format(
        "num_epochs needs the number of steps per epoch, but the data layer {} (set max_steps "
        "instead)",
        epoch_size < 0 ? "does not know its size" : "holds less than one global batch"));
  }
  plan.max_steps = static_cast<std::int64_t>(
      std::ceil(*settings.num_epochs * static_cast<double>(plan.steps_per_epoch)));
  plan.policy_steps_per_epoch = plan.steps_per_epoch;
  return plan;
}

std::shared_ptr<LrPolicy> make_lr_policy(const ResolvedExperiment& exp, const StepPlan& plan,
                                         std::int64_t max_steps) {
  return exp.plugin(PluginKind::lr_policy)
      .make_lr_policy(exp.params(PluginKind::lr_policy),
                      LrPolicyContext{max_steps, plan.policy_steps_per_epoch});
}

void check_train_eval_model(const ResolvedExperiment& train, const ResolvedExperiment& eval) {
  std::vector<std::string> diffs;
  for (const char* key : {"model", "model_params"}) {
    diff_nodes(train.config.root[key], eval.config.root[key], key, diffs);
  }
  if (!diffs.empty()) {
    throw UserError(fmt::format(
        "train_eval trains and evaluates one model, so eval_params may not change it: {}",
        fmt::join(diffs, "; ")));
  }
}

}  // namespace rig::engine
