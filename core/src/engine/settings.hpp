// The engine keys of a resolved config, typed.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include <yaml-cpp/yaml.h>

#include "config/experiment_file.hpp"
#include "rig/tensor.hpp"

namespace rig::engine {

struct EngineSettings {
  std::int64_t batch_size_per_gpu = 1;
  std::optional<std::int64_t> max_steps;
  std::optional<double> num_epochs;
  std::int64_t print_loss_steps = 100;
  std::optional<std::int64_t> print_samples_steps;
  std::int64_t eval_steps = 1000;
  std::int64_t save_checkpoint_steps = 0;  // 0: only at the end
  double checkpoint_every_s = 0.0;         // also by wall time; 0: off
  // communicator_params/deterministic: the canonical-order gradient sum
  // (deterministic_reduction.hpp).
  bool deterministic_reduction = false;
  std::int64_t save_summaries_steps = 100;  // 0: none
  int num_checkpoints = 5;                  // 0: keep all
  std::string best_model_metric = "loss";
  std::string best_model_mode = "min";  // "auto" resolved to min / max
  int num_best_models = 1;
  std::optional<std::string> load_model;
  bool eval_bleu = true;      // decode and score BLEU in eval (text2text data only)
  int eval_bleu_samples = 3;  // decoded samples printed per evaluation
  std::string logdir;
  std::uint64_t random_seed = 0;
  std::int64_t iter_size = 1;
  double bucket_cap_mb = 25.0;             // several processes: gradient bucket size
  bool fp16_gradient_compression = false;  // gradient_compression: fp16
  std::optional<double> max_grad_norm;
  std::optional<double> target_loss;
  std::string device_request = "auto";  // device: auto | cpu | cuda
  Device device = Device::cpu();        // what the run uses (engine/device_choice.hpp)
  std::string dtype = "float32";        // float32 | float16 | bfloat16 | mixed
  DType compute_dtype = DType::f32;
  bool round_masters = false;      // float16 / bfloat16: weights stay representable in that type
  bool bf16_matmuls = false;       // matmul_precision bfloat16, or a bfloat16 compute dtype
  bool tf32_matmuls = false;       // matmul_precision tensorfloat32 (and not bf16_matmuls)
  bool cudnn_benchmark = false;    // time cuDNN's convolution engines (cudnn.benchmark)
  YAML::Node loss_scaling;         // null, a number, Backoff or LogMax
  YAML::Node loss_scaling_params;  // may be null
  YAML::Node larc_params;          // null when LARC is off
};

// Reads the engine keys and checks the rules the schema cannot express
// (print_samples_steps a multiple of print_loss_steps).
EngineSettings read_settings(const config::ResolvedConfig& config);

}  // namespace rig::engine
