// `rig run`: builds the plugins an experiment names and runs a mode.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "config/overrides.hpp"
#include "rig/error.hpp"

namespace rig::engine {

struct RunOptions {
  std::string experiment;
  std::string mode = "train";  // train | eval | train_eval | infer | interactive_infer
  std::vector<config::Override> overrides;
  std::vector<std::string> plugin_paths;
  bool continue_learning = false;
  bool benchmark = false;
  std::int64_t bench_steps = 20;
  // --bench_warmup_steps: the first steps of --benchmark run untimed (1
  // unless given; a run of one step times it).
  std::optional<std::int64_t> bench_warmup_steps;
  std::string infer_output_file;     // default: <logdir>/infer_output.txt
  std::string timeline_file;         // --timeline: Chrome-trace JSON of each step's phases
  std::string load_from = "latest";  // eval / infer: latest | best | a ckpt-<step> folder
  std::string command_line;          // as typed, saved in the logdir
  std::string progress = "auto";     // the progress bar: auto | on | off
};

// Bad input that every process of a host meets alike (the experiment file,
// the command line, the resolved config): under a launcher only local rank 0
// reports it, so a bad override prints one line, not one per rank.
class ConfigError : public UserError {
 public:
  using UserError::UserError;
};

// Returns the process exit code (0, or 1 when target_loss was missed).
// Bad input throws UserError, failures while running RunError.
int run(const RunOptions& options);

}  // namespace rig::engine
