// fixed_lr: the same learning rate at every step (OpenSeq2Seq's fixed_lr).
#include "rig/plugin.hpp"

namespace {

class FixedLr final : public rig::LrPolicy {
 public:
  FixedLr(const YAML::Node& params, const rig::LrPolicyContext& /*ctx*/)
      : learning_rate_(params["learning_rate"].as<double>()) {}
  double learning_rate(std::int64_t /*step*/) const override { return learning_rate_; }

 private:
  double learning_rate_;
};

}  // namespace

RIG_PLUGIN(lr_policy, "fixed_lr", "0.1.0", "A constant learning rate", FixedLr)
