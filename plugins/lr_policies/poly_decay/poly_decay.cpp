// poly_decay: OpenSeq2Seq's poly_decay (open_seq2seq/optimizers/lr_policies.py):
// optional linear warmup, then tf.train.polynomial_decay from learning_rate to
// min_lr over decay_steps, started at max(warmup_steps, begin_decay_at).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>

#include "rig/error.hpp"
#include "rig/plugin.hpp"

namespace {

class PolyDecay final : public rig::LrPolicy {
 public:
  PolyDecay(const YAML::Node& params, const rig::LrPolicyContext& ctx)
      : learning_rate_(params["learning_rate"].as<double>()),
        power_(params["power"] ? params["power"].as<double>() : 1.0),
        min_lr_(params["min_lr"] ? params["min_lr"].as<double>() : 0.0),
        warmup_steps_(params["warmup_steps"] ? params["warmup_steps"].as<std::int64_t>() : 0) {
    const std::int64_t begin =
        params["begin_decay_at"] ? params["begin_decay_at"].as<std::int64_t>() : 0;
    if (begin < 0) throw rig::UserError("poly_decay: begin_decay_at must be >= 0");
    if (warmup_steps_ < 0) throw rig::UserError("poly_decay: warmup_steps must be >= 0");
    begin_decay_at_ =
        std::max(warmup_steps_, begin);  // begin_decay_at = max(warmup_steps, begin_decay_at)
    decay_steps_ = params["decay_steps"] ? params["decay_steps"].as<std::int64_t>() : ctx.max_steps;
    if (decay_steps_ <= 0) {
      throw rig::UserError("poly_decay: decay_steps must be > 0 (got " +
                           std::to_string(decay_steps_) +
                           "; when absent it is the run's max_steps)");
    }
    if (!(power_ > 0)) {
      throw rig::UserError("poly_decay: power must be > 0 (got " + std::to_string(power_) + ")");
    }
  }

  double learning_rate(std::int64_t step) const override {
    double lr = learning_rate_;
    if (warmup_steps_ > 0 && step < warmup_steps_) {
      lr = learning_rate_ * static_cast<double>(step) / static_cast<double>(warmup_steps_);
    }
    if (step < begin_decay_at_) return lr;
    // polynomial_decay (cycle=False): (lr - end) * (1 - min(s, ds) / ds)^power + end
    const auto ds = static_cast<double>(decay_steps_);
    const double s = std::min(static_cast<double>(step - begin_decay_at_), ds);
    return (lr - min_lr_) * std::pow(1.0 - s / ds, power_) + min_lr_;
  }

 private:
  double learning_rate_;
  double power_;
  double min_lr_;
  std::int64_t warmup_steps_;
  std::int64_t begin_decay_at_ = 0;
  std::int64_t decay_steps_ = 0;
};

}  // namespace

RIG_PLUGIN(lr_policy, "poly_decay", "0.1.0",
           "Polynomial decay from learning_rate to min_lr over decay_steps, with optional warmup",
           PolyDecay)
