#include "engine/settings.hpp"

#include <array>
#include <string_view>

#include <fmt/format.h>

#include "rig/error.hpp"

namespace rig::engine {
namespace {

template <class T>
std::optional<T> optional_key(const YAML::Node& root, const char* key) {
  YAML::Node node = root[key];
  if (!node || node.IsNull()) return std::nullopt;
  return node.as<T>();
}

// A copy of root[key], or a null node when the key is absent (assigning the
// invalid node yaml-cpp returns for a missing key would throw).
YAML::Node node_or_null(const YAML::Node& root, const char* key) {
  const YAML::Node node = root[key];
  return node ? YAML::Clone(node) : YAML::Node(YAML::NodeType::Null);
}

// best_model_mode auto: lower is better for loss-like metric names.
std::string resolve_best_mode(const std::string& mode, const std::string& metric) {
  if (mode != "auto") return mode;
  constexpr std::array<std::string_view, 5> kLowerIsBetter = {"loss", "error", "perplexity", "wer",
                                                              "cer"};
  for (auto word : kLowerIsBetter) {
    if (metric.find(word) != std::string::npos) return "min";
  }
  return "max";
}

DType compute_dtype_of(const std::string& dtype, const std::string& mixed_dtype) {
  if (dtype == "float16") return DType::f16;
  if (dtype == "bfloat16") return DType::bf16;
  if (dtype == "mixed") return mixed_dtype == "bfloat16" ? DType::bf16 : DType::f16;
  return DType::f32;
}

}  // namespace

EngineSettings read_settings(const config::ResolvedConfig& config) {
  const YAML::Node& root = config.root;
  EngineSettings s;
  s.batch_size_per_gpu = root["batch_size_per_gpu"].as<std::int64_t>();
  s.max_steps = optional_key<std::int64_t>(root, "max_steps");
  s.num_epochs = optional_key<double>(root, "num_epochs");
  s.print_loss_steps = root["print_loss_steps"].as<std::int64_t>();
  s.print_samples_steps = optional_key<std::int64_t>(root, "print_samples_steps");
  s.eval_steps = root["eval_steps"].as<std::int64_t>();
  s.save_checkpoint_steps = root["save_checkpoint_steps"].as<std::int64_t>();
  s.checkpoint_every_s = root["checkpoint_every_s"].as<double>();
  s.save_summaries_steps = root["save_summaries_steps"].as<std::int64_t>();
  s.num_checkpoints = root["num_checkpoints"].as<int>();
  s.best_model_metric = root["best_model_metric"].as<std::string>();
  s.best_model_mode =
      resolve_best_mode(root["best_model_mode"].as<std::string>(), s.best_model_metric);
  s.num_best_models = root["num_best_models"].as<int>();
  s.load_model = optional_key<std::string>(root, "load_model");
  s.eval_bleu = root["eval_bleu"].as<bool>();
  s.eval_bleu_samples = root["eval_bleu_samples"].as<int>();
  s.logdir = root["logdir"].as<std::string>();
  s.random_seed = root["random_seed"].as<std::uint64_t>();
  s.iter_size = root["iter_size"].as<std::int64_t>();
  s.bucket_cap_mb = root["bucket_cap_mb"].as<double>();
  s.fp16_gradient_compression = root["gradient_compression"].as<std::string>() == "fp16";
  s.max_grad_norm = optional_key<double>(root, "max_grad_norm");
  s.target_loss = optional_key<double>(root, "target_loss");
  s.device_request = root["device"].as<std::string>();
  s.dtype = root["dtype"].as<std::string>();
  s.compute_dtype = compute_dtype_of(s.dtype, root["mixed_dtype"].as<std::string>());
  s.round_masters = s.dtype == "float16" || s.dtype == "bfloat16";
  const std::string precision = root["matmul_precision"].as<std::string>();
  s.bf16_matmuls = precision == "bfloat16" || s.compute_dtype == DType::bf16;
  s.tf32_matmuls = precision == "tensorfloat32" && !s.bf16_matmuls;
  s.cudnn_benchmark = root["cudnn_benchmark"].as<bool>();
  s.loss_scaling = node_or_null(root, "loss_scaling");
  s.loss_scaling_params = node_or_null(root, "loss_scaling_params");
  s.larc_params = node_or_null(root, "larc_params");
  if (const YAML::Node comm = root["communicator_params"]; comm && comm["deterministic"]) {
    s.deterministic_reduction = comm["deterministic"].as<bool>();
  }

  if (s.print_samples_steps && *s.print_samples_steps % s.print_loss_steps != 0) {
    const auto where = config.where("print_samples_steps");
    throw UserError(fmt::format(
        "{}: {}: {} is not a multiple of print_loss_steps ({}); samples are printed with the "
        "loss lines",
        where.describe(), where.key_path.empty() ? "print_samples_steps" : where.key_path,
        *s.print_samples_steps, s.print_loss_steps));
  }
  if (s.max_grad_norm && s.larc_params && !s.larc_params.IsNull()) {
    // OpenSeq2Seq refuses the pair too: LARC already bounds each layer's update.
    const auto where = config.where("larc_params");
    throw UserError(fmt::format(
        "{}: larc_params and max_grad_norm are both set: use one of them (LARC already bounds "
        "each layer's update, as in OpenSeq2Seq, which refuses the pair too)",
        where.describe()));
  }
  if (s.deterministic_reduction && (s.compute_dtype != DType::f32 || s.fp16_gradient_compression)) {
    const auto where = config.where("communicator_params.deterministic");
    throw UserError(fmt::format(
        "{}: communicator_params/deterministic sums float32 gradients in one canonical order; "
        "it cannot with {}: use dtype float32 without gradient_compression, or drop it",
        where.describe(),
        s.fp16_gradient_compression ? "gradient_compression: fp16" : "dtype " + s.dtype));
  }
  return s;
}

}  // namespace rig::engine
