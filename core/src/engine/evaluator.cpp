#include "engine/evaluator.hpp"

#include <chrono>
#include <vector>

#include "rig/error.hpp"

namespace rig::engine {

EvalResult evaluate(Model& model, DataLayer& data, Communicator& comm) {
  const auto start = std::chrono::steady_clock::now();
  NoGradGuard no_grad;
  EvalResult result;
  data.start_epoch(0);
  while (auto batch = data.next_batch()) {
    ModelOutput out = model.forward(*batch, Mode::eval);
    if (out.metrics.find("loss") == out.metrics.end()) {
      // A model that reports no loss metric: weight its batch loss by batch size.
      const auto n = static_cast<double>(batch->indices.empty() ? 1 : batch->indices.size());
      out.metrics["loss"] = Metric{static_cast<double>(out.loss.item()) * n, n};
    }
    for (const auto& [name, metric] : out.metrics) {
      result.metrics[name].sum += metric.sum;
      result.metrics[name].count += metric.count;
    }
    ++result.batches;
  }
  if (comm.size() > 1) {
    // Every rank must agree on the metric names for the reduction to line up.
    std::vector<float> values;
    for (const auto& [name, metric] : result.metrics) {
      values.push_back(static_cast<float>(metric.sum));
      values.push_back(static_cast<float>(metric.count));
    }
    Tensor buffer = Tensor::from_vector(values, {static_cast<std::int64_t>(values.size())});
    comm.allreduce(buffer, ReduceOp::sum)->wait();
    const float* reduced = buffer.data<float>();
    std::size_t i = 0;
    for (auto& [name, metric] : result.metrics) {
      metric.sum = reduced[i++];
      metric.count = reduced[i++];
    }
  }
  if (result.metrics["loss"].count == 0.0) {
    throw UserError("the evaluation data layer produced no samples");
  }
  result.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return result;
}

void print_eval(const Console& console, const EvalResult& result, std::int64_t step) {
  console.print("*** Running evaluation on a validation set (step {}):", step);
  console.print("*** Validation loss: {:.4f}", result.metrics.at("loss").value());
  for (const auto& [name, metric] : result.metrics) {
    if (name == "loss") continue;
    console.print("*** Validation {}: {:.4f}", name, metric.value());
  }
  console.print("*** Evaluated {:.0f} samples in {:.2f}s", result.metrics.at("loss").count,
                result.seconds);
}

}  // namespace rig::engine
