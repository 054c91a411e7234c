// transformer_policy: OpenSeq2Seq's transformer_policy
// (open_seq2seq/optimizers/lr_policies.py), the "noam" schedule of
// https://arxiv.org/abs/1706.03762 with an optional cap max_lr:
// learning_rate x coefficient x d_model^-0.5 x min((step+1) warmup_steps^-1.5, (step+1)^-0.5).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <optional>
#include <string>

#include "rig/error.hpp"
#include "rig/plugin.hpp"

namespace {

class TransformerPolicy final : public rig::LrPolicy {
 public:
  TransformerPolicy(const YAML::Node& params, const rig::LrPolicyContext& /*ctx*/)
      : learning_rate_(params["learning_rate"].as<double>()),
        d_model_(params["d_model"].as<double>()),
        warmup_steps_(params["warmup_steps"].as<double>()),
        coefficient_(params["coefficient"] ? params["coefficient"].as<double>() : 1.0) {
    if (params["max_lr"] && !params["max_lr"].IsNull()) max_lr_ = params["max_lr"].as<double>();
    if (!(d_model_ > 0)) throw rig::UserError("transformer_policy: d_model must be > 0");
    if (!(warmup_steps_ > 0)) throw rig::UserError("transformer_policy: warmup_steps must be > 0");
  }

  double learning_rate(std::int64_t step) const override {
    const double n = static_cast<double>(step) + 1.0;
    const double decay = coefficient_ * std::pow(d_model_, -0.5) *
                         std::min(n * std::pow(warmup_steps_, -1.5), std::pow(n, -0.5));
    const double lr = decay * learning_rate_;
    return max_lr_ ? std::min(*max_lr_, lr) : lr;
  }

 private:
  double learning_rate_;
  double d_model_;
  double warmup_steps_;
  double coefficient_;
  std::optional<double> max_lr_;
};

}  // namespace

RIG_PLUGIN(
    lr_policy, "transformer_policy", "0.1.0",
    "Transformer (noam) schedule: linear warmup then inverse square root decay, capped at max_lr",
    TransformerPolicy)
