// piecewise_constant: OpenSeq2Seq's piecewise_constant
// (open_seq2seq/optimizers/lr_policies.py): learning_rate x decay_rates[i]
// after the i-th boundary, with TensorFlow's tf.train.piecewise_constant
// semantics (value i holds while step <= boundaries[i]). The boundaries are in
// epochs when steps_per_epoch is known (given, or from a num_epochs run), else in steps.
#include <cstdint>
#include <string>
#include <vector>

#include "rig/error.hpp"
#include "rig/plugin.hpp"

namespace {

class PiecewiseConstant final : public rig::LrPolicy {
 public:
  PiecewiseConstant(const YAML::Node& params, const rig::LrPolicyContext& ctx) {
    const double learning_rate = params["learning_rate"].as<double>();
    const auto boundaries = params["boundaries"].as<std::vector<double>>();
    const auto decay_rates = params["decay_rates"].as<std::vector<double>>();
    if (boundaries.size() != decay_rates.size()) {
      throw rig::UserError("piecewise_constant: boundaries has " +
                           std::to_string(boundaries.size()) + " entries but decay_rates has " +
                           std::to_string(decay_rates.size()) + "; they must have the same length");
    }
    for (std::size_t i = 1; i < boundaries.size(); ++i) {
      if (boundaries[i] < boundaries[i - 1]) {
        throw rig::UserError("piecewise_constant: boundaries must be sorted in increasing order (" +
                             std::to_string(boundaries[i - 1]) + " comes before " +
                             std::to_string(boundaries[i]) + ")");
      }
    }
    // OpenSeq2Seq: `if steps_per_epoch is not None: boundaries = [steps_per_epoch * epoch ...]`.
    std::int64_t steps_per_epoch = ctx.steps_per_epoch;
    if (params["steps_per_epoch"]) steps_per_epoch = params["steps_per_epoch"].as<std::int64_t>();
    for (double b : boundaries) {
      boundaries_.push_back(steps_per_epoch > 0 ? b * static_cast<double>(steps_per_epoch) : b);
    }
    // decay_rates = [1.0] + decay_rates; vals = [learning_rate * decay for decay in decay_rates]
    values_.push_back(learning_rate);
    for (double r : decay_rates) values_.push_back(learning_rate * r);
  }

  double learning_rate(std::int64_t step) const override {
    const auto x = static_cast<double>(step);
    for (std::size_t i = 0; i < boundaries_.size(); ++i) {
      if (x <= boundaries_[i]) return values_[i];
    }
    return values_.back();
  }

 private:
  std::vector<double> boundaries_;
  std::vector<double> values_;
};

}  // namespace

RIG_PLUGIN(
    lr_policy, "piecewise_constant", "0.1.0",
    "Piecewise constant: learning_rate x decay_rates[i] after boundaries[i] (steps or epochs)",
    PiecewiseConstant)
