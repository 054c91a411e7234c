// Faults the recovery tests inject into a real job, named in RIG_TEST_FAULT
// (comma-separated; unset in normal runs, where every check is one branch):
//   crash_at_step=S        the process SIGKILLs itself when it reaches step S
//   crash_rank=R           ... only on rank R (default: every rank)
//   kill_in_checkpoint=S   it SIGKILLs itself while writing checkpoint S,
//                          after the model file and before state.yaml
//   once=FILE              a fault fires only while FILE does not exist, and
//                          creates it first (so that a restarted job runs on)
//   step_sleep_ms=M        every step ends with an M ms sleep: a tiny model's
//                          job lasts long enough for a signal to arrive
//                          mid-training however loaded the machine is
#pragma once

#include <cstdint>

namespace rig::launch {

// At the end of step `step` on rank `rank`.
void test_fault_after_step(std::int64_t step, int rank);
// Inside the checkpoint writer, with the folder half written.
void test_fault_in_checkpoint_write(std::int64_t step);

}  // namespace rig::launch
