// A fake NCCL and a fake CUDA driver with the real ones' interface
// (nccl_api.hpp), for testing the `nccl` communicator without a GPU
// (RIG_NCCL_FAKE=1, valid only where device memory is host memory: the CUDA
// back end's emulator, RIG_CUDA_EMULATOR=1).
//
// What it keeps faithful: a stream the plugin creates is a queue that a
// thread of its own runs in order (event records, waits on events, and
// collectives, which run as MPI's blocking collectives on host memory over a
// communicator of their own, rig_mpi::run_blocking); any other stream (the
// emulated back end's, which runs its kernels as they are launched) is
// synchronous: recording an event on it completes it at once, waiting on it
// blocks the caller. The unique id is random and must be the same on every
// rank (ncclCommInitRankConfig fails with ncclInvalidUsage otherwise); a
// non-blocking communicator (blocking = 0) reports ncclInProgress from its
// initialisation until ncclCommGetAsyncError is first asked. Errors are
// sticky async errors; ncclCommAbort marks the communicator aborted.
//
// Test hooks (environment):
//   RIG_NCCL_FAKE_HANG_RANK=r [RIG_NCCL_FAKE_HANG_AT=n]: rank r never joins
//     its n-th collective (default 1): the call that issues it never returns,
//     as a rank stuck before it would.
//   RIG_NCCL_FAKE_FAIL_RANK=r [RIG_NCCL_FAKE_FAIL_AT=n]: rank r's n-th
//     collective fails on its stream with ncclRemoteError (a peer lost).
#pragma once

#include "nccl_api.hpp"

namespace rig_nccl {

const NcclApi& fake_nccl();
const DriverApi& fake_driver();

// Collectives the fake has completed on this process's streams (for tests).
long fake_collectives_run();

}  // namespace rig_nccl
