// inv_poly_decay: OpenSeq2Seq's inv_poly_decay
// (open_seq2seq/optimizers/lr_policies.py):
// learning_rate / (1 + scale x step)^power, with
// scale = ((learning_rate / min_lr)^(1/power) - 1) / decay_steps, so the rate
// reaches min_lr at decay_steps and keeps falling after. As in OpenSeq2Seq,
// begin_decay_at and warmup_steps are accepted and unused, and min_lr is
// clamped to [1e-8, learning_rate].
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>

#include "rig/error.hpp"
#include "rig/plugin.hpp"

namespace {

class InvPolyDecay final : public rig::LrPolicy {
 public:
  InvPolyDecay(const YAML::Node& params, const rig::LrPolicyContext& ctx)
      : learning_rate_(params["learning_rate"].as<double>()),
        power_(params["power"] ? params["power"].as<double>() : 1.0) {
    if (!(power_ > 0)) {
      throw rig::UserError("inv_poly_decay: power must be > 0 (got " + std::to_string(power_) +
                           ")");
    }
    if (!(learning_rate_ > 0)) throw rig::UserError("inv_poly_decay: learning_rate must be > 0");
    const std::int64_t decay_steps =
        params["decay_steps"] ? params["decay_steps"].as<std::int64_t>() : ctx.max_steps;
    if (decay_steps <= 0) {
      throw rig::UserError("inv_poly_decay: decay_steps must be > 0 (got " +
                           std::to_string(decay_steps) +
                           "; when absent it is the run's max_steps)");
    }
    double min_lr = params["min_lr"].as<double>();
    min_lr = std::max(min_lr, 1e-8);            // min_lr = max(min_lr, 1e-8)
    min_lr = std::min(min_lr, learning_rate_);  // min_lr = min(min_lr, learning_rate)
    scale_ =
        (std::pow(learning_rate_ / min_lr, 1.0 / power_) - 1.0) / static_cast<double>(decay_steps);
  }

  double learning_rate(std::int64_t step) const override {
    return learning_rate_ / std::pow(1.0 + scale_ * static_cast<double>(step), power_);
  }

 private:
  double learning_rate_;
  double power_;
  double scale_ = 0;
};

}  // namespace

RIG_PLUGIN(lr_policy, "inv_poly_decay", "0.1.0",
           "Inverse polynomial decay: learning_rate / (1 + scale x step)^power, reaching min_lr at "
           "decay_steps",
           InvPolyDecay)
