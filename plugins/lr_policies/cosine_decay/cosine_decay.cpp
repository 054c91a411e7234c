// cosine_decay: OpenSeq2Seq's cosine_decay (open_seq2seq/optimizers/lr_policies.py):
// optional linear warmup, then tf.train.cosine_decay over decay_steps, started
// at max(warmup_steps, begin_decay_at). As in OpenSeq2Seq, min_lr is passed as
// TensorFlow's `alpha`: the floor is min_lr x learning_rate, not min_lr; `power`
// is accepted and unused.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numbers>
#include <string>

#include "rig/error.hpp"
#include "rig/plugin.hpp"

namespace {

class CosineDecay final : public rig::LrPolicy {
 public:
  CosineDecay(const YAML::Node& params, const rig::LrPolicyContext& ctx)
      : learning_rate_(params["learning_rate"].as<double>()),
        min_lr_(params["min_lr"] ? params["min_lr"].as<double>() : 0.0),
        warmup_steps_(params["warmup_steps"] ? params["warmup_steps"].as<std::int64_t>() : 0) {
    const std::int64_t begin =
        params["begin_decay_at"] ? params["begin_decay_at"].as<std::int64_t>() : 0;
    if (begin < 0) throw rig::UserError("cosine_decay: begin_decay_at must be >= 0");
    if (warmup_steps_ < 0) throw rig::UserError("cosine_decay: warmup_steps must be >= 0");
    begin_decay_at_ = std::max(warmup_steps_, begin);
    decay_steps_ = params["decay_steps"] ? params["decay_steps"].as<std::int64_t>() : ctx.max_steps;
    if (decay_steps_ <= 0) {
      throw rig::UserError("cosine_decay: decay_steps must be > 0 (got " +
                           std::to_string(decay_steps_) +
                           "; when absent it is the run's max_steps)");
    }
  }

  double learning_rate(std::int64_t step) const override {
    double lr = learning_rate_;
    if (warmup_steps_ > 0 && step < warmup_steps_) {
      lr = learning_rate_ * static_cast<double>(step) / static_cast<double>(warmup_steps_);
    }
    if (step < begin_decay_at_) return lr;
    // cosine_decay: s = min(s, ds); c = 0.5 (1 + cos(pi s / ds)); lr ((1 - alpha) c + alpha)
    const auto ds = static_cast<double>(decay_steps_);
    const double s = std::min(static_cast<double>(step - begin_decay_at_), ds);
    const double cosine = 0.5 * (1.0 + std::cos(std::numbers::pi * s / ds));
    return lr * ((1.0 - min_lr_) * cosine + min_lr_);
  }

 private:
  double learning_rate_;
  double min_lr_;
  std::int64_t warmup_steps_;
  std::int64_t begin_decay_at_ = 0;
  std::int64_t decay_steps_ = 0;
};

}  // namespace

RIG_PLUGIN(lr_policy, "cosine_decay", "0.1.0",
           "Cosine decay of learning_rate over decay_steps, with optional linear warmup",
           CosineDecay)
