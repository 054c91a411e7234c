// one_cycle: the 1cycle policy with the semantics of PyTorch's
// torch.optim.lr_scheduler.OneCycleLR (learning rate only; no momentum
// cycling). total_steps is the run's max_steps unless given. Steps at or past
// total_steps keep the final rate (torch raises there instead).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numbers>
#include <string>
#include <vector>

#include "rig/error.hpp"
#include "rig/plugin.hpp"

namespace {

class OneCycle final : public rig::LrPolicy {
 public:
  OneCycle(const YAML::Node& params, const rig::LrPolicyContext& ctx) {
    const double max_lr = params["max_lr"].as<double>();
    const double pct_start = params["pct_start"] ? params["pct_start"].as<double>() : 0.3;
    const std::string anneal =
        params["anneal_strategy"] ? params["anneal_strategy"].as<std::string>() : "cos";
    const double div_factor = params["div_factor"] ? params["div_factor"].as<double>() : 25.0;
    const double final_div_factor =
        params["final_div_factor"] ? params["final_div_factor"].as<double>() : 1e4;
    const bool three_phase = params["three_phase"] ? params["three_phase"].as<bool>() : false;
    total_steps_ = params["total_steps"] ? params["total_steps"].as<std::int64_t>() : ctx.max_steps;

    if (total_steps_ <= 0) {
      throw rig::UserError("one_cycle: total_steps must be > 0 (got " +
                           std::to_string(total_steps_) +
                           "; when absent it is the run's max_steps)");
    }
    if (!(pct_start >= 0 && pct_start <= 1)) {
      throw rig::UserError("one_cycle: pct_start must be in [0, 1] (got " +
                           std::to_string(pct_start) + ")");
    }
    if (anneal == "cos") {
      cos_ = true;
    } else if (anneal == "linear") {
      cos_ = false;
    } else {
      throw rig::UserError("one_cycle: anneal_strategy must be 'cos' or 'linear' (got '" + anneal +
                           "')");
    }
    if (!(max_lr > 0)) throw rig::UserError("one_cycle: max_lr must be > 0");
    if (!(div_factor > 0)) throw rig::UserError("one_cycle: div_factor must be > 0");
    if (!(final_div_factor > 0)) throw rig::UserError("one_cycle: final_div_factor must be > 0");

    // OneCycleLR: initial_lr = max_lr / div_factor, min_lr = initial_lr / final_div_factor.
    const double initial_lr = max_lr / div_factor;
    const double min_lr = initial_lr / final_div_factor;
    const double total = static_cast<double>(total_steps_);
    if (three_phase) {
      phases_ = {{pct_start * total - 1, initial_lr, max_lr},
                 {2 * pct_start * total - 2, max_lr, initial_lr},
                 {total - 1, initial_lr, min_lr}};
    } else {
      phases_ = {{pct_start * total - 1, initial_lr, max_lr}, {total - 1, max_lr, min_lr}};
    }
  }

  double learning_rate(std::int64_t step) const override {
    const double s = static_cast<double>(std::min(step, total_steps_ - 1));
    double start_step = 0;
    for (std::size_t i = 0; i < phases_.size(); ++i) {
      const Phase& p = phases_[i];
      if (s <= p.end_step || i + 1 == phases_.size()) {
        const double span = p.end_step - start_step;
        const double pct = span == 0 ? 1.0 : (s - start_step) / span;
        return anneal(p.start_lr, p.end_lr, pct);
      }
      start_step = p.end_step;
    }
    return phases_.back().end_lr;  // unreachable
  }

 private:
  struct Phase {
    double end_step;
    double start_lr;
    double end_lr;
  };

  double anneal(double start, double end, double pct) const {
    if (cos_) return end + (start - end) / 2.0 * (std::cos(std::numbers::pi * pct) + 1);
    return (end - start) * pct + start;
  }

  std::int64_t total_steps_ = 0;
  bool cos_ = true;
  std::vector<Phase> phases_;
};

}  // namespace

RIG_PLUGIN(lr_policy, "one_cycle", "0.1.0",
           "1cycle policy (torch OneCycleLR): warm up to max_lr, then anneal far below the start",
           OneCycle)
