// `rig run --nproc N EXP`: N processes on this machine through mpirun, with
// the communicator switched to mpi. One process per core, each bound to its
// core; with more processes than cores, unbound, one compute thread each.
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "commands.hpp"
#include "rig/cores.hpp"
#include "rig/error.hpp"

namespace rig::cli {
namespace {

bool is_nproc_flag(const std::string& arg) {
  return arg == "--nproc" || arg.starts_with("--nproc=");
}

}  // namespace

int launch_local_processes(int nproc, int argc, char** argv) {
  std::vector<std::string> args = {"mpirun", "-n", std::to_string(nproc)};
  // mpirun refuses root unless told; whoever typed --nproc as root asked for it.
  if (geteuid() == 0) args.emplace_back("--allow-run-as-root");
  if (nproc <= rig::affinity_cores()) {
    args.insert(args.end(), {"--map-by", "core", "--bind-to", "core"});
  } else {
    args.insert(args.end(), {"--oversubscribe", "--bind-to", "none", "-x", "RIG_NUM_THREADS=1"});
  }
  // Resolved now: in mpirun's children /proc/self/exe would be mpirun itself.
  std::error_code error;
  const auto self = std::filesystem::read_symlink("/proc/self/exe", error);
  args.push_back(error ? std::string(argv[0]) : self.string());
  bool progress_given = false;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (is_nproc_flag(arg)) {
      if (arg == "--nproc") ++i;  // and its value
      continue;
    }
    progress_given = progress_given || arg == "--progress" || arg.starts_with("--progress=");
    args.push_back(arg);
  }
  args.emplace_back("--communicator=mpi");
  // The ranks cannot tell where mpirun's output goes, but this process can:
  // rank 0 draws the bar when the user's terminal is its destination.
  if (!progress_given && std::getenv("RIG_PROGRESS") == nullptr && isatty(fileno(stdout)) == 1) {
    args.emplace_back("--progress=on");
  }
  std::vector<char*> c_args;
  for (auto& a : args) c_args.push_back(a.data());
  c_args.push_back(nullptr);
  std::fflush(stdout);
  execvp("mpirun", c_args.data());
  throw UserError(fmt::format(
      "--nproc {} starts its processes with mpirun, which could not be run ({}); install Open "
      "MPI (apt install openmpi-bin) or start rig with your MPI launcher yourself",
      nproc, std::strerror(errno)));
}

}  // namespace rig::cli
