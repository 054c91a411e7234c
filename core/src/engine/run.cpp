#include "engine/run.hpp"

#include <cstdio>
#include <filesystem>
#include <functional>
#include <iostream>
#include <memory>
#include <new>

#include <fmt/format.h>

#include "config/resolved_config.hpp"
#include "engine/activity.hpp"
#include "engine/checkpoint.hpp"
#include "engine/console.hpp"
#include "engine/device_choice.hpp"
#include "engine/device_data.hpp"
#include "engine/evaluator.hpp"
#include "engine/gpu_dtype_check.hpp"
#include "engine/inferencer.hpp"
#include "engine/interactive.hpp"
#include "engine/out_of_memory_advice.hpp"
#include "engine/ps/serve.hpp"
#include "engine/rank_agreement.hpp"
#include "engine/resolve.hpp"
#include "engine/resume.hpp"
#include "engine/run_parts.hpp"
#include "engine/settings.hpp"
#include "engine/training_run.hpp"
#include "launch/launcher_env.hpp"
#include "rig/error.hpp"
#include "rig/ops.hpp"

namespace rig::engine {
namespace fs = std::filesystem;

namespace {

// A bad_alloc from host memory that no tensor's storage asked for (a data
// layer's buffers, a parameter server's message bytes).
OutOfMemoryError host_allocation_failed() {
  return OutOfMemoryError("the host", "an allocation of host memory failed.");
}

bool trains(const std::string& mode) {
  return mode == "train" || mode == "train_eval";
}

// Several processes: an error on one rank is printed by that rank, then the
// whole job ends (the others may be waiting in a collective for it).
int with_failure_handling(Communicator& comm, const Console& console,
                          const std::function<int()>& body) {
  // A lone parameter-server worker still has servers to take down with it.
  if (comm.size() == 1 && comm.parameter_server() == nullptr) return body();
  try {
    return body();
  } catch (const RanksDisagree& e) {
    // The parameter servers wait for the workers: they must be ended too.
    if (comm.parameter_server() != nullptr) comm.abort(fmt::format("error: {}", e.what()), 2);
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
  if (options.bench_warmup_steps && !options.benchmark) {
    throw UserError("--bench_warmup_steps is a --benchmark option: add --benchmark");
  }
  if (options.bench_warmup_steps &&
      (*options.bench_warmup_steps < 0 || *options.bench_warmup_steps >= options.bench_steps)) {
    throw UserError(fmt::format(
        "--bench_warmup_steps must be at least 0 and less than --bench_steps ({}) so that a step "
        "is timed, got {}",
        options.bench_steps, *options.bench_warmup_steps));
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
  // Known before MPI starts, so every process reports it alike (a ConfigError).
  if (!trains && primary.plugin(PluginKind::communicator).name() == "mpi_ps") {
    throw UserError(fmt::format(
        "the mpi_ps communicator trains (--mode train or train_eval), it does not {}: run that "
        "mode on the checkpoint it wrote with the mpi communicator or in one process",
        mode));
  }
  return {std::move(primary), std::move(eval), std::move(settings), progress};
} catch (const ConfigError&) {
  throw;
} catch (const UserError& e) {
  throw ConfigError(e.what());
}

std::shared_ptr<Communicator> make_run_communicator(const ResolvedExperiment& primary,
                                                    const EngineSettings& settings) {
  auto comm = primary.plugin(PluginKind::communicator)
                  .make_communicator(primary.params(PluginKind::communicator),
                                     CommunicatorContext{settings.logdir});
  // A parameter server's single worker or server is still one of several processes.
  if (const int launched = launch::launcher_world_size();
      comm->size() == 1 && launched > 1 && comm->parameter_server() == nullptr) {
    throw ConfigError(fmt::format(
        "this process is one of {} started by an MPI launcher, but the experiment's communicator "
        "is '{}': each process would train alone and write the same logdir; set communicator: "
        "mpi in the experiment (or add --communicator=mpi)",
        launched, primary.plugin(PluginKind::communicator).name()));
  }
  return comm;
}

// The data layer, the parameters on the run's device and the model, the
// ranks' agreement on them, and the run's first lines.
void build_model(const RunInputs& in, const DeviceChoice& device, BuiltModel& built) {
  const EngineSettings& settings = in.settings;
  const std::string& mode = in.options.mode;
  const Mode plugin_mode = trains(mode) ? Mode::train : (mode == "eval" ? Mode::eval : Mode::infer);
  built.place = ProcessPlace{in.comm.rank(), in.comm.size()};
  {
    const ActivityScope activity("the data layer's start");
    built.data =
        on_device(make_data_layer(in.primary, plugin_mode, settings, built.place), settings.device);
  }
  built.model =
      make_model(in.primary, plugin_mode, settings, built.place, *built.data, built.params);
  {
    const ActivityScope activity("the model's parameters");
    built.params.allocate(settings.random_seed, settings.compute_dtype, settings.device);
  }
  check_ranks_agree(
      in.comm, {in.primary.config.to_yaml(), plugin_versions(in.primary), built.params.numel()});
  if (!device.note.empty()) in.console.print("*** {}", device.note);
  in.console.print("*** Experiment {} ({} mode): {} parameters, {} process(es)",
                   in.options.experiment, mode, built.params.numel(), in.comm.size());
  if (settings.bf16_matmuls) {
    const char* how = settings.device.type == Device::Type::cuda
                          ? "cuBLASLt's bfloat16 products on the tensor cores"
                      : ops::fast_bf16_products(settings.device)
                          ? "oneDNN's bfloat16 kernels for all but the smallest products"
                          : "this CPU has no bfloat16 dot products: the same numbers, no faster";
    in.console.print(
        "*** Matrix products round their operands to bfloat16 and accumulate in float32 ({})", how);
  }
  // Set either way: a back end keeps it for the process's later runs.
  const bool tf32 = set_tf32(settings.device, settings.tf32_matmuls);
  if (settings.tf32_matmuls) {
    if (tf32) {
      in.console.print(
          "*** matmul_precision tensorfloat32: float32 matrix products and convolutions run on "
          "the GPU's TF32 tensor cores (operands rounded to 10 mantissa bits, float32 "
          "accumulation)");
    } else {
      in.console.print(
          "*** matmul_precision tensorfloat32: no effect on {} (only a GPU of compute capability "
          "8.0 or later has TF32; float32 as given)",
          to_string(settings.device));
    }
  }
  if (settings.cudnn_benchmark) {
    if (set_convolution_autotuning(settings.device, true)) {
      in.console.print(
          "*** cudnn_benchmark: each convolution shape's first call times cuDNN's engines and "
          "keeps the fastest (the results' last bits may differ from run to run)");
    } else {
      in.console.print(
          "*** cudnn_benchmark: no effect on {} (only cuDNN on a GPU has engines to "
          "time)",
          to_string(settings.device));
    }
  }
}

// eval, infer and interactive_infer: a trained checkpoint, then the mode.
int run_trained_model(const RunInputs& in, BuiltModel& built) {
  const std::string& mode = in.options.mode;
  const fs::path logdir = in.settings.logdir;
  const Checkpoint ckpt = checkpoint_for_evaluation(logdir, mode, in.options.load_from);
  restore_parameters(ckpt, built.params);
  in.console.print("*** Restored {} (step {})", ckpt.dir.string(), ckpt.state.step);
  if (mode == "interactive_infer") {
    if (in.comm.size() > 1) throw UserError("interactive_infer runs in one process");
    in.console.print(
        "*** Interactive infer: one sample per line on stdin, answers on stdout; end with Ctrl-D");
    interactive_infer(*built.model, *built.data, std::cin, std::cout, in.console);
  } else if (mode == "eval") {
    const EvalOptions options =
        eval_options(*built.data, in.settings.eval_bleu, in.settings.eval_bleu_samples, logdir);
    print_eval(in.console, evaluate(*built.model, *built.data, in.comm, options), ckpt.state.step);
  } else {
    const fs::path output = in.options.infer_output_file.empty()
                                ? logdir / "infer_output.txt"
                                : fs::path(in.options.infer_output_file);
    const auto count = infer(*built.model, *built.data, in.comm, output);
    in.console.print("*** Wrote {} predictions to {}", count, output.string());
  }
  return 0;
}

}  // namespace

int run(const RunOptions& options) {
  ResolvedRun resolved = resolve_run(options);
  EngineSettings& settings = resolved.settings;
  // The run's matrix-product precision, for every op on this thread.
  const ops::MatmulPrecisionScope precision_scope(settings.bf16_matmuls ? MatmulPrecision::bf16
                                                                        : MatmulPrecision::f32);
  // Before the communicator: a CUDA-aware one needs the device chosen first.
  const DeviceChoice device = choose_run_device(resolved.primary.config, settings.device_request);
  check_gpu_dtypes(device, settings, resolved.primary.config);
  settings.device = device.device;
  const auto comm = make_run_communicator(resolved.primary, settings);
  ParameterServerTransport* const link = comm->parameter_server();
  if (link != nullptr && link->is_server()) {
    const Console quiet(false, ProgressBar::off);
    const RunInputs inputs{options, resolved.primary, resolved.eval, settings, *comm, quiet};
    // A server holds its shard of the parameters and of the optimizer's state.
    const auto explained = [&](const OutOfMemoryError& e) {
      return e.within(
          fmt::format("parameter server {}", link->self() - link->workers()),
          fmt::format("To fit, run more servers (communicator_params/servers, now {}): each "
                      "holds 1/servers of the parameters, their gradients and the optimizer's "
                      "state.",
                      link->servers()));
    };
    try {
      return ps::serve_parameters(inputs, *link);
    } catch (const OutOfMemoryError& e) {
      comm->abort(fmt::format("error: {}", explained(e).what()), 2);
    } catch (const std::bad_alloc&) {
      comm->abort(fmt::format("error: {}", explained(host_allocation_failed()).what()), 2);
    } catch (const UserError& e) {
      comm->abort(fmt::format("error: {}", e.what()), 2);
    } catch (const std::exception& e) {
      comm->abort(fmt::format("failed: {}", e.what()), 1);
    }
  }
  // interactive_infer answers on stdout, so everything else goes to stderr.
  const Console console = options.mode == "interactive_infer"
                              ? Console(comm->rank() == 0, false, stderr)
                              : Console(comm->rank() == 0, resolved.progress);
  const RunInputs inputs{options, resolved.primary, resolved.eval, settings, *comm, console};
  // Where it happened, and what to change.
  const auto explained = [&](const OutOfMemoryError& e) {
    const std::string where = e.where().empty() ? activity_that_failed() : e.where();
    std::optional<std::int64_t> eval_batch;
    if (resolved.eval) eval_batch = read_settings(resolved.eval->config).batch_size_per_gpu;
    const YAML::Node recompute =
        resolved.primary.params(PluginKind::model)["recompute_activations"];
    const bool can_recompute = recompute.IsScalar() && !recompute.as<bool>();
    return e.within(where,
                    out_of_memory_advice(options.mode, where, settings, eval_batch, can_recompute));
  };
  return with_failure_handling(*comm, console, [&]() -> int {
    try {
      BuiltModel built;
      build_model(inputs, device, built);
      return trains(options.mode) ? train_model(inputs, built) : run_trained_model(inputs, built);
    } catch (const OutOfMemoryError& e) {
      throw explained(e);
    } catch (const std::bad_alloc&) {
      throw explained(host_allocation_failed());
    }
  });
}

}  // namespace rig::engine
