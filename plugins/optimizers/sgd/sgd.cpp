// sgd: stochastic gradient descent with torch.optim.SGD's semantics
// (dampening 0): g = grad + weight_decay * p; with momentum, the buffer starts
// as g and then becomes momentum * buf + g; Nesterov uses g + momentum * buf.
#include <stdexcept>

#include <fmt/format.h>

#include "rig/error.hpp"
#include "rig/memory_labels.hpp"
#include "rig/ops.hpp"
#include "rig/plugin.hpp"

namespace {

using rig::Tensor;

constexpr const char* kMomentumBuffer = "momentum_buffer";

class Sgd final : public rig::Optimizer {
 public:
  Sgd(const YAML::Node& params, const rig::OptimizerContext& ctx)
      : momentum_(params["momentum"].as<double>()),
        nesterov_(params["nesterov"].as<bool>()),
        weight_decay_(params["weight_decay"].as<double>()) {
    if (nesterov_ && momentum_ <= 0.0) {
      throw rig::UserError("sgd: nesterov: true needs momentum > 0");
    }
    if (!ctx.params.allocated()) {
      throw std::logic_error("sgd: the parameter store must be allocated before the optimizer");
    }
    values_ = ctx.params.values();
    grads_ = ctx.params.grads();
  }

  bool element_wise() const override { return true; }

  bool folds_mixed_precision() const override { return true; }

  void step(double learning_rate) override { step_mixed(learning_rate, {}); }

  void step_mixed(double learning_rate, const rig::MixedPrecisionStep& mixed) override {
    const bool first = momentum_ != 0.0 && !buffer_.defined();
    if (first) {
      // Made at the first step (PyTorch's lazily made buffer), but state all the same.
      const rig::MemoryLabel label("the optimizer's state");
      buffer_ = Tensor::empty({values_.numel()}, rig::DType::f32, values_.device());
    }
    rig::ops::sgd_update(values_, grads_, buffer_,
                         {static_cast<float>(learning_rate), static_cast<float>(weight_decay_),
                          static_cast<float>(momentum_), nesterov_, first},
                         mixed);
  }

  std::map<std::string, Tensor> state() const override {
    if (!buffer_.defined()) return {};  // no step taken yet (or no momentum)
    return {{kMomentumBuffer, buffer_.clone()}};
  }

  void load_state(const std::map<std::string, Tensor>& state) override {
    Tensor loaded;
    for (const auto& [name, tensor] : state) {
      if (name != kMomentumBuffer) {
        throw rig::UserError(fmt::format("sgd: unknown optimizer state '{}' (sgd keeps only {})",
                                         name, kMomentumBuffer));
      }
      if (tensor.dtype() != rig::DType::f32 || tensor.numel() != values_.numel()) {
        throw rig::UserError(fmt::format("sgd: {} is {} {}, but the model has {} f32 parameters",
                                         kMomentumBuffer, rig::dtype_name(tensor.dtype()),
                                         rig::to_string(tensor.shape()), values_.numel()));
      }
      loaded = tensor.reshape({values_.numel()}).to(values_.device()).clone();
    }
    if (loaded.defined() && momentum_ == 0.0) {
      throw rig::UserError("sgd: the state has a momentum buffer but momentum is 0");
    }
    buffer_ = loaded;
  }

 private:
  double momentum_;
  bool nesterov_;
  double weight_decay_;
  Tensor values_;  // the flat parameter buffer
  Tensor grads_;   // the flat gradient buffer
  Tensor buffer_;  // momentum buffer, same layout; undefined until the first step
};

}  // namespace

RIG_PLUGIN(optimizer, "sgd", "0.1.0", "Stochastic gradient descent (torch.optim.SGD semantics)",
           Sgd)
