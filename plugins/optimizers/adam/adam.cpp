// adam: Adam with torch.optim.Adam's semantics (weight_decay is an L2 penalty
// added to the gradient), or torch.optim.AdamW's with decoupled_weight_decay
// (the weights shrink by lr * weight_decay before the Adam update); optional
// AMSGrad. One fused, threaded pass over the flat parameter buffer
// (rig::ops::adam_update):
//   g = grad (+ wd * p);  m = b1 m + (1 - b1) g;  v = b2 v + (1 - b2) g^2
//   p -= lr / (1 - b1^t) * m / (sqrt(v) / sqrt(1 - b2^t) + eps)
// (v replaced by max(v_max, v) with AMSGrad).
//
// The same source also builds the `LazyAdam` plugin (plugins/optimizers/lazy_adam,
// RIG_ADAM_PLUGIN_NAME selects the registered name). rig's gradients are dense,
// so this is dense Adam under that name: it differs from TensorFlow's LazyAdam
// only for rows whose gradient is zero, whose moments LazyAdam leaves alone.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "rig/error.hpp"
#include "rig/ops.hpp"
#include "rig/plugin.hpp"

#ifndef RIG_ADAM_PLUGIN_NAME
#define RIG_ADAM_PLUGIN_NAME "adam"
#endif

namespace {

using rig::Tensor;

constexpr const char* kName = RIG_ADAM_PLUGIN_NAME;
constexpr const char* kExpAvg = "exp_avg";
constexpr const char* kExpAvgSq = "exp_avg_sq";
constexpr const char* kMaxExpAvgSq = "max_exp_avg_sq";
constexpr const char* kStep = "step";

class Adam final : public rig::Optimizer {
 public:
  Adam(const YAML::Node& params, const rig::OptimizerContext& ctx)
      : beta1_(params["beta1"].as<double>()),
        beta2_(params["beta2"].as<double>()),
        epsilon_(params["epsilon"].as<double>()),
        weight_decay_(params["weight_decay"].as<double>()),
        decoupled_(params["decoupled_weight_decay"].as<bool>()),
        amsgrad_(params["amsgrad"] ? params["amsgrad"].as<bool>() : false) {
    auto check = [](bool ok, const std::string& what) {
      if (!ok) throw rig::UserError(fmt::format("{}: {}", kName, what));
    };
    check(beta1_ >= 0.0 && beta1_ < 1.0, fmt::format("beta1 must be in [0, 1), got {}", beta1_));
    check(beta2_ >= 0.0 && beta2_ < 1.0, fmt::format("beta2 must be in [0, 1), got {}", beta2_));
    check(epsilon_ > 0.0, fmt::format("epsilon must be > 0, got {}", epsilon_));
    check(weight_decay_ >= 0.0, fmt::format("weight_decay must be >= 0, got {}", weight_decay_));
    if (!ctx.params.allocated()) {
      throw std::logic_error(
          fmt::format("{}: the parameter store must be allocated before the optimizer", kName));
    }
    values_ = ctx.params.values();
    grads_ = ctx.params.grads();
    const auto n = values_.numel();
    exp_avg_ = zeros(n);
    exp_avg_sq_ = zeros(n);
    if (amsgrad_) max_exp_avg_sq_ = zeros(n);
  }

  // A zeroed moment buffer on the parameters' device.
  Tensor zeros(std::int64_t n) const {
    return Tensor::zeros({n}, rig::DType::f32, values_.device());
  }

  bool element_wise() const override { return true; }

  bool folds_mixed_precision() const override { return true; }

  void step(double learning_rate) override { step_mixed(learning_rate, {}); }

  void step_mixed(double learning_rate, const rig::MixedPrecisionStep& mixed) override {
    ++step_;
    const auto t = static_cast<double>(step_);
    rig::ops::AdamUpdate update;
    update.beta1 = static_cast<float>(beta1_);
    update.beta2 = static_cast<float>(beta2_);
    update.epsilon = static_cast<float>(epsilon_);
    update.step_size = static_cast<float>(learning_rate / (1.0 - std::pow(beta1_, t)));
    update.inv_bc2_sqrt = static_cast<float>(1.0 / std::sqrt(1.0 - std::pow(beta2_, t)));
    if (decoupled_) {
      update.shrink = static_cast<float>(1.0 - learning_rate * weight_decay_);
    } else {
      update.coupled_decay = static_cast<float>(weight_decay_);
    }
    rig::ops::adam_update(values_, grads_, exp_avg_, exp_avg_sq_, max_exp_avg_sq_, update, mixed);
  }

  std::map<std::string, Tensor> state() const override {
    if (step_ == 0) return {};  // no step taken yet
    std::map<std::string, Tensor> state{
        {kExpAvg, exp_avg_.clone()},
        {kExpAvgSq, exp_avg_sq_.clone()},
        {kStep, Tensor::from_vector(std::vector<std::int64_t>{step_}, {1})}};
    if (amsgrad_) state.emplace(kMaxExpAvgSq, max_exp_avg_sq_.clone());
    return state;
  }

  void load_state(const std::map<std::string, Tensor>& state) override {
    const auto n = values_.numel();
    if (state.empty()) {  // the state before the first step
      step_ = 0;
      exp_avg_ = zeros(n);
      exp_avg_sq_ = zeros(n);
      if (amsgrad_) max_exp_avg_sq_ = zeros(n);
      return;
    }
    std::vector<std::string> expected{kExpAvg, kExpAvgSq, kStep};
    if (amsgrad_) expected.emplace_back(kMaxExpAvgSq);
    for (const auto& [name, tensor] : state) {
      if (std::find(expected.begin(), expected.end(), name) == expected.end()) {
        throw rig::UserError(
            fmt::format("{}: unknown optimizer state '{}' (with amsgrad: {} it keeps {})", kName,
                        name, amsgrad_, fmt::join(expected, ", ")));
      }
    }
    for (const auto& name : expected) {
      if (!state.contains(name)) {
        throw rig::UserError(
            fmt::format("{}: the optimizer state lacks '{}' (with amsgrad: {} it "
                        "keeps {})",
                        kName, name, amsgrad_, fmt::join(expected, ", ")));
      }
    }
    const Tensor& step = state.at(kStep);
    if (step.dtype() != rig::DType::i64 || step.numel() != 1) {
      throw rig::UserError(fmt::format("{}: {} must be one i64, got {} {}", kName, kStep,
                                       rig::dtype_name(step.dtype()),
                                       rig::to_string(step.shape())));
    }
    const std::int64_t loaded_step = step.to_int_vector().front();
    if (loaded_step < 1) {
      throw rig::UserError(fmt::format("{}: {} must be >= 1, got {}", kName, kStep, loaded_step));
    }
    auto flat = [&](const char* name) {
      const Tensor& tensor = state.at(name);
      if (tensor.dtype() != rig::DType::f32 || tensor.numel() != n) {
        throw rig::UserError(fmt::format("{}: {} is {} {}, but the model has {} f32 parameters",
                                         kName, name, rig::dtype_name(tensor.dtype()),
                                         rig::to_string(tensor.shape()), n));
      }
      return tensor.reshape({n}).to(values_.device()).clone();
    };
    Tensor exp_avg = flat(kExpAvg);
    Tensor exp_avg_sq = flat(kExpAvgSq);
    Tensor max_exp_avg_sq = amsgrad_ ? flat(kMaxExpAvgSq) : Tensor();
    exp_avg_ = exp_avg;
    exp_avg_sq_ = exp_avg_sq;
    max_exp_avg_sq_ = max_exp_avg_sq;
    step_ = loaded_step;
  }

 private:
  double beta1_;
  double beta2_;
  double epsilon_;
  double weight_decay_;
  bool decoupled_;
  bool amsgrad_;
  std::int64_t step_ = 0;
  Tensor values_;          // the flat parameter buffer
  Tensor grads_;           // the flat gradient buffer
  Tensor exp_avg_;         // first moment, same layout
  Tensor exp_avg_sq_;      // second moment, same layout
  Tensor max_exp_avg_sq_;  // AMSGrad's running maximum of exp_avg_sq; undefined without it
};

}  // namespace

RIG_PLUGIN(optimizer, RIG_ADAM_PLUGIN_NAME, "0.1.0",
           "Adam / AdamW (torch.optim.Adam and AdamW semantics), optional AMSGrad", Adam)
