// The parts of an mpirun command line that `rig run --nproc` and the
// `--elastic` supervisor share.
#pragma once

#include <string>
#include <vector>

namespace rig::launch {

// mpirun -n N, with --allow-run-as-root for root (who asked for it by
// launching through rig).
std::vector<std::string> mpirun_start(int processes);
// N ranks on this machine: one per core, each bound to it, when they fit;
// otherwise unbound (each rank then takes its share of the cores as compute
// threads, rig::default_compute_threads).
std::vector<std::string> local_binding(int processes);
// This program's path, for the ranks to run (in mpirun's children
// /proc/self/exe would be mpirun itself); argv0 when it cannot be read.
std::string self_executable(const char* argv0);

}  // namespace rig::launch
