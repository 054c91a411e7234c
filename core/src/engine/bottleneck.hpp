// Answers "was it the network, the data or the compute?" from the per-step
// averages the trainer measured. The training thread waits either for data,
// for the gradient reduction after backward, or for nothing (it computes);
// whichever wait takes more than kWaitShare of the step is the bottleneck.
#pragma once

#include <string>

namespace rig::engine {

// Averages per step, in seconds (bytes per rank).
struct StepCosts {
  double step = 0.0;
  double data = 0.0;           // waiting for the data layer
  double communication = 0.0;  // after backward: waiting for the reduction to finish
  double comm_busy = 0.0;      // the communicator was reducing this step's gradients
  double comm_bytes = 0.0;
  int world_size = 1;
  // Parameter-server workers: the wait is the push and the pull of the new
  // weights, comm_bytes both ways; no bus bandwidth or overlap applies.
  bool parameter_server = false;
};

inline constexpr double kWaitShare = 0.2;
// Below this many bytes per step a network wait is latency, not bandwidth.
inline constexpr double kLatencyBytes = 256.0 * 1024.0;

// "compute", "data" or "network".
std::string bottleneck_of(const StepCosts& costs);

// The bus bandwidth of the reduction in bytes/s: algbw x 2(n-1)/n (NCCL's
// convention, so the number compares across world sizes); 0 when unknown.
double bus_bandwidth(const StepCosts& costs);

// Of the communicator's busy time, the share not waited for after backward.
double hidden_fraction(const StepCosts& costs);

// One paragraph with the numbers, for the end of training and `rig report`.
std::string describe_bottleneck(const StepCosts& costs);

}  // namespace rig::engine
