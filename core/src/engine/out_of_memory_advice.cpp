#include "engine/out_of_memory_advice.hpp"

#include <fmt/format.h>

namespace rig::engine {

namespace {

std::string training_advice(const EngineSettings& s, bool can_recompute) {
  const std::int64_t batch = s.batch_size_per_gpu;
  std::string text;
  if (batch > 1) {
    // Accumulating micro-batches keeps the global batch (batch norm's
    // statistics are the micro-batch's, though).
    text = fmt::format(
        "To fit, lower batch_size_per_gpu (now {}) and raise iter_size (now {}) to keep the "
        "global batch: batch_size_per_gpu {} with iter_size {} accumulates {} samples per "
        "process and update",
        batch, s.iter_size, (batch + 1) / 2, s.iter_size * 2, (batch + 1) / 2 * s.iter_size * 2);
  } else {
    text = fmt::format(
        "batch_size_per_gpu is 1 already: the model and its optimizer state do not fit {}",
        to_string(s.device));
  }
  if (s.compute_dtype == DType::f32 && !s.device.is_cpu()) {
    text +=
        "; or train in mixed precision (dtype: mixed, mixed_dtype: bfloat16), which "
        "halves the activations";
  }
  if (can_recompute) {
    text +=
        "; or keep fewer activations (model_params: recompute_activations: true, about a "
        "third more compute a step)";
  }
  return text + ".";
}

std::string batch_advice(const char* section, std::optional<std::int64_t> batch) {
  return fmt::format("To fit, lower batch_size_per_gpu in {}{}.", section,
                     batch ? fmt::format(" (now {})", *batch) : std::string());
}

}  // namespace

std::string out_of_memory_advice(const std::string& mode, const std::string& activity,
                                 const EngineSettings& settings,
                                 std::optional<std::int64_t> eval_batch, bool can_recompute) {
  if (activity == "the model's parameters") {
    return fmt::format("The model's parameters alone do not fit {}: choose a smaller model.",
                       to_string(settings.device));
  }
  if (activity == "the optimizer's state") {
    return fmt::format(
        "The model's parameters and its optimizer's state do not fit {}: choose a smaller model "
        "or an optimizer that keeps less state (sgd with momentum keeps one buffer the size of "
        "the parameters, adam two).",
        to_string(settings.device));
  }
  if (activity == "the data layer's start") {
    return fmt::format(
        "To fit, lower batch_size_per_gpu (now {}) or what data_layer_params hold in memory.",
        settings.batch_size_per_gpu);
  }
  if (mode == "train" || mode == "train_eval") {
    if (activity == "evaluation") return batch_advice("eval_params", eval_batch);
    return training_advice(settings, can_recompute);
  }
  if (mode == "eval") return batch_advice("eval_params", settings.batch_size_per_gpu);
  return batch_advice("infer_params", settings.batch_size_per_gpu);
}

}  // namespace rig::engine
