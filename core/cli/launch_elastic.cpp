// `rig run --elastic EXP`: resolves the experiment for what the supervisor
// needs (logdir, iter_size, checkpoints, deterministic reduction), strips the
// supervisor's own flags from the command line and hands the rest, as the
// job, to launch/elastic's supervisor.
#include <string>
#include <vector>

#include <fmt/format.h>

#include "commands.hpp"
#include "config/experiment_file.hpp"
#include "engine/resolve.hpp"
#include "engine/settings.hpp"
#include "launch/mpirun_command.hpp"
#include "plugin_host/plugin_host.hpp"
#include "rig/error.hpp"

namespace rig::cli {
namespace {

// The supervisor's flags (with a value unless listed in kElasticSwitches),
// and the ones it sets itself on every attempt.
const std::vector<std::string> kElasticValueFlags = {
    "--nproc",     "--hosts",        "--hostfile",       "--host-discovery",     "--min-nproc",
    "--max-nproc", "--max-restarts", "--host-backoff-s", "--teardown-timeout-s", "--servers"};
const std::vector<std::string> kElasticSwitches = {"--elastic", "--continue_learning"};

// How many arguments of argv[i...] the supervisor takes (0: the job's).
int supervisor_argument(const std::string& arg) {
  for (const auto& flag : kElasticSwitches) {
    if (arg == flag) return 1;
  }
  for (const auto& flag : kElasticValueFlags) {
    if (arg == flag) return 2;
    if (arg.starts_with(flag + "=")) return 1;
  }
  if (arg.starts_with("--iter_size=")) return 1;
  return 0;
}

// The communicator the file gives training (train_params over base_params).
std::string file_communicator(const config::ExperimentFile& file) {
  std::string communicator = "local";
  for (const char* section : {"base_params", "train_params"}) {
    const YAML::Node params = file.root()[section];
    if (params && params.IsMap() && params["communicator"] && params["communicator"].IsScalar()) {
      communicator = params["communicator"].as<std::string>();
    }
  }
  return communicator;
}

}  // namespace

int launch_elastic(launch::elastic::ElasticOptions options, const ElasticRun& run, int argc,
                   char** argv) {
  if (run.servers > 0) {
    throw UserError(
        "--elastic restarts all-reduce jobs (communicator mpi or nccl); a parameter-server job "
        "(--servers) cannot be restarted on fewer processes: drop --servers or --elastic");
  }
  if (run.benchmark) throw UserError("--elastic trains; --benchmark times steps: use one of them");
  if (run.mode != "train" && run.mode != "train_eval") {
    throw UserError(
        fmt::format("--elastic restarts training; --mode {} runs once: drop --elastic", run.mode));
  }
  const auto file = config::ExperimentFile::load(run.experiment);
  const plugin_host::PluginHost host(
      plugin_host::PluginHost::default_search_path(run.plugin_paths));
  // The job runs on mpi unless the file or the command line names a
  // multi-process communicator; it is resolved as it will run.
  std::string communicator = file_communicator(file);
  for (const auto& o : run.overrides) {
    if (o.path == "communicator") communicator = o.value;
  }
  std::vector<config::Override> overrides = run.overrides;
  const bool switch_to_mpi = communicator == "local";
  if (switch_to_mpi) {
    overrides.insert(overrides.begin(), {"communicator", "mpi", "--elastic (communicator mpi)"});
  }
  const auto resolved = engine::resolve_experiment(file, "train", overrides, host);
  const engine::EngineSettings settings = engine::read_settings(resolved.config);
  if (communicator == "mpi_ps") {
    throw UserError(
        "--elastic restarts all-reduce jobs; communicator mpi_ps (a parameter server) cannot be "
        "restarted on fewer processes: use communicator mpi or nccl");
  }
  options.logdir = settings.logdir;
  options.iter_size = static_cast<int>(settings.iter_size);
  options.saves_checkpoints = settings.save_checkpoint_steps > 0 || settings.checkpoint_every_s > 0;
  const YAML::Node params = resolved.config.root["communicator_params"];
  options.deterministic = params && params["deterministic"] && params["deterministic"].as<bool>();
  options.continue_learning = run.continue_learning;

  // The job: this rig, `run`, and every argument that is not the supervisor's.
  options.job.push_back(launch::self_executable(argv[0]));
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (const int taken = supervisor_argument(arg); taken > 0) {
      i += taken - 1;
      continue;
    }
    options.job.push_back(arg);
  }
  if (switch_to_mpi) options.job.emplace_back("--communicator=mpi");
  return launch::elastic::supervise(options);
}

}  // namespace rig::cli
