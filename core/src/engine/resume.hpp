// Where a run starts: a training run's resume point (--continue_learning, or
// a fresh start that refuses a logdir with checkpoints), the checkpoint eval
// and infer load (--checkpoint latest | best | a folder), and what may change
// between a run and its resumption.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>

#include "config/resolved_config.hpp"
#include "engine/checkpoint.hpp"
#include "rig/lr_policy.hpp"

namespace rig::engine {

// The resolved config without the schedule keys (max_steps, logdir, the
// intervals, device, ...): what a checkpoint must match to be resumed.
std::string identity_yaml(const config::ResolvedConfig& cfg);

// A training run's start: the checkpoint it resumes, if any, and its state.
struct ResumePoint {
  TrainingState state;
  std::optional<Checkpoint> checkpoint;
};

// --continue_learning: the latest checkpoint of logdir, refused when there is
// none or when its identity differs from `identity` (the differing keys
// listed). Without it, a logdir that already holds checkpoints is refused.
ResumePoint find_resume_point(const std::filesystem::path& logdir, bool continue_learning,
                              const std::string& identity);

// eval / infer: --checkpoint latest | best | a ckpt-<step> folder.
Checkpoint checkpoint_for_evaluation(const std::filesystem::path& logdir, const std::string& mode,
                                     const std::string& which);

// Resuming with another max_steps: one line when the lr policy's rates depend
// on it (compared at the resume step and across both schedules), else "".
std::string schedule_change_note(const LrPolicy& now, const LrPolicy& before,
                                 const std::string& policy, std::int64_t step,
                                 std::int64_t old_max_steps, std::int64_t new_max_steps);

}  // namespace rig::engine
