// `rig validate`: checks an experiment in every mode without running it. Each
// mode's config is resolved and its plugins are built exactly as `rig run`
// builds them (run_parts.hpp): the data layer (which opens its files and
// vocabularies but reads no batch), the model (parameters allocated), and in
// train mode the optimizer and the lr policy; so every check a plugin makes in
// its constructor runs too. No communicator is started, no checkpoint read,
// no device probed and no step taken. skip_data (for a machine without the
// data: a laptop before the job moves to the cluster) builds only what needs
// no data layer: the lr policy, when max_steps is set.
#pragma once

#include <cstdio>
#include <string>
#include <vector>

#include "config/overrides.hpp"

namespace rig::engine {

struct ValidateOptions {
  std::string experiment;
  std::vector<config::Override> overrides;
  std::vector<std::string> plugin_paths;
  bool skip_data = false;
};

// Prints one OK line per mode to `out`; bad input throws UserError naming the mode.
int validate(const ValidateOptions& options, std::FILE* out);

}  // namespace rig::engine
