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

#include "../common/decay_window.hpp"
#include "rig/error.hpp"
#include "rig/plugin.hpp"

namespace {

class CosineDecay final : public rig::LrPolicy {
 public:
  CosineDecay(const YAML::Node& params, const rig::LrPolicyContext& ctx)
      : learning_rate_(params["learning_rate"].as<double>()),
        min_lr_(params["min_lr"] ? params["min_lr"].as<double>() : 0.0),
        window_(rig_lr::DecayWindow::from(params, ctx, "cosine_decay")) {}

  double learning_rate(std::int64_t step) const override {
    const double lr = window_.warmed_up(learning_rate_, step);
    if (!window_.decaying(step)) return lr;
    // cosine_decay: s = min(s, ds); c = 0.5 (1 + cos(pi s / ds)); lr ((1 - alpha) c + alpha)
    const double s = window_.decay_position(step);
    const double cosine =
        0.5 * (1.0 + std::cos(std::numbers::pi * s / static_cast<double>(window_.decay_steps)));
    return lr * ((1.0 - min_lr_) * cosine + min_lr_);
  }

 private:
  double learning_rate_;
  double min_lr_;
  rig_lr::DecayWindow window_;
};

}  // namespace

RIG_PLUGIN(lr_policy, "cosine_decay", "0.1.0",
           "Cosine decay of learning_rate over decay_steps, with optional linear warmup",
           CosineDecay)
