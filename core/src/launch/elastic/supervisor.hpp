// `rig run --elastic`: a supervisor with no MPI of its own. It starts the job
// through mpirun, relays its output, and when the job fails it reads which
// rank or host failed, leaves that slot or host out (with a back-off before
// trying it again), picks N' processes x iter_size k' with N' x k' = N x k so
// that the global batch stays the same, and relaunches from the newest
// complete checkpoint, up to max_restarts times. SIGTERM or SIGINT to it asks
// the job (SIGUSR1, which mpirun forwards to every rank) to checkpoint and
// stop. What happened goes to the log, LOGDIR/elastic.yaml and metrics.jsonl.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

namespace rig::launch::elastic {

struct ElasticOptions {
  // Where: exactly one of these, or none for this machine with one slot per core.
  std::string hosts;      // --hosts a:2,b:2
  std::string hostfile;   // --hostfile FILE
  std::string discovery;  // --host-discovery CMD (run before every attempt)
  int nproc = 0;          // the first attempt's processes (0: every slot, up to max_nproc)
  int min_nproc = 1;
  int max_nproc = 0;  // 0: the first attempt's
  int max_restarts = 3;
  double backoff_s = 300.0;          // a failed host or slot is left out this long, doubling
  double teardown_timeout_s = 60.0;  // after the first sign of failure, then mpirun is ended

  // From the experiment.
  std::filesystem::path logdir;
  int iter_size = 1;
  bool saves_checkpoints = true;
  bool deterministic = false;
  bool continue_learning = false;  // the user's --continue_learning, for the first attempt

  // The job: rig's path, then `run EXP ...` without the supervisor's flags,
  // --iter_size or --continue_learning (the supervisor adds them).
  std::vector<std::string> job;
};

// Runs the job to its end; the exit code for `rig` (0 finished, 2 bad input,
// 1 gave up, 128 + signal stopped by a signal).
int supervise(const ElasticOptions& options);

}  // namespace rig::launch::elastic
