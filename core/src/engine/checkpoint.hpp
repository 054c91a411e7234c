// Checkpoints: logdir/checkpoints/ckpt-<step>/ with model.safetensors,
// optimizer.safetensors and state.yaml, written atomically (temp dir, fsync, rename).
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>

#include <yaml-cpp/yaml.h>

#include "engine/safetensors.hpp"
#include "rig/optimizer.hpp"
#include "rig/parameter_store.hpp"

namespace rig::engine {

struct TrainingState {
  std::int64_t step = 0;     // optimizer steps done
  std::int64_t epoch = 0;    // current data epoch
  YAML::Node data_position;  // DataLayer::position()
  std::string config_hash;   // of the resolved train config
};

struct Checkpoint {
  std::filesystem::path dir;
  NamedTensors model;
  NamedTensors optimizer;
  TrainingState state;
};

// Writes a checkpoint for `state.step`; returns its folder.
std::filesystem::path save_checkpoint(const std::filesystem::path& logdir,
                                      const ParameterStore& params, const Optimizer* optimizer,
                                      const TrainingState& state, const std::string& config_yaml);

// The newest ckpt-<step> folder in logdir/checkpoints, if any.
std::optional<std::filesystem::path> latest_checkpoint(const std::filesystem::path& logdir);

// Reads a checkpoint folder; throws UserError naming the bad file.
Checkpoint load_checkpoint(const std::filesystem::path& dir);

// Copies the checkpoint's weights into `params`: every parameter and buffer
// must be present with the same shape.
void restore_parameters(const Checkpoint& checkpoint, ParameterStore& params);

}  // namespace rig::engine
