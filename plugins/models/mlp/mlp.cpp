// mlp: a multi-layer perceptron for the classification or regression task a
// data layer describes in info() (num_features, num_outputs, task). It computes
// in the run's dtype (f32 features are cast to it); the loss is f32.
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "rig/error.hpp"
#include "rig/nn.hpp"
#include "rig/ops.hpp"
#include "rig/plugin.hpp"

namespace {

using rig::Tensor;
namespace ops = rig::ops;

std::int64_t info_int(const YAML::Node& info, const char* key) {
  const YAML::Node value = info[key];
  if (!value) {
    throw rig::UserError(
        fmt::format("mlp: the data layer does not say '{}' in its info(); mlp needs num_features, "
                    "num_outputs (or num_classes) and task",
                    key));
  }
  const auto n = value.as<std::int64_t>();
  if (n < 1) throw rig::UserError(fmt::format("mlp: data layer info {} = {} must be >= 1", key, n));
  return n;
}

class Mlp final : public rig::Model {
 public:
  Mlp(const YAML::Node& params, const rig::ModelContext& ctx) {
    const YAML::Node& info = ctx.data_info;
    num_features_ = info_int(info, "num_features");
    num_outputs_ = info_int(info, info["num_outputs"] ? "num_outputs" : "num_classes");
    const std::string task = info["task"] ? info["task"].as<std::string>() : "classification";
    if (task != "classification" && task != "regression") {
      throw rig::UserError(fmt::format(
          "mlp: data layer task '{}' is not supported (classification or regression)", task));
    }
    classification_ = task == "classification";
    dtype_ = ctx.run.dtype;
    if (!rig::is_floating(dtype_)) {
      throw std::invalid_argument(
          fmt::format("mlp: compute dtype {} is not floating", rig::dtype_name(dtype_)));
    }
    const std::string activation = params["activation"].as<std::string>();
    activation_ = activation == "relu"      ? ops::Activation::relu
                  : activation == "sigmoid" ? ops::Activation::sigmoid
                                            : ops::Activation::tanh;
    // xavier_uniform: Glorot weights, zero biases; fan_in_uniform: torch.nn.Linear's default.
    std::optional<rig::Initializer> init;
    if (params["init"].as<std::string>() == "xavier_uniform") {
      init = rig::Initializer::xavier_uniform();
    }

    std::vector<std::int64_t> sizes{num_features_};
    for (const auto& h : params["hidden_sizes"]) sizes.push_back(h.as<std::int64_t>());
    sizes.push_back(num_outputs_);
    layers_.reserve(sizes.size() - 1);
    for (std::size_t i = 0; i + 1 < sizes.size(); ++i) {
      // "layers.<i>.weight" [out, in] and "layers.<i>.bias" [out], as torch.nn.Linear.
      layers_.emplace_back(ctx.params, fmt::format("layers.{}", i), sizes[i], sizes[i + 1], true,
                           init);
    }
  }

  rig::ModelOutput forward(const rig::Batch& batch, rig::Mode mode) override {
    std::optional<rig::NoGradGuard> no_grad;
    if (mode != rig::Mode::train) no_grad.emplace();
    const Tensor outputs = compute(batch.at("features"));
    const Tensor& labels = batch.at("labels");
    const auto rows = outputs.size(0);
    rig::ModelOutput result;
    result.loss =
        classification_ ? ops::cross_entropy(outputs, labels) : ops::mse_loss(outputs, labels);
    if (mode != rig::Mode::eval) return result;  // training reads nothing back
    const auto n = static_cast<double>(rows);
    if (!classification_) {
      result.metrics["loss"] = {static_cast<double>(result.loss.item()) * n, n};
      return result;
    }
    // The loss and the correct predictions, read back together.
    const Tensor correct =
        ops::sum(ops::equal(ops::argmax(outputs), labels).to(rig::DType::f32)).reshape({1});
    const std::vector<float> numbers =
        ops::concat({result.loss.detach().reshape({1}), correct}, 0).to_vector();
    result.metrics["loss"] = {static_cast<double>(numbers[0]) * n, n};
    result.metrics["accuracy"] = {static_cast<double>(numbers[1]), n};
    return result;
  }

  Tensor infer(const rig::Batch& batch) override {
    rig::NoGradGuard no_grad;
    const Tensor outputs = compute(batch.at("features"));
    return classification_ ? ops::argmax(outputs) : outputs.to(rig::DType::f32);
  }

 private:
  Tensor compute(const Tensor& features) const {
    if (features.dtype() != rig::DType::f32 || features.dim() != 2 ||
        features.size(1) != num_features_) {
      throw std::invalid_argument(fmt::format("mlp: features {} {}, expected f32 [batch,{}]",
                                              rig::dtype_name(features.dtype()),
                                              rig::to_string(features.shape()), num_features_));
    }
    Tensor h = features.to(dtype_);  // itself under f32
    for (std::size_t i = 0; i < layers_.size(); ++i) {
      h = layers_[i].forward(h, i + 1 < layers_.size() ? activation_ : ops::Activation::none);
    }
    return h;
  }

  std::int64_t num_features_ = 0;
  std::int64_t num_outputs_ = 0;
  bool classification_ = true;
  rig::DType dtype_ = rig::DType::f32;  // the run's compute dtype
  ops::Activation activation_ = ops::Activation::tanh;
  std::vector<rig::nn::Linear> layers_;
};

}  // namespace

RIG_PLUGIN(model, "mlp", "0.1.0", "Multi-layer perceptron for classification or regression", Mlp)
