// poly_decay: OpenSeq2Seq's poly_decay (open_seq2seq/optimizers/lr_policies.py):
// optional linear warmup, then tf.train.polynomial_decay from learning_rate to
// min_lr over decay_steps, started at max(warmup_steps, begin_decay_at).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>

#include "../common/decay_window.hpp"
#include "rig/error.hpp"
#include "rig/plugin.hpp"

namespace {

class PolyDecay final : public rig::LrPolicy {
 public:
  PolyDecay(const YAML::Node& params, const rig::LrPolicyContext& ctx)
      : learning_rate_(params["learning_rate"].as<double>()),
        power_(params["power"] ? params["power"].as<double>() : 1.0),
        min_lr_(params["min_lr"] ? params["min_lr"].as<double>() : 0.0),
        window_(rig_lr::DecayWindow::from(params, ctx, "poly_decay")) {
    if (!(power_ > 0)) {
      throw rig::UserError("poly_decay: power must be > 0 (got " + std::to_string(power_) + ")");
    }
  }

  double learning_rate(std::int64_t step) const override {
    const double lr = window_.warmed_up(learning_rate_, step);
    if (!window_.decaying(step)) return lr;
    // polynomial_decay (cycle=False): (lr - end) * (1 - min(s, ds) / ds)^power + end
    const double s = window_.decay_position(step);
    return (lr - min_lr_) * std::pow(1.0 - s / static_cast<double>(window_.decay_steps), power_) +
           min_lr_;
  }

 private:
  double learning_rate_;
  double power_;
  double min_lr_;
  rig_lr::DecayWindow window_;
};

}  // namespace

RIG_PLUGIN(lr_policy, "poly_decay", "0.1.0",
           "Polynomial decay from learning_rate to min_lr over decay_steps, with optional warmup",
           PolyDecay)
