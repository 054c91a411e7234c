// exp_decay: OpenSeq2Seq's exp_decay (open_seq2seq/optimizers/lr_policies.py):
// tf.train.exponential_decay started at begin_decay_at, floored at min_lr.
#include <cmath>
#include <cstdint>
#include <string>

#include "rig/error.hpp"
#include "rig/plugin.hpp"

namespace {

class ExpDecay final : public rig::LrPolicy {
 public:
  ExpDecay(const YAML::Node& params, const rig::LrPolicyContext& ctx)
      : learning_rate_(params["learning_rate"].as<double>()),
        decay_rate_(params["decay_rate"].as<double>()),
        staircase_(params["use_staircase_decay"].as<bool>()),
        begin_decay_at_(params["begin_decay_at"] ? params["begin_decay_at"].as<std::int64_t>() : 0),
        min_lr_(params["min_lr"] ? params["min_lr"].as<double>() : 0.0) {
    // OpenSeq2Seq fills decay_steps with the run's last step when it is not given.
    decay_steps_ = params["decay_steps"] ? params["decay_steps"].as<std::int64_t>() : ctx.max_steps;
    if (decay_steps_ <= 0) {
      throw rig::UserError("exp_decay: decay_steps must be > 0 (got " +
                           std::to_string(decay_steps_) +
                           "; when absent it is the run's max_steps)");
    }
    if (!(decay_rate_ > 0)) {
      throw rig::UserError("exp_decay: decay_rate must be > 0 (got " + std::to_string(decay_rate_) +
                           ")");
    }
    if (begin_decay_at_ < 0) throw rig::UserError("exp_decay: begin_decay_at must be >= 0");
  }

  double learning_rate(std::int64_t step) const override {
    double lr = learning_rate_;
    if (step >= begin_decay_at_) {
      // exponential_decay: learning_rate * decay_rate ^ (global_step / decay_steps)
      double p = static_cast<double>(step - begin_decay_at_) / static_cast<double>(decay_steps_);
      if (staircase_) p = std::floor(p);
      lr = learning_rate_ * std::pow(decay_rate_, p);
    }
    return std::max(min_lr_, lr);  // final_lr = tf.maximum(min_lr, new_lr)
  }

 private:
  double learning_rate_;
  double decay_rate_;
  bool staircase_;
  std::int64_t begin_decay_at_;
  double min_lr_;
  std::int64_t decay_steps_ = 0;
};

}  // namespace

RIG_PLUGIN(lr_policy, "exp_decay", "0.1.0",
           "Exponential decay: learning_rate x decay_rate^(step / decay_steps), floored at min_lr",
           ExpDecay)
