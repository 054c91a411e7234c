// What a launcher (mpirun / mpiexec, Hydra, srun) tells its processes through
// the environment, read before any communicator exists: the run checks that a
// multi-process launch has a communicator, and a GPU is picked per local rank.
#pragma once

namespace rig::launch {

// The number of processes the launcher started (Open MPI, PMI, Slurm); 1 when
// not started by one.
int launcher_world_size();

// Whether a launcher (mpirun / mpiexec, Hydra, srun) started this process,
// even as the only one.
bool started_by_launcher();

// This process's rank among those on its host (Open MPI, MPICH / Hydra,
// Slurm); 0 when not started by one.
int launcher_local_rank();

}  // namespace rig::launch
