// Model plugin interface.
#pragma once

#include <map>
#include <string>

#include "rig/batch.hpp"
#include "rig/context.hpp"
#include "rig/export.hpp"
#include "rig/tensor.hpp"

namespace rig {

// A metric that averages correctly over batches and ranks: value = sum / count.
struct Metric {
  double sum = 0.0;
  double count = 0.0;
  double value() const { return count > 0.0 ? sum / count : 0.0; }
};
using Metrics = std::map<std::string, Metric>;

struct ModelOutput {
  Tensor loss;      // scalar; in train mode, recorded on the autograd tape
  Metrics metrics;  // eval metrics for this batch (e.g. "accuracy"), summed by the engine
  // Eval, optional, for sequence-to-sequence models: the most probable token
  // at each position given the reference prefix (teacher forcing), in
  // infer()'s format (i64 [B, L], each row ending at its first EOS). When the
  // engine scores BLEU, it decodes these like infer()'s output and reports
  // their BLEU as the metric "teacher_forced_bleu": not a translation score,
  // since every position saw the reference before it. (The "{}" keeps
  // `return {loss, metrics};` free of -Wmissing-field-initializers.)
  Tensor teacher_forced_predictions{};
};

// Constructed as Model(const YAML::Node& params, const ModelContext& ctx); the
// constructor declares its parameters in ctx.params.
class RIG_API Model {
 public:
  virtual ~Model() = default;
  // Forward pass to the loss. mode is train or eval.
  virtual ModelOutput forward(const Batch& batch, Mode mode) = 0;
  // Predictions for infer mode; the data layer turns them into output lines.
  virtual Tensor infer(const Batch& batch) = 0;
};

}  // namespace rig
