// LARC (layer-wise adaptive rate control) as OpenSeq2Seq's larc_params:
// each parameter's gradient is multiplied by a trust ratio computed from the
// norms of that parameter and its gradient.
#pragma once

#include <string>

#include <yaml-cpp/yaml.h>

#include "rig/parameter_store.hpp"

namespace rig::engine {

struct LarcSettings {
  double eta = 0.0;           // larc_eta (required)
  std::string mode = "clip";  // larc_mode: clip | scale
  double min_update = 1e-7;   // min_update
  double epsilon = 1e-7;      // epsilon
};

LarcSettings read_larc_settings(const YAML::Node& larc_params);

// Rescales params.grads() parameter by parameter (f32 master buffers), before
// the optimizer step at `learning_rate`.
void apply_larc(ParameterStore& params, const LarcSettings& settings, double learning_rate);

}  // namespace rig::engine
