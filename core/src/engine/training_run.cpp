#include "engine/training_run.hpp"

#include <cctype>
#include <filesystem>
#include <fstream>
#include <memory>

#include <fmt/format.h>

#include "engine/activity.hpp"
#include "engine/checkpoint.hpp"
#include "engine/device_data.hpp"
#include "engine/gradient_reducer.hpp"
#include "engine/ps/client.hpp"
#include "engine/resume.hpp"
#include "engine/summary_writer.hpp"
#include "engine/timeline.hpp"
#include "engine/trainer.hpp"
#include "rig/error.hpp"
#include "rig/version.hpp"

namespace rig::engine {
namespace fs = std::filesystem;

namespace {

void write_logdir_config(const fs::path& logdir, const ResolvedExperiment& exp,
                         const RunOptions& options) {
  fs::create_directories(logdir);
  std::ofstream out(logdir / "config.yaml");
  out << "# Resolved by rig " << RIG_VERSION << " from " << options.experiment << "\n"
      << "# command line: " << options.command_line << "\n"
      << "# mode: " << exp.config.mode << "\n"
      << exp.config.to_yaml() << "\n";
  if (!out) throw UserError(fmt::format("cannot write {}", (logdir / "config.yaml").string()));
}

void print_transfer(const Console& console, const TransferReport& report) {
  console.print("*** load_model {}: loaded {} tensor(s), {} mismatched, {} missing, {} unused",
                report.source.string(), report.loaded.size(), report.mismatched.size(),
                report.missing.size(), report.unused.size());
  for (const auto& line : report.mismatched)
    console.print("***   shape differs, kept initial: {}", line);
  for (const auto& name : report.missing)
    console.print("***   not in the checkpoint, kept initial: {}", name);
}

// The verdict on target_loss: the exit code. A run that took no step (its
// checkpoint was already at max_steps) is judged by the loss the checkpoint
// recorded, said as such, and fails when it recorded none.
int check_target_loss(const Console& console, const TrainResult& result, double target) {
  if (!result.final_loss) {
    console.print(
        "*** FAILED: target_loss {} cannot be checked: no step ran, and the checkpoint holds no "
        "train loss (written by an older rig)",
        target);
    return 1;
  }
  const std::string whose =
      result.steps_run > 0
          ? fmt::format("final train loss {:.4f}", *result.final_loss)
          : fmt::format("train loss {:.4f} recorded by the checkpoint at step {} (no step ran now)",
                        *result.final_loss, result.final_loss_step);
  if (*result.final_loss < target) {
    console.print("*** {}{} is below target_loss {}", static_cast<char>(std::toupper(whose[0])),
                  whose.substr(1), target);
    return 0;
  }
  console.print("*** FAILED: {} is not below target_loss {}", whose, target);
  return 1;
}

// The trainer's optional parts, owned for the length of the run.
struct TrainingHooks {
  std::shared_ptr<DataLayer> eval_data;
  std::unique_ptr<LossScaler> loss_scaler;
  std::optional<LarcSettings> larc;
  std::unique_ptr<SummaryWriter> summaries;
  std::unique_ptr<BestModels> best_models;
  std::unique_ptr<GradientReducer> reducer;
  std::unique_ptr<DeterministicReduction> deterministic;
};

TrainingHooks make_hooks(const RunInputs& in, BuiltModel& built, const ResumePoint& resume,
                         ps::Client* ps) {
  const EngineSettings& settings = in.settings;
  const fs::path logdir = settings.logdir;
  const bool benchmark = in.options.benchmark;
  TrainingHooks hooks;
  if (in.eval) {
    EngineSettings eval_settings = read_settings(in.eval->config);
    eval_settings.device = settings.device;  // one model, one device
    hooks.eval_data = on_device(make_data_layer(*in.eval, Mode::eval, eval_settings, built.place),
                                settings.device);
  }
  hooks.loss_scaler = make_loss_scaler(settings.loss_scaling, settings.loss_scaling_params);
  if (settings.larc_params && !settings.larc_params.IsNull()) {
    hooks.larc = read_larc_settings(settings.larc_params);
  }
  if (!benchmark && in.comm.rank() == 0 && settings.save_summaries_steps > 0) {
    hooks.summaries = std::make_unique<SummaryWriter>(logdir);
    // TensorBoard drops earlier values at steps >= this one: the checkpoint's
    // own step was logged before the checkpoint was written, so it stays.
    if (resume.checkpoint) hooks.summaries->session_start(resume.state.step + 1);
  }
  if (hooks.eval_data && !benchmark && settings.num_best_models > 0) {
    hooks.best_models = std::make_unique<BestModels>(
        logdir, settings.best_model_metric, settings.best_model_mode, settings.num_best_models);
  }
  if (settings.deterministic_reduction && ps == nullptr) {
    const auto chunk = static_cast<std::int64_t>(settings.bucket_cap_mb * 1024.0 * 1024.0 / 4.0);
    hooks.deterministic =
        std::make_unique<DeterministicReduction>(built.params, in.comm, settings.iter_size, chunk);
    in.console.print(
        "*** Deterministic reduction: {} process(es) x iter_size {}, summed in one canonical "
        "order (the same bits for any processes x iter_size = {})",
        in.comm.size(), settings.iter_size, in.comm.size() * settings.iter_size);
  } else if (ps != nullptr) {
    hooks.reducer = std::make_unique<GradientReducer>(
        built.params, in.comm, BucketSettings{settings.bucket_cap_mb, false},
        [ps](std::int64_t offset, const Tensor& gradients) { ps->push(offset, gradients); });
  } else if (in.comm.size() > 1) {
    hooks.reducer = std::make_unique<GradientReducer>(
        built.params, in.comm,
        BucketSettings{settings.bucket_cap_mb, settings.fp16_gradient_compression});
    in.console.print(
        "*** Data-parallel over {} processes: {:.2f} MB of gradients in {} bucket(s) of at most "
        "{} MB{}",
        in.comm.size(), static_cast<double>(hooks.reducer->bytes_per_step()) / 1e6,
        hooks.reducer->buckets().size(), settings.bucket_cap_mb,
        settings.fp16_gradient_compression ? ", reduced as float16" : "");
  }
  return hooks;
}

// The resumed checkpoint's weights, else load_model's, else the initial ones;
// then every rank takes rank 0's.
ResumePoint start_weights(const RunInputs& in, BuiltModel& built, const std::string& identity) {
  const EngineSettings& settings = in.settings;
  ResumePoint resume;
  if (!in.options.benchmark) {
    resume = find_resume_point(settings.logdir, in.options.continue_learning, identity);
  }
  if (resume.checkpoint) {
    restore_parameters(*resume.checkpoint, built.params);
    in.console.print("*** Resuming from {} at step {}", resume.checkpoint->dir.string(),
                     resume.state.step);
    const TrainingState& saved = resume.state;
    const std::int64_t micro_before = saved.processes * saved.iter_size;
    const std::int64_t micro_now = in.comm.size() * settings.iter_size;
    if (micro_before > 0 && micro_before != micro_now) {
      in.console.print(
          "*** Note: the global batch changes from {} to {} micro-batches a step ({} process(es) x "
          "iter_size {} before, {} x {} now); keep processes x iter_size at {} to train on as "
          "before",
          micro_before, micro_now, saved.processes, saved.iter_size, in.comm.size(),
          settings.iter_size, micro_before);
    }
  } else if (settings.load_model) {
    print_transfer(in.console, load_matching_parameters(*settings.load_model, built.params));
  }
  if (in.comm.size() > 1) in.comm.broadcast(built.params.values(), 0)->wait();
  built.params.publish_values();
  return resume;
}

// What a worker cannot do when the servers run the optimizer.
void check_parameter_server_settings(const EngineSettings& settings, const LossScaler& scaler,
                                     const PsSettings& ps) {
  if (settings.checkpoint_every_s > 0.0 && ps.max_staleness != 0) {
    throw UserError(
        "checkpoint_every_s needs the workers to agree on the step to save at, which "
        "asynchronous workers (communicator_params/max_staleness other than 0) never do: use "
        "save_checkpoint_steps");
  }
  if (settings.max_grad_norm) {
    throw UserError(
        "max_grad_norm clips by the global gradient norm, which no process has under the mpi_ps "
        "communicator (each server holds a shard): remove max_grad_norm, or use LARC "
        "(larc_params), which the servers apply per parameter");
  }
  if (scaler.automatic()) {
    throw UserError(fmt::format(
        "loss_scaling: {} adjusts the scale from every rank's overflow, which the mpi_ps "
        "communicator does not gather: use a fixed loss_scaling number, or bfloat16 (dtype: "
        "mixed with matmul_precision: bfloat16 needs no scaling)",
        scaler.describe()));
  }
  if (settings.fp16_gradient_compression) {
    throw UserError(
        "gradient_compression: fp16 compresses all-reduced gradients; the mpi_ps communicator "
        "pushes them to servers and has its own: communicator_params/gradient_compression: 2bit");
  }
}

// A parameter-server worker: the shard plan, worker 0 handing each server its
// shard (with the resumed optimizer state), and the first pull.
std::unique_ptr<ps::Client> connect_to_servers(const RunInputs& in, BuiltModel& built,
                                               const Optimizer& optimizer, const StepPlan& plan,
                                               const std::string& identity,
                                               std::int64_t start_step) {
  ParameterServerTransport& link = *in.comm.parameter_server();
  const YAML::Node& larc = in.settings.larc_params;
  const bool split = optimizer.element_wise() && !(larc && !larc.IsNull());
  auto client = std::make_unique<ps::Client>(link, built.params,
                                             ps::plan_for(built.params, link.servers(), split));
  const std::int64_t s = link.settings().max_staleness;
  in.console.print(
      "*** Parameter server: {} worker(s), {} server(s), max_staleness {} ({}); the servers run "
      "the optimizer{}",
      link.workers(), link.servers(), s < 0 ? std::string("unbounded") : std::to_string(s),
      s == 0  ? "synchronous"
      : s < 0 ? "asynchronous"
              : "stale-synchronous",
      split ? "" : " on whole parameters");
  if (const float t = link.settings().two_bit_threshold; t > 0.0F) {
    in.console.print("*** Pushes are 2-bit compressed (threshold {}), the rest kept on the worker",
                     t);
  }
  for (const std::string& line : ps::describe_shards(client->shards())) {
    in.console.print("***   {}", line);
  }
  if (in.comm.rank() == 0) {
    YAML::Node run;
    run["config_hash"] = config::fnv1a64_hex(identity);
    run["max_steps"] = plan.max_steps;
    run["steps_per_epoch"] = plan.steps_per_epoch;
    run["policy_steps_per_epoch"] = plan.policy_steps_per_epoch;
    client->initialize(optimizer, run, start_step);
  }
  client->pull(start_step);
  built.params.publish_values();
  return client;
}

}  // namespace

int train_model(const RunInputs& in, BuiltModel& built) {
  const EngineSettings& settings = in.settings;
  const RunOptions& options = in.options;
  const fs::path logdir = settings.logdir;
  const std::string identity = identity_yaml(in.primary.config);
  const ResumePoint resume = start_weights(in, built, identity);

  auto optimizer = [&] {
    const ActivityScope activity("the optimizer's state");
    auto made = make_optimizer(in.primary, settings, built.place, built.params);
    if (resume.checkpoint) made->load_state(resume.checkpoint->optimizer);
    return made;
  }();
  const StepPlan plan =
      plan_steps(settings, built.data->epoch_size(), built.place,
                 options.benchmark ? std::optional(options.bench_steps) : std::nullopt);
  auto lr_policy = make_lr_policy(in.primary, plan, plan.max_steps);
  const std::int64_t resumed_max_steps = resume.checkpoint ? resume.state.max_steps : 0;
  if (resumed_max_steps > 0 && resumed_max_steps != plan.max_steps) {
    const auto note =
        schedule_change_note(*lr_policy, *make_lr_policy(in.primary, plan, resumed_max_steps),
                             in.primary.plugin(PluginKind::lr_policy).name(), resume.state.step,
                             resumed_max_steps, plan.max_steps);
    if (!note.empty()) in.console.print("*** {}", note);
  }

  std::unique_ptr<ps::Client> ps_client;
  if (in.comm.parameter_server() != nullptr) {
    check_parameter_server_settings(
        settings, *make_loss_scaler(settings.loss_scaling, settings.loss_scaling_params),
        in.comm.parameter_server()->settings());
    ps_client = connect_to_servers(in, built, *optimizer, plan, identity, resume.state.step);
  }
  TrainingHooks hooks = make_hooks(in, built, resume, ps_client.get());
  if (!options.benchmark && in.comm.rank() == 0) write_logdir_config(logdir, in.primary, options);
  Timeline timeline(options.timeline_file, in.comm.rank());
  TrainerParts parts{*built.model,
                     *built.data,
                     *optimizer,
                     *lr_policy,
                     in.comm,
                     built.params,
                     *hooks.loss_scaler,
                     timeline,
                     hooks.eval_data.get(),
                     hooks.summaries.get(),
                     hooks.best_models.get(),
                     hooks.reducer.get(),
                     ps_client.get(),
                     hooks.deterministic.get()};
  // state.yaml keeps the identity config, so a mismatch can be explained later.
  TrainOptions train_options{settings,     plan.max_steps, options.benchmark,
                             logdir,       identity,       config::fnv1a64_hex(identity),
                             resume.state, hooks.larc};
  if (options.benchmark && options.bench_warmup_steps) {
    train_options.untimed_steps = *options.bench_warmup_steps;
  }
  const TrainResult result = train(parts, train_options, in.console);
  if (result.stop_signal != 0) return 128 + result.stop_signal;
  if (settings.target_loss && !options.benchmark) {
    return check_target_loss(in.console, result, *settings.target_loss);
  }
  return 0;
}

}  // namespace rig::engine
