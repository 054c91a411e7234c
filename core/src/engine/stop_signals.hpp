// SIGINT / SIGTERM / SIGUSR1 during training: the first asks the trainer to
// finish the current step, write a checkpoint and exit with 128 + signal
// (130 / 143 / 138); a second one exits at once. SIGUSR1 is the one mpirun
// forwards to every rank (`rig run --elastic` sends it on SIGTERM).
#pragma once

namespace rig::engine {

class StopSignals {
 public:
  StopSignals();  // installs the handlers
  StopSignals(const StopSignals&) = delete;
  StopSignals& operator=(const StopSignals&) = delete;
  ~StopSignals();  // restores the previous handlers

  // The signal that asked to stop, or 0.
  static int received();
};

}  // namespace rig::engine
