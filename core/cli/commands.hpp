// The `rig` subcommands other than `run` (which lives in engine/run).
#pragma once

#include <string>
#include <vector>

#include "config/overrides.hpp"
#include "launch/elastic/supervisor.hpp"
#include "rig/bleu.hpp"

namespace rig::cli {

// Prints the fully resolved config of one mode (plugin defaults included).
int print_config(const std::string& experiment, const std::string& mode,
                 const std::vector<config::Override>& overrides,
                 const std::vector<std::string>& plugin_paths);
// Lists kind, name, version, summary and path of every plugin on the search path.
int list_plugins(const std::vector<std::string>& plugin_paths);
// Prints the schema of "experiment" or of a plugin given as KIND/NAME.
int print_schema(const std::string& what, const std::vector<std::string>& plugin_paths);
// `rig run --nproc N [--servers S]`: replaces this process by mpirun starting
// N (+ S) copies of the same command (without --nproc and --servers, with
// --communicator=mpi, or mpi_ps with S servers); returns only by throwing when
// mpirun cannot be started (launch_local.cpp).
[[noreturn]] int launch_local_processes(int nproc, int servers, int argc, char** argv);
// What `rig run --elastic` needs of the run's own options.
struct ElasticRun {
  std::string experiment;
  std::string mode = "train";
  bool continue_learning = false;
  bool benchmark = false;
  int servers = 0;
  std::vector<config::Override> overrides;
  std::vector<std::string> plugin_paths;
};
// `rig run --elastic`: supervises the job through mpirun, restarting it on
// failure (launch_elastic.cpp; the supervisor is launch/elastic).
int launch_elastic(launch::elastic::ElasticOptions options, const ElasticRun& run, int argc,
                   char** argv);
// Prints corpus BLEU (sacrebleu's score line) and its signature; hypotheses
// come from standard input when hypothesis_file is empty (bleu_command.cpp).
int bleu(const std::string& reference_file, const std::string& hypothesis_file,
         const bleu::Options& options);

}  // namespace rig::cli
