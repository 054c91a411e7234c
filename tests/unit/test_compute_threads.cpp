// The default number of compute threads: the process's cores, shared with
// the other unbound ranks a launcher put on this machine.
#include <sched.h>
#include <unistd.h>

#include <cstdlib>

#include <gtest/gtest.h>

#include "rig/cores.hpp"

namespace {

// Sets an environment variable for the scope.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) { setenv(name, value, 1); }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;
  ~ScopedEnv() { unsetenv(name_); }

 private:
  const char* name_;
};

bool unbound() {
  return rig::affinity_cores() >= sysconf(_SC_NPROCESSORS_ONLN);
}

}  // namespace

TEST(ComputeThreads, AloneTakesEveryCoreItMayUse) {
  EXPECT_EQ(rig::default_compute_threads(), rig::affinity_cores());
}

TEST(ComputeThreads, UnboundRanksShareTheMachine) {
  const int cores = rig::affinity_cores();
  {
    const ScopedEnv env("OMPI_COMM_WORLD_LOCAL_SIZE", "2");
    EXPECT_EQ(rig::default_compute_threads(), unbound() ? std::max(1, cores / 2) : cores);
  }
  {
    const ScopedEnv env("SLURM_STEP_TASKS_PER_NODE", "64(x2)");
    EXPECT_EQ(rig::default_compute_threads(), unbound() ? 1 : cores);
  }
}

TEST(ComputeThreads, ABoundRankKeepsItsCores) {
  // Bind this thread to one core: its affinity is its share.
  cpu_set_t saved;
  CPU_ZERO(&saved);
  ASSERT_EQ(sched_getaffinity(0, sizeof(saved), &saved), 0);
  int first = 0;
  while (first < CPU_SETSIZE && !CPU_ISSET(first, &saved)) ++first;
  cpu_set_t one;
  CPU_ZERO(&one);
  CPU_SET(first, &one);
  ASSERT_EQ(sched_setaffinity(0, sizeof(one), &one), 0);
  const ScopedEnv env("OMPI_COMM_WORLD_LOCAL_SIZE", "2");
  EXPECT_EQ(rig::default_compute_threads(), 1);
  sched_setaffinity(0, sizeof(saved), &saved);
}
