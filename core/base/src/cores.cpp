#include "rig/cores.hpp"

#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <thread>

namespace rig {
namespace {

// Ranks a launcher started on this machine: Open MPI's and MPICH's local
// size, or Slurm's tasks on this node ("2" or "2(x3)"); 1 when unknown.
int local_ranks() {
  for (const char* name : {"OMPI_COMM_WORLD_LOCAL_SIZE", "MPI_LOCALNRANKS"}) {
    if (const char* value = std::getenv(name)) {
      const int n = std::atoi(value);
      if (n > 0) return n;
    }
  }
  if (const char* tasks = std::getenv("SLURM_STEP_TASKS_PER_NODE")) {
    // Nodes may differ ("3,2(x2)"); the first is as good a guess as any.
    const int n = std::atoi(tasks);
    if (n > 0) return n;
  }
  return 1;
}

int online_cores() {
  const long n = sysconf(_SC_NPROCESSORS_ONLN);
  return n > 0 ? static_cast<int>(n)
               : static_cast<int>(std::max(1U, std::thread::hardware_concurrency()));
}

}  // namespace

int affinity_cores() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) == 0 && CPU_COUNT(&set) > 0) return CPU_COUNT(&set);
  return std::max(1U, std::thread::hardware_concurrency());
}

int default_compute_threads() {
  const int cores = affinity_cores();
  const int ranks = local_ranks();
  // A bound rank's affinity is already its share of the machine.
  if (ranks > 1 && cores >= online_cores()) return std::max(1, cores / ranks);
  return cores;
}

}  // namespace rig
