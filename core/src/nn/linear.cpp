// Linear: one fused GEMM + bias + activation (ops::linear).
#include <cmath>
#include <stdexcept>
#include <utility>

#include <fmt/format.h>

#include "rig/nn.hpp"

namespace rig::nn {

namespace {

// torch.nn.Linear's default: kaiming_uniform(a = sqrt(5)) for the weight,
// which is U(-1/sqrt(in), 1/sqrt(in)), and the same bound for the bias.
float fan_in_bound(std::int64_t in_features) {
  return static_cast<float>(1.0 / std::sqrt(static_cast<double>(in_features)));
}

}  // namespace

// With an explicit `init` it applies to the weight and the bias starts at 0
// (the convention of Xavier/Glorot-initialised models).
Linear::Linear(ParameterStore& store, std::string name, std::int64_t in_features,
               std::int64_t out_features, bool bias, std::optional<Initializer> init)
    : Module(store, std::move(name)) {
  if (in_features < 1 || out_features < 1) {
    throw std::invalid_argument(
        fmt::format("Linear '{}': in_features {} and out_features {} must "
                    "be >= 1",
                    this->name(), in_features, out_features));
  }
  const float bound = fan_in_bound(in_features);
  weight_ = parameter("weight", {out_features, in_features},
                      init ? *init : Initializer::uniform(-bound, bound));
  if (bias) {
    bias_ = parameter("bias", {out_features},
                      init ? Initializer::zeros() : Initializer::uniform(-bound, bound));
  }
}

Tensor Linear::forward(const Tensor& x, ops::Activation activation) const {
  return ops::linear(x, weight_, bias_, activation);
}

Tensor Linear::forward(const Tensor& x, ops::Activation activation,
                       const ops::OutputDropout& dropout, float input_scale) const {
  return ops::linear(x, weight_, bias_, activation, dropout, input_scale);
}

}  // namespace rig::nn
