// The scalar tags the engine writes (engine::SummaryWriter) that the report
// knows how to show; any other tag gets a chart of its own.
#pragma once

#include <algorithm>
#include <array>
#include <cctype>
#include <string>
#include <string_view>
#include <vector>

#include "report/metrics_file.hpp"

namespace rig::report::tags {

inline constexpr std::string_view kTrainLoss = "train_loss";
inline constexpr std::string_view kEvalLoss = "eval_loss";
inline constexpr std::string_view kEvalPrefix = "eval_";
inline constexpr std::string_view kLearningRate = "learning_rate";
inline constexpr std::string_view kGradientNorm = "global_gradient_norm";
inline constexpr std::string_view kLossScale = "loss_scale";
inline constexpr std::string_view kThroughput = "objects_per_second";
inline constexpr std::string_view kStepTime = "time/step";
// The parts of a step, stacked bottom-up in this order.
inline constexpr std::array<std::string_view, 5> kStepTimeParts = {
    "time/data", "time/forward", "time/backward", "time/communication", "time/optimizer"};

// eval_<metric> tags other than eval_loss, in name order.
inline std::vector<std::string> eval_metrics(const Metrics& metrics) {
  std::vector<std::string> out;
  for (const auto& [tag, series] : metrics.series) {
    if (tag.starts_with(kEvalPrefix) && tag != kEvalLoss) out.push_back(tag);
  }
  return out;
}

// Losses and error rates improve downwards; accuracy, BLEU and the like upwards.
inline bool lower_is_better(std::string_view tag) {
  std::string lower(tag);
  std::transform(lower.begin(), lower.end(), lower.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  for (std::string_view word : {"loss", "wer", "cer", "error", "perplexity", "ppl"}) {
    if (lower.find(word) != std::string::npos) return true;
  }
  return false;
}

}  // namespace rig::report::tags
