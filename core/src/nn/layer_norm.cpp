// LayerNorm over the last axis; weight (gamma) 1 and bias (beta) 0, as torch.
#include <stdexcept>
#include <utility>

#include <fmt/format.h>

#include "rig/nn.hpp"

namespace rig::nn {

LayerNorm::LayerNorm(ParameterStore& store, std::string name, std::int64_t dim, float eps)
    : Module(store, std::move(name)), eps_(eps) {
  if (dim < 1) {
    throw std::invalid_argument(
        fmt::format("LayerNorm '{}': dim {} must be >= 1", this->name(), dim));
  }
  gamma_ = parameter("weight", {dim}, Initializer::ones());
  beta_ = parameter("bias", {dim}, Initializer::zeros());
}

Tensor LayerNorm::forward(const Tensor& x) const {
  return ops::layer_norm(x, gamma_, beta_, eps_);
}

}  // namespace rig::nn
