// The engine keys of a resolved config, typed.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "config/experiment_file.hpp"

namespace rig::engine {

struct EngineSettings {
  std::int64_t batch_size_per_gpu = 1;
  std::optional<std::int64_t> max_steps;
  std::optional<double> num_epochs;
  std::int64_t print_loss_steps = 100;
  std::int64_t eval_steps = 1000;
  std::int64_t save_checkpoint_steps = 0;  // 0: only at the end
  std::string logdir;
  std::uint64_t random_seed = 0;
  std::int64_t iter_size = 1;
  std::optional<double> max_grad_norm;
  std::optional<double> target_loss;
};

EngineSettings read_settings(const config::ResolvedConfig& config);

}  // namespace rig::engine
