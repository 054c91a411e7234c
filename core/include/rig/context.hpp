// What the engine tells each plugin when it creates it.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include <yaml-cpp/yaml.h>

#include "rig/parameter_store.hpp"
#include "rig/tensor.hpp"

namespace rig {

// The phase a plugin instance serves. `train_eval` runs build one set of
// train-mode and one set of eval-mode plugins (sharing the parameters).
enum class Mode { train, eval, infer };
std::string_view to_string(Mode mode);

struct RunContext {
  Mode mode = Mode::train;
  int rank = 0;
  int world_size = 1;
  std::uint64_t seed = 0;    // random_seed
  DType dtype = DType::f32;  // compute dtype
  Device device = Device::cpu();
  std::string logdir;
};

struct DataLayerContext {
  RunContext run;
  std::int64_t batch_size = 1;  // batch_size_per_gpu: this rank's share of a step
};

struct ModelContext {
  RunContext run;
  YAML::Node data_info;    // DataLayer::info(): shapes, class counts, vocabularies
  ParameterStore& params;  // declare parameters here, in the constructor
};

struct OptimizerContext {
  RunContext run;
  ParameterStore& params;  // allocated: values() and grads() are the flat buffers
};

struct LrPolicyContext {
  std::int64_t max_steps = 0;  // from max_steps, or num_epochs x steps_per_epoch
  // Steps in one epoch when the run was given num_epochs (OpenSeq2Seq's
  // auto-fill), else 0.
  std::int64_t steps_per_epoch = 0;
};

struct CommunicatorContext {
  std::string logdir;
};

}  // namespace rig
