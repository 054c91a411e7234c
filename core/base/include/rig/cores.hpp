// The cores this process may run on: its CPU affinity (an MPI launcher that
// binds each rank to its cores gives fewer than the machine has).
#pragma once

namespace rig {

int affinity_cores();

}  // namespace rig
