#include "engine/validate.hpp"

#include <optional>

#include <fmt/format.h>

#include "engine/resolve.hpp"
#include "engine/run_parts.hpp"
#include "rig/error.hpp"

namespace rig::engine {
namespace {

std::string epoch_text(std::int64_t epoch_size) {
  return epoch_size >= 0 ? fmt::format("{} samples an epoch", epoch_size)
                         : std::string("epoch size known only while reading");
}

// The lr policy alone, which needs no data when max_steps is set.
std::string build_without_data(const ResolvedExperiment& exp, Mode mode) {
  const std::string skipped = "data_layer, model and optimizer not built (--skip-data)";
  if (mode != Mode::train) return skipped;
  const EngineSettings settings = read_settings(exp.config);
  if (!settings.max_steps) return skipped + "; lr_policy not built (num_epochs needs the data)";
  const StepPlan plan = plan_steps(settings, -1, ProcessPlace{}, std::nullopt);
  const auto lr_policy = make_lr_policy(exp, plan, plan.max_steps);
  return skipped + fmt::format("; lr_policy {} over {} steps (learning rate {:.6g} at step 0)",
                               exp.plugin(PluginKind::lr_policy).name(), plan.max_steps,
                               lr_policy->learning_rate(0));
}

// Builds one mode's plugins; returns what they said about themselves.
std::string build_mode(const ResolvedExperiment& exp, Mode mode) {
  const EngineSettings settings = read_settings(exp.config);
  const ProcessPlace place;  // one process: validation starts no communicator
  const auto data = make_data_layer(exp, mode, settings, place);
  ParameterStore params;
  const auto model = make_model(exp, mode, settings, place, *data, params);
  params.allocate(settings.random_seed, settings.compute_dtype);
  std::string text = fmt::format(
      "model {}, {} parameters; data_layer {}, {}", exp.plugin(PluginKind::model).name(),
      params.numel(), exp.plugin(PluginKind::data_layer).name(), epoch_text(data->epoch_size()));
  if (mode != Mode::train) return text;
  const auto optimizer = make_optimizer(exp, settings, place, params);
  const StepPlan plan = plan_steps(settings, data->epoch_size(), place, std::nullopt);
  const auto lr_policy = make_lr_policy(exp, plan, plan.max_steps);
  return text + fmt::format(
                    "; optimizer {}; lr_policy {} over {} steps (learning rate {:.6g} "
                    "at step 0)",
                    exp.plugin(PluginKind::optimizer).name(),
                    exp.plugin(PluginKind::lr_policy).name(), plan.max_steps,
                    lr_policy->learning_rate(0));
}

}  // namespace

int validate(const ValidateOptions& options, std::FILE* out) {
  const auto file = config::ExperimentFile::load(options.experiment);
  const plugin_host::PluginHost host(
      plugin_host::PluginHost::default_search_path(options.plugin_paths));
  std::optional<ResolvedExperiment> train;
  std::optional<ResolvedExperiment> eval;
  for (const auto& [name, mode] :
       {std::pair{"train", Mode::train}, {"eval", Mode::eval}, {"infer", Mode::infer}}) {
    try {
      ResolvedExperiment exp = resolve_experiment(file, name, options.overrides, host);
      const std::string built =
          options.skip_data ? build_without_data(exp, mode) : build_mode(exp, mode);
      fmt::print(out, "{}: {} mode: OK ({})\n", options.experiment, name, built);
      if (mode == Mode::train) {
        train = std::move(exp);
      } else if (mode == Mode::eval) {
        eval = std::move(exp);
      }
    } catch (const UserError& e) {
      throw UserError(fmt::format("{} mode: {}", name, e.what()));
    }
  }
  try {
    check_train_eval_model(*train, *eval);
  } catch (const UserError& e) {
    throw UserError(fmt::format("train_eval mode: {}", e.what()));
  }
  fmt::print(out, "{}: train_eval mode: OK (one model for both)\n", options.experiment);
  return 0;
}

}  // namespace rig::engine
