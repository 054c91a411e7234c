// novograd: OpenSeq2Seq's NovoGrad (open_seq2seq/optimizers/novograd.py, the
// class with defaults beta1 0.95, beta2 0.98, epsilon 1e-8, weight_decay 0,
// grad_averaging false). Per layer (here: per parameter tensor) l:
//   n_l = sum(g_l^2)
//   v_l = n_l on the first step (while v_l is 0), else beta2 v_l + (1 - beta2) n_l
//   d   = g_l / sqrt(v_l + epsilon) (+ weight_decay * w_l) (x (1 - beta1) with grad_averaging)
// then TensorFlow's MomentumOptimizer (momentum beta1, no Nesterov):
//   m = beta1 m + d;  w -= lr m
// One pass per parameter over its slice of the flat buffers (after the norm).
#include <cmath>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "rig/error.hpp"
#include "rig/ops.hpp"
#include "rig/plugin.hpp"

namespace {

using rig::Tensor;

constexpr const char* kMomentum = "momentum";
constexpr const char* kGradsEma = "grads_ema";

class NovoGrad final : public rig::Optimizer {
 public:
  NovoGrad(const YAML::Node& params, const rig::OptimizerContext& ctx)
      : beta1_(params["beta1"].as<double>()),
        beta2_(params["beta2"].as<double>()),
        epsilon_(params["epsilon"].as<double>()),
        weight_decay_(params["weight_decay"].as<double>()),
        grad_averaging_(params["grad_averaging"].as<bool>()) {
    auto check = [](bool ok, const std::string& what) {
      if (!ok) throw rig::UserError("novograd: " + what);
    };
    check(beta1_ >= 0.0 && beta1_ < 1.0, fmt::format("beta1 must be in [0, 1), got {}", beta1_));
    check(beta2_ >= 0.0 && beta2_ < 1.0, fmt::format("beta2 must be in [0, 1), got {}", beta2_));
    check(epsilon_ > 0.0, fmt::format("epsilon must be > 0, got {}", epsilon_));
    check(weight_decay_ >= 0.0, fmt::format("weight_decay must be >= 0, got {}", weight_decay_));
    if (!ctx.params.allocated()) {
      throw std::logic_error(
          "novograd: the parameter store must be allocated before the optimizer");
    }
    values_ = ctx.params.values();
    grads_ = ctx.params.grads();
    for (const auto& info : ctx.params.parameters()) {
      layers_.push_back({info.offset, info.value.numel()});
    }
    momentum_ = Tensor::zeros({values_.numel()}, rig::DType::f32, values_.device());
    grads_ema_ = Tensor::zeros({static_cast<std::int64_t>(layers_.size())}, rig::DType::f32,
                               values_.device());
  }

  void step(double learning_rate) override {
    rig::NovogradUpdate update;
    update.learning_rate = static_cast<float>(learning_rate);
    update.beta1 = static_cast<float>(beta1_);
    update.beta2 = static_cast<float>(beta2_);
    update.c2 = static_cast<float>(1.0 - beta2_);
    update.epsilon = static_cast<float>(epsilon_);
    update.weight_decay = static_cast<float>(weight_decay_);
    update.avg = grad_averaging_ ? static_cast<float>(1.0 - beta1_) : 1.0F;
    rig::ops::novograd_update(values_, grads_, momentum_, grads_ema_, layers_, update);
  }

  std::map<std::string, Tensor> state() const override {
    return {{kMomentum, momentum_.clone()}, {kGradsEma, grads_ema_.clone()}};
  }

  void load_state(const std::map<std::string, Tensor>& state) override {
    const auto layers = static_cast<std::int64_t>(layers_.size());
    for (const auto& [name, tensor] : state) {
      if (name != kMomentum && name != kGradsEma) {
        throw rig::UserError(
            fmt::format("novograd: unknown optimizer state '{}' (novograd keeps {} and {})", name,
                        kMomentum, kGradsEma));
      }
    }
    for (const char* name : {kMomentum, kGradsEma}) {
      if (!state.contains(name)) {
        throw rig::UserError(fmt::format("novograd: the optimizer state lacks '{}'", name));
      }
    }
    const Tensor& momentum = state.at(kMomentum);
    if (momentum.dtype() != rig::DType::f32 || momentum.numel() != values_.numel()) {
      throw rig::UserError(fmt::format("novograd: {} is {} {}, but the model has {} f32 parameters",
                                       kMomentum, rig::dtype_name(momentum.dtype()),
                                       rig::to_string(momentum.shape()), values_.numel()));
    }
    const Tensor& ema = state.at(kGradsEma);
    if (ema.dtype() != rig::DType::f32 || ema.numel() != layers) {
      throw rig::UserError(fmt::format(
          "novograd: {} is {} {}, but the model has {} parameter tensors (one f32 each)", kGradsEma,
          rig::dtype_name(ema.dtype()), rig::to_string(ema.shape()), layers));
    }
    momentum_ = momentum.reshape({values_.numel()}).to(values_.device()).clone();
    grads_ema_ = ema.reshape({layers}).to(values_.device()).clone();
  }

 private:
  double beta1_;
  double beta2_;
  double epsilon_;
  double weight_decay_;
  bool grad_averaging_;
  std::vector<rig::FlatSlice> layers_;  // each parameter's slice of the flat buffers
  Tensor values_;                       // the flat parameter buffer
  Tensor grads_;                        // the flat gradient buffer
  Tensor momentum_;                     // TensorFlow's momentum accumulator, same layout
  Tensor grads_ema_;  // [#parameters]: the running mean of each sum(g^2); 0 = unset
};

}  // namespace

RIG_PLUGIN(optimizer, "novograd", "0.1.0",
           "NovoGrad (OpenSeq2Seq): layer-wise normalised gradients with momentum", NovoGrad)
