// The `rig` command. Exit codes: 0 success, 2 bad input (usage, config,
// files), 1 a failure while running.
#include <chrono>
#include <cstdio>
#include <exception>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>
#include <yaml-cpp/yaml.h>
#include <CLI/CLI.hpp>

#include "commands.hpp"
#include "config/overrides.hpp"
#include "engine/run.hpp"
#include "engine/validate.hpp"
#include "launch/launcher_env.hpp"
#include "report/report.hpp"
#include "rig/error.hpp"
#include "rig/plugin.hpp"
#include "rig/version.hpp"

namespace {

constexpr int kExitRunFailure = 1;
constexpr int kExitBadInput = 2;

std::string join_argv(int argc, char** argv) {
  std::string out;
  for (int i = 0; i < argc; ++i) {
    if (i > 0) out += ' ';
    out += argv[i];
  }
  return out;
}

// Arguments CLI11 did not know are config overrides: OpenSeq2Seq's
// --lr_policy_params/learning_rate=0.5 (or --max_steps=10).
std::vector<rig::config::Override> overrides_from(const std::vector<std::string>& extras,
                                                  const std::vector<std::string>& set_args) {
  std::vector<rig::config::Override> overrides;
  for (const auto& arg : extras) {
    if (!arg.starts_with("--") || arg.find('=') == std::string::npos) {
      throw rig::UserError(fmt::format(
          "unknown argument '{}'; config overrides look like --lr_policy_params/learning_rate=0.5 "
          "or --set lr_policy_params.learning_rate=0.5 (see rig --help)",
          arg));
    }
    overrides.push_back(rig::config::parse_slash_override(arg));
  }
  for (const auto& arg : set_args) overrides.push_back(rig::config::parse_set_override(arg));
  return overrides;
}

int dispatch(int argc, char** argv) {
  CLI::App app{"rig: deep-learning experiments from one YAML file, on CPU, GPU and many nodes"};
  auto on_off = [](int flag) { return flag ? "on" : "off"; };
  app.set_version_flag(
      "--version", fmt::format("rig {} (plugin ABI {}; CUDA {}, MPI {}, NCCL {})", RIG_VERSION,
                               rig::kPluginAbiVersion, on_off(RIG_WITH_CUDA), on_off(RIG_WITH_MPI),
                               on_off(RIG_WITH_NCCL)));
  app.require_subcommand(1);
  app.footer(
      "Docs: docs/ in rig's source tree. A new plugin: rig-new-plugin KIND NAME [DIR] "
      "(tools/new-plugin in the source tree) writes a compiling, tested skeleton; see "
      "docs/plugins.md.");
  std::vector<std::string> plugin_paths;
  std::vector<std::string> set_args;
  auto add_common = [&](CLI::App* sub, bool with_overrides) {
    sub->add_option("--plugin-path", plugin_paths,
                    "extra folder(s) to search for plugins first (':'-separated, repeatable)");
    if (with_overrides) {
      sub->add_option("--set", set_args, "override a config value: --set a.b=c (repeatable)");
      sub->allow_extras();
      sub->footer(
          "Any --key=value or --kind_params/key=value argument overrides the experiment file, "
          "as in OpenSeq2Seq: --lr_policy_params/learning_rate=0.5");
    }
  };

  rig::engine::RunOptions run_options;
  std::string logdir;
  auto* run = app.add_subcommand("run", "train, evaluate or infer with an experiment");
  run->add_option("experiment", run_options.experiment, "experiment YAML file")->required();
  run->add_option("--mode", run_options.mode,
                  "train | eval | train_eval | infer | interactive_infer")
      ->check(CLI::IsMember({"train", "eval", "train_eval", "infer", "interactive_infer"}));
  run->add_option("--logdir", logdir, "where checkpoints and logs go (overrides logdir)");
  run->add_flag("--continue_learning", run_options.continue_learning,
                "resume training from the latest checkpoint in the logdir");
  run->add_flag("--benchmark", run_options.benchmark,
                "time --bench_steps training steps; write no checkpoints");
  run->add_option("--bench_steps", run_options.bench_steps, "steps to run with --benchmark");
  run->add_option("--bench_warmup_steps", run_options.bench_warmup_steps,
                  "the first steps of --bench_steps, run untimed (default 1)");
  int nproc = 1;
  run->add_option("--nproc", nproc,
                  "start this many processes on this machine (through mpirun, communicator mpi)")
      ->check(CLI::PositiveNumber);
  int servers = 0;
  run->add_option("--servers", servers,
                  "with --nproc N: N workers and this many parameter servers (through mpirun, "
                  "communicator mpi_ps)")
      ->check(CLI::NonNegativeNumber);
  bool elastic = false;
  rig::launch::elastic::ElasticOptions elastic_options;
  run->add_flag("--elastic", elastic,
                "supervise the job: start it through mpirun and, when a rank or host fails, "
                "leave that out and restart from the newest checkpoint with the same global "
                "batch (docs/distributed.md)");
  run->add_option("--hosts", elastic_options.hosts,
                  "--elastic: the hosts and their slots, host:N,... (default: this machine, one "
                  "slot per core)");
  run->add_option("--hostfile", elastic_options.hostfile,
                  "--elastic: a file of hosts, one per line (host:N or 'host slots=N')");
  run->add_option("--host-discovery", elastic_options.discovery,
                  "--elastic: a command printing host:N lines, run before every attempt");
  run->add_option("--min-nproc", elastic_options.min_nproc,
                  "--elastic: the fewest processes to go on with (default 1)")
      ->check(CLI::PositiveNumber);
  run->add_option("--max-nproc", elastic_options.max_nproc,
                  "--elastic: the most processes a restart may use (default: the first attempt's)")
      ->check(CLI::PositiveNumber);
  run->add_option("--max-restarts", elastic_options.max_restarts,
                  "--elastic: restarts before giving up (default 3)")
      ->check(CLI::NonNegativeNumber);
  run->add_option("--host-backoff-s", elastic_options.backoff_s,
                  "--elastic: how long a failed host or slot is left out, doubling with each of "
                  "its failures (default 300)")
      ->check(CLI::NonNegativeNumber);
  run->add_option("--teardown-timeout-s", elastic_options.teardown_timeout_s,
                  "--elastic: how long mpirun may take to end a failed job before it is ended "
                  "(default 60)")
      ->check(CLI::PositiveNumber);
  run->add_option("--infer_output_file", run_options.infer_output_file,
                  "where infer mode writes its lines (default LOGDIR/infer_output.txt)");
  run->add_option("--timeline", run_options.timeline_file,
                  "write a Chrome-trace JSON of every training step's phases to this file");
  run->add_option("--progress", run_options.progress,
                  "progress bar while training: auto (default: when stdout is a terminal and no "
                  "launcher such as mpirun started rig), on, off")
      ->check(CLI::IsMember({"auto", "on", "off"}));
  run->add_option("--checkpoint", run_options.load_from,
                  "eval / infer: 'latest' (default), 'best' (LOGDIR/best_models) or a "
                  "ckpt-<step> folder");
  add_common(run, true);

  std::string experiment;
  auto* validate = app.add_subcommand(
      "validate",
      "check an experiment in every mode: resolve it and build its plugins, run no step");
  validate->add_option("experiment", experiment, "experiment YAML file")->required();
  bool validate_skip_data = false;
  validate->add_flag("--skip-data", validate_skip_data,
                     "build no data layer (and so no model or optimizer): for a machine "
                     "without the experiment's data");
  add_common(validate, true);

  std::string config_mode = "train";
  auto* config = app.add_subcommand("config", "print the fully resolved config of one mode");
  config->add_option("experiment", experiment, "experiment YAML file")->required();
  config->add_option("--mode", config_mode, "train | eval | infer")
      ->check(CLI::IsMember({"train", "eval", "infer"}));
  add_common(config, true);

  auto* plugins = app.add_subcommand("plugins", "list the plugins rig can find");
  add_common(plugins, false);

  std::string schema_what;
  auto* schema =
      app.add_subcommand("schema", "print the schema of the experiment file or a plugin");
  schema->add_option("what", schema_what, "'experiment' or KIND/NAME, e.g. model/mlp")->required();
  add_common(schema, false);

  std::string report_logdir;
  std::string report_output;
  auto* report = app.add_subcommand(
      "report", "write one self-contained HTML file of a run's metrics (SVG charts, config)");
  report->add_option("logdir", report_logdir, "the run's logdir (holding metrics.jsonl)")
      ->required();
  report->add_option("-o,--output", report_output, "the HTML file (default LOGDIR/report.html)");

  std::string bleu_reference;
  std::string bleu_hypothesis;
  std::string bleu_smooth = "exp";
  double bleu_smooth_value = 0;
  rig::bleu::Options bleu_options;
  auto* bleu = app.add_subcommand(
      "bleu", "corpus BLEU of hypotheses against references, exactly as SacreBLEU computes it");
  bleu->add_option("reference", bleu_reference, "reference file, one sentence per line")
      ->required();
  bleu->add_option("hypothesis", bleu_hypothesis,
                   "hypothesis file, line by line with the references (default: standard input)");
  bleu->add_option("--tokenize", bleu_options.tokenize, "13a (default) | none")
      ->check(CLI::IsMember({"13a", "none"}));
  bleu->add_option("--smooth-method", bleu_smooth, "exp (default) | floor | add-k | none")
      ->check(CLI::IsMember({"exp", "floor", "add-k", "none"}));
  auto* smooth_value =
      bleu->add_option("--smooth-value", bleu_smooth_value, "floor: default 0.1, add-k: default 1");
  bleu->add_flag("--lowercase", bleu_options.lowercase, "compare lowercased text");
  bleu->add_flag("--effective-order", bleu_options.effective_order,
                 "average only the n-gram orders the hypotheses have");

  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::fprintf(stderr,
                 "rig: error: %s\nRun 'rig --help' (or 'rig SUBCOMMAND --help') for usage.\n",
                 e.what());
    return kExitBadInput;
  }

  if (run->parsed()) {
    const bool elastic_flags_given =
        run->count("--hosts") + run->count("--hostfile") + run->count("--host-discovery") +
            run->count("--min-nproc") + run->count("--max-nproc") + run->count("--max-restarts") +
            run->count("--host-backoff-s") + run->count("--teardown-timeout-s") >
        0;
    if (elastic_flags_given && !elastic) {
      throw rig::UserError(
          "--hosts, --hostfile, --host-discovery, --min-nproc, --max-nproc, --max-restarts, "
          "--host-backoff-s and --teardown-timeout-s belong to --elastic: add --elastic");
    }
    if (run->count("--hosts") + run->count("--hostfile") + run->count("--host-discovery") > 1) {
      throw rig::UserError("--elastic: give one of --hosts, --hostfile and --host-discovery");
    }
    if (!elastic && (nproc > 1 || servers > 0)) {
      rig::cli::launch_local_processes(nproc, servers, argc, argv);
    }
    run_options.plugin_paths = plugin_paths;
    run_options.overrides = overrides_from(run->remaining(), set_args);
    if (!logdir.empty()) {
      run_options.overrides.push_back({"logdir", logdir, "--logdir " + logdir});
    }
    if (elastic) {
      if (run->count("--nproc") > 0) elastic_options.nproc = nproc;
      return rig::cli::launch_elastic(
          elastic_options,
          {run_options.experiment, run_options.mode, run_options.continue_learning,
           run_options.benchmark, servers, run_options.overrides, plugin_paths},
          argc, argv);
    }
    run_options.command_line = join_argv(argc, argv);
    return rig::engine::run(run_options);
  }
  if (validate->parsed()) {
    return rig::engine::validate({experiment, overrides_from(validate->remaining(), set_args),
                                  plugin_paths, validate_skip_data},
                                 stdout);
  }
  if (config->parsed()) {
    return rig::cli::print_config(experiment, config_mode,
                                  overrides_from(config->remaining(), set_args), plugin_paths);
  }
  if (plugins->parsed()) return rig::cli::list_plugins(plugin_paths);
  if (report->parsed()) {
    const auto path = rig::report::write_report(report_logdir, report_output);
    std::printf("*** Wrote report %s\n", path.string().c_str());
    return 0;
  }
  if (bleu->parsed()) {
    bleu_options.smooth = rig::bleu::parse_smooth(bleu_smooth);
    if (smooth_value->count() > 0) bleu_options.smooth_value = bleu_smooth_value;
    return rig::cli::bleu(bleu_reference, bleu_hypothesis, bleu_options);
  }
  return rig::cli::print_schema(schema_what, plugin_paths);
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return dispatch(argc, argv);
  } catch (const rig::engine::ConfigError& e) {
    // Every process of this host met the same bad input: one line, not one per rank.
    if (rig::launch::launcher_local_rank() == 0) {
      std::fprintf(stderr, "rig: error: %s\n", e.what());
    } else {
      // mpirun ends the job when the first process exits: let the one that
      // explains go first.
      std::this_thread::sleep_for(std::chrono::seconds(2));
    }
    return kExitBadInput;
  } catch (const rig::UserError& e) {
    std::fprintf(stderr, "rig: error: %s\n", e.what());
    return kExitBadInput;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "rig: failed: %s\n", e.what());
    return kExitRunFailure;
  }
}
