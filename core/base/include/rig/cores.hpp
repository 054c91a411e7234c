// The cores this process may run on: its CPU affinity (an MPI launcher that
// binds each rank to its cores gives fewer than the machine has).
#pragma once

namespace rig {

int affinity_cores();

// The compute threads one process should use by default: its affinity's
// cores, shared with the other ranks a launcher started on this machine when
// none of them is bound (`srun` without --cpu-bind, `mpirun --bind-to none`:
// every rank sees every core, and one thread per core each made 2 ranks on 2
// cores ten times slower).
int default_compute_threads();

}  // namespace rig
