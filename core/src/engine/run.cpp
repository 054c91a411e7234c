#include "engine/run.hpp"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <memory>
#include <set>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "config/resolved_config.hpp"
#include "engine/checkpoint.hpp"
#include "engine/console.hpp"
#include "engine/device_choice.hpp"
#include "engine/device_data.hpp"
#include "engine/evaluator.hpp"
#include "engine/inferencer.hpp"
#include "engine/interactive.hpp"
#include "engine/launcher_env.hpp"
#include "engine/rank_agreement.hpp"
#include "engine/resolve.hpp"
#include "engine/run_parts.hpp"
#include "engine/settings.hpp"
#include "engine/trainer.hpp"
#include "rig/error.hpp"
#include "rig/ops.hpp"
#include "rig/version.hpp"

namespace rig::engine {
namespace fs = std::filesystem;

namespace {

// Keys that may change between a run and its resumption without making the
// checkpoint belong to a different experiment.
constexpr const char* kScheduleKeys[] = {
    "max_steps",        "num_epochs",           "logdir",
    "print_loss_steps", "eval_steps",           "save_checkpoint_steps",
    "target_loss",      "save_summaries_steps", "print_samples_steps",
    "num_checkpoints",  "best_model_metric",    "best_model_mode",
    "num_best_models",  "load_model",
    "device",            // a run may resume on another device
    "matmul_precision",  // or at another matmul precision
};

std::string identity_yaml(const config::ResolvedConfig& cfg) {
  YAML::Node copy = YAML::Clone(cfg.root);
  for (const char* key : kScheduleKeys) copy.remove(key);
  YAML::Emitter out;
  out << copy;
  return out.c_str();
}

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

// --checkpoint latest | best | a ckpt-<step> folder.
Checkpoint checkpoint_for_evaluation(const fs::path& logdir, const std::string& mode,
                                     const std::string& which) {
  if (which == "best") {
    auto best = best_checkpoint(logdir);
    if (!best) {
      throw UserError(fmt::format(
          "--checkpoint best: {} holds no best model; train with --mode train_eval (which keeps "
          "num_best_models by best_model_metric) or use --checkpoint latest",
          (logdir / "best_models").string()));
    }
    return load_checkpoint(*best);
  }
  if (which != "latest") {
    if (!fs::is_directory(which)) {
      throw UserError(fmt::format(
          "--checkpoint {}: no such folder (expected latest, best or a ckpt-<step> folder)",
          which));
    }
    return load_checkpoint(which);
  }
  auto latest = latest_checkpoint(logdir);
  if (!latest) {
    throw UserError(
        fmt::format("{} mode needs a trained model, but {} holds no checkpoint; train first "
                    "(rig run EXP --mode train) or point --logdir at a trained run",
                    mode, (logdir / "checkpoints").string()));
  }
  return load_checkpoint(*latest);
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

// Several processes: an error on one rank is printed by that rank, then the
// whole job ends (the others may be waiting in a collective for it).
int with_failure_handling(Communicator& comm, const Console& console,
                          const std::function<int()>& body) {
  if (comm.size() == 1) return body();
  try {
    return body();
  } catch (const RanksDisagree& e) {
    if (comm.rank() == 0) std::fprintf(stderr, "rig: error: %s\n", e.what());
    return 2;
  } catch (const UserError& e) {
    // abort() prints the reason with this rank's name, pid and host.
    console.clear_bar();
    comm.abort(fmt::format("error: {}", e.what()), 2);
  } catch (const std::exception& e) {
    console.clear_bar();
    comm.abort(fmt::format("failed: {}", e.what()), 1);
  }
  return 1;  // not reached: abort() ends the process
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

// Resuming with another max_steps: one line when the lr policy's rates depend
// on it (compared at the resume step and across both schedules), else "".
std::string schedule_change_note(const LrPolicy& now, const LrPolicy& before,
                                 const std::string& policy, std::int64_t step,
                                 std::int64_t old_max_steps, std::int64_t new_max_steps) {
  const std::int64_t span = std::max(old_max_steps, new_max_steps);
  constexpr std::int64_t kSamples = 64;
  bool depends = now.learning_rate(step) != before.learning_rate(step);
  for (std::int64_t i = 0; i <= kSamples && !depends; ++i) {
    const std::int64_t s = span * i / kSamples;
    depends = now.learning_rate(s) != before.learning_rate(s);
  }
  if (!depends) return "";
  return fmt::format(
      "max_steps changed from {} (checkpoint) to {} and lr policy {} depends on it: from step {} "
      "on the rates are the {}-step schedule's ({:.6g} at step {}; the {}-step schedule gives "
      "{:.6g} there)",
      old_max_steps, new_max_steps, policy, step, new_max_steps, now.learning_rate(step), step,
      old_max_steps, before.learning_rate(step));
}

std::string plugin_versions(const ResolvedExperiment& exp) {
  std::string text;
  for (const auto& [kind, library] : exp.plugins) {
    const PluginDescriptor& d = library->descriptor();
    text += fmt::format("{} {} {};", static_cast<int>(kind), d.name, d.version);
  }
  return text;
}

// What the experiment file and the command line say, checked: the same on
// every process of a host, so its errors are ConfigErrors.
struct ResolvedRun {
  ResolvedExperiment primary;              // train, eval or infer
  std::optional<ResolvedExperiment> eval;  // train_eval's evaluation
  EngineSettings settings;
  ProgressBar progress = ProgressBar::automatic;
};

ResolvedRun resolve_run(const RunOptions& options) try {
  const std::string& mode = options.mode;
  if (mode != "train" && mode != "eval" && mode != "train_eval" && mode != "infer" &&
      mode != "interactive_infer") {
    throw UserError(fmt::format(
        "unknown mode '{}': expected train, eval, train_eval, infer or interactive_infer", mode));
  }
  if (options.benchmark && mode != "train") {
    throw UserError("--benchmark times training steps: use it with --mode train");
  }
  if (options.benchmark && options.bench_steps < 1) {
    throw UserError(fmt::format("--bench_steps must be at least 1, got {}", options.bench_steps));
  }
  const bool trains = mode == "train" || mode == "train_eval";
  if (trains && options.load_from != "latest") {
    throw UserError(
        "--checkpoint picks the model eval and infer load; training resumes with "
        "--continue_learning (or transfers weights with load_model)");
  }
  if (!trains && !options.timeline_file.empty()) {
    throw UserError("--timeline records training steps: use it with --mode train or train_eval");
  }
  const ProgressBar progress = parse_progress_bar(options.progress);
  const auto file = config::ExperimentFile::load(options.experiment);
  const plugin_host::PluginHost host(
      plugin_host::PluginHost::default_search_path(options.plugin_paths));
  const std::string primary_mode =
      trains ? "train" : (mode == "interactive_infer" ? "infer" : mode);
  ResolvedExperiment primary = resolve_experiment(file, primary_mode, options.overrides, host);
  std::optional<ResolvedExperiment> eval;
  if (mode == "train_eval") {
    eval = resolve_experiment(file, "eval", options.overrides, host);
    check_train_eval_model(primary, *eval);
  }
  EngineSettings settings = read_settings(primary.config);
  return {std::move(primary), std::move(eval), std::move(settings), progress};
} catch (const ConfigError&) {
  throw;
} catch (const UserError& e) {
  throw ConfigError(e.what());
}

}  // namespace

int run(const RunOptions& options) {
  const std::string& mode = options.mode;
  ResolvedRun resolved = resolve_run(options);
  const bool trains = mode == "train" || mode == "train_eval";
  const bool interactive = mode == "interactive_infer";
  ResolvedExperiment& primary = resolved.primary;
  std::optional<ResolvedExperiment>& eval_exp = resolved.eval;
  EngineSettings& settings = resolved.settings;
  // The run's matrix-product precision, for every op on this thread.
  const ops::MatmulPrecisionScope precision_scope(settings.bf16_matmuls ? MatmulPrecision::bf16
                                                                        : MatmulPrecision::f32);
  // Before the communicator: a CUDA-aware one needs the device chosen first.
  const DeviceChoice device = choose_run_device(primary.config, settings.device_request);
  settings.device = device.device;
  const fs::path logdir = settings.logdir;
  auto comm = primary.plugin(PluginKind::communicator)
                  .make_communicator(primary.params(PluginKind::communicator),
                                     CommunicatorContext{settings.logdir});
  if (const int launched = launcher_world_size(); comm->size() == 1 && launched > 1) {
    throw ConfigError(fmt::format(
        "this process is one of {} started by an MPI launcher, but the experiment's communicator "
        "is '{}': each process would train alone and write the same logdir; set communicator: "
        "mpi in the experiment (or add --communicator=mpi)",
        launched, primary.plugin(PluginKind::communicator).name()));
  }
  // interactive_infer answers on stdout, so everything else goes to stderr.
  const Console console = interactive ? Console(comm->rank() == 0, false, stderr)
                                      : Console(comm->rank() == 0, resolved.progress);
  const Mode primary_enum = trains ? Mode::train : (mode == "eval" ? Mode::eval : Mode::infer);
  return with_failure_handling(*comm, console, [&]() -> int {
    const ProcessPlace place{comm->rank(), comm->size()};
    auto data = on_device(make_data_layer(primary, primary_enum, settings, place), settings.device);
    ParameterStore params;
    auto model = make_model(primary, primary_enum, settings, place, *data, params);
    params.allocate(settings.random_seed, settings.compute_dtype, settings.device);
    check_ranks_agree(*comm, {primary.config.to_yaml(), plugin_versions(primary), params.numel()});
    if (!device.note.empty()) console.print("*** {}", device.note);
    console.print("*** Experiment {} ({} mode): {} parameters, {} process(es)", options.experiment,
                  mode, params.numel(), comm->size());
    if (settings.bf16_matmuls) {
      console.print(
          "*** Matrix products round their operands to bfloat16 and accumulate in "
          "float32 ({})",
          ops::fast_bf16_products(settings.device)
              ? "oneDNN's bfloat16 kernels for all but the smallest products"
              : "this CPU has no bfloat16 dot products: the same numbers, no faster");
    }

    if (!trains) {
      Checkpoint ckpt = checkpoint_for_evaluation(logdir, mode, options.load_from);
      restore_parameters(ckpt, params);
      console.print("*** Restored {} (step {})", ckpt.dir.string(), ckpt.state.step);
      if (interactive) {
        if (comm->size() > 1) throw UserError("interactive_infer runs in one process");
        console.print(
            "*** Interactive infer: one sample per line on stdin, answers on stdout; "
            "end with Ctrl-D");
        interactive_infer(*model, *data, std::cin, std::cout, console);
      } else if (mode == "eval") {
        print_eval(
            console,
            evaluate(*model, *data, *comm,
                     eval_options(*data, settings.eval_bleu, settings.eval_bleu_samples, logdir)),
            ckpt.state.step);
      } else {
        const fs::path output = options.infer_output_file.empty()
                                    ? logdir / "infer_output.txt"
                                    : fs::path(options.infer_output_file);
        const auto count = infer(*model, *data, *comm, output);
        console.print("*** Wrote {} predictions to {}", count, output.string());
      }
      return 0;
    }

    // Training.
    const std::string identity = identity_yaml(primary.config);
    TrainingState start;
    std::optional<Checkpoint> resumed;
    if (!options.benchmark) {
      auto existing = latest_checkpoint(logdir);
      if (options.continue_learning) {
        if (!existing) {
          throw UserError(
              fmt::format("--continue_learning: {} holds no checkpoint to resume from; "
                          "drop the flag to start a new run",
                          (logdir / "checkpoints").string()));
        }
        Checkpoint ckpt = load_checkpoint(*existing);
        if (ckpt.state.config_hash != config::fnv1a64_hex(identity)) {
          YAML::Node saved = YAML::LoadFile((ckpt.dir / "state.yaml").string())["config"];
          // Both sides are identity configs: the schedule keys are already gone.
          const std::vector<std::string> diffs = config_differences(saved, YAML::Load(identity));
          throw UserError(fmt::format(
              "--continue_learning: checkpoint {} was written by a different experiment config "
              "(only max_steps, num_epochs, logdir and logging intervals may change); differences "
              "(checkpoint -> now): {}",
              ckpt.dir.string(),
              diffs.empty() ? "unknown" : fmt::format("{}", fmt::join(diffs, "; "))));
        }
        restore_parameters(ckpt, params);
        start = ckpt.state;
        console.print("*** Resuming from {} at step {}", ckpt.dir.string(), start.step);
        resumed = std::move(ckpt);
      } else if (existing) {
        throw UserError(
            fmt::format("logdir {} already holds checkpoints from an earlier run; resume it with "
                        "--continue_learning, or start fresh with another --logdir (or delete {})",
                        logdir.string(), logdir.string()));
      }
    }
    if (!resumed && settings.load_model) {
      print_transfer(console, load_matching_parameters(*settings.load_model, params));
    }
    // Every rank starts from rank 0's weights.
    if (comm->size() > 1) comm->broadcast(params.values(), 0)->wait();
    params.publish_values();

    auto optimizer = make_optimizer(primary, settings, place, params);
    if (resumed) optimizer->load_state(resumed->optimizer);

    const StepPlan plan =
        plan_steps(settings, data->epoch_size(), place,
                   options.benchmark ? std::optional(options.bench_steps) : std::nullopt);
    const std::int64_t max_steps = plan.max_steps;
    auto lr_policy = make_lr_policy(primary, plan, max_steps);
    if (resumed && resumed->state.max_steps > 0 && resumed->state.max_steps != max_steps) {
      const auto note =
          schedule_change_note(*lr_policy, *make_lr_policy(primary, plan, resumed->state.max_steps),
                               primary.plugin(PluginKind::lr_policy).name(), start.step,
                               resumed->state.max_steps, max_steps);
      if (!note.empty()) console.print("*** {}", note);
    }

    std::shared_ptr<DataLayer> eval_data;
    if (eval_exp) {
      EngineSettings eval_settings = read_settings(eval_exp->config);
      eval_settings.device = settings.device;  // one model, one device
      eval_data =
          on_device(make_data_layer(*eval_exp, Mode::eval, eval_settings, place), settings.device);
    }
    if (!options.benchmark && comm->rank() == 0) write_logdir_config(logdir, primary, options);

    auto loss_scaler = make_loss_scaler(settings.loss_scaling, settings.loss_scaling_params);
    std::optional<LarcSettings> larc;
    if (settings.larc_params && !settings.larc_params.IsNull()) {
      larc = read_larc_settings(settings.larc_params);
    }
    std::unique_ptr<SummaryWriter> summaries;
    if (!options.benchmark && comm->rank() == 0 && settings.save_summaries_steps > 0) {
      summaries = std::make_unique<SummaryWriter>(logdir);
      // TensorBoard drops earlier values at steps >= this one: the checkpoint's
      // own step was logged before the checkpoint was written, so it stays.
      if (resumed) summaries->session_start(start.step + 1);
    }
    std::unique_ptr<BestModels> best_models;
    if (eval_data && !options.benchmark && settings.num_best_models > 0) {
      best_models = std::make_unique<BestModels>(
          logdir, settings.best_model_metric, settings.best_model_mode, settings.num_best_models);
    }
    Timeline timeline(options.timeline_file, comm->rank());
    std::unique_ptr<GradientReducer> reducer;
    if (comm->size() > 1) {
      reducer = std::make_unique<GradientReducer>(
          params, *comm,
          BucketSettings{settings.bucket_cap_mb, settings.fp16_gradient_compression});
      console.print(
          "*** Data-parallel over {} processes: {:.2f} MB of gradients in {} bucket(s) of "
          "at most {} MB{}",
          comm->size(), static_cast<double>(reducer->bytes_per_step()) / 1e6,
          reducer->buckets().size(), settings.bucket_cap_mb,
          settings.fp16_gradient_compression ? ", reduced as float16" : "");
    }

    TrainerParts parts{*model,          *data,           *optimizer,        *lr_policy,
                       *comm,           params,          *loss_scaler,      timeline,
                       eval_data.get(), summaries.get(), best_models.get(), reducer.get()};
    // state.yaml keeps the identity config, so a mismatch can be explained later.
    TrainOptions train_options{settings, max_steps, options.benchmark,
                               logdir,   identity,  config::fnv1a64_hex(identity),
                               start,    larc};
    const TrainResult result = train(parts, train_options, console);
    if (result.stop_signal != 0) return 128 + result.stop_signal;

    if (settings.target_loss && !options.benchmark) {
      return check_target_loss(console, result, *settings.target_loss);
    }
    return 0;
  });
}

}  // namespace rig::engine
