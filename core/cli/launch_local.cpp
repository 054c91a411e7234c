// `rig run --nproc N EXP`: N processes on this machine through mpirun, with
// the communicator switched to mpi (`--servers S`: N workers and S parameter
// servers, communicator mpi_ps). One process per core, each bound to its
// core; with more processes than cores, unbound, one compute thread each.
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "commands.hpp"
#include "launch/mpirun_command.hpp"
#include "rig/error.hpp"

namespace rig::cli {
namespace {

// --nproc N / --nproc=N, --servers S / --servers=S: handled here, not passed on.
// Returns how many arguments the flag takes up (0: not one of them).
int launcher_flag(const std::string& arg) {
  for (const std::string flag : {"--nproc", "--servers"}) {
    if (arg == flag) return 2;
    if (arg.starts_with(flag + "=")) return 1;
  }
  return 0;
}

}  // namespace

int launch_local_processes(int nproc, int servers, int argc, char** argv) {
  const int processes = nproc + servers;
  std::vector<std::string> args = launch::mpirun_start(processes);
  const std::vector<std::string> binding = launch::local_binding(processes);
  args.insert(args.end(), {"--map-by", "core"});
  args.insert(args.end(), binding.begin(), binding.end());
  args.push_back(launch::self_executable(argv[0]));
  bool progress_given = false;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (const int taken = launcher_flag(arg); taken > 0) {
      i += taken - 1;  // and its value
      continue;
    }
    progress_given = progress_given || arg == "--progress" || arg.starts_with("--progress=");
    args.push_back(arg);
  }
  if (servers > 0) {
    args.emplace_back("--communicator=mpi_ps");
    args.emplace_back(fmt::format("--communicator_params/servers={}", servers));
  } else {
    args.emplace_back("--communicator=mpi");
  }
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
