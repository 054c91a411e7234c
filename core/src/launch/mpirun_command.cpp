#include "launch/mpirun_command.hpp"

#include <unistd.h>

#include <filesystem>

#include "rig/cores.hpp"

namespace rig::launch {

std::vector<std::string> mpirun_start(int processes) {
  std::vector<std::string> args = {"mpirun", "-n", std::to_string(processes)};
  if (geteuid() == 0) args.emplace_back("--allow-run-as-root");
  return args;
}

std::vector<std::string> local_binding(int processes) {
  if (processes <= rig::affinity_cores()) return {"--bind-to", "core"};
  return {"--oversubscribe", "--bind-to", "none"};
}

std::string self_executable(const char* argv0) {
  std::error_code error;
  const auto self = std::filesystem::read_symlink("/proc/self/exe", error);
  return error ? std::string(argv0) : self.string();
}

}  // namespace rig::launch
