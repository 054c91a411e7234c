// Conv2d: weight [out, in / groups, k, k], Kaiming-normal as torchvision's ResNet.
#include <cmath>
#include <stdexcept>
#include <utility>

#include <fmt/format.h>

#include "rig/nn.hpp"

namespace rig::nn {

Conv2d::Conv2d(ParameterStore& store, std::string name, std::int64_t in_channels,
               std::int64_t out_channels, std::int64_t kernel, const ops::Conv2dOptions& options,
               bool bias)
    : Module(store, std::move(name)), options_(options) {
  const std::int64_t groups = options.groups;
  if (in_channels < 1 || out_channels < 1 || kernel < 1 || groups < 1 ||
      in_channels % groups != 0 || out_channels % groups != 0) {
    throw std::invalid_argument(fmt::format(
        "Conv2d '{}': in_channels {}, out_channels {} and kernel {} must be >= 1 and the channels "
        "multiples of groups {}",
        this->name(), in_channels, out_channels, kernel, groups));
  }
  weight_ = parameter("weight", {out_channels, in_channels / groups, kernel, kernel},
                      Initializer::kaiming_normal());
  if (bias) {
    // torch.nn.Conv2d's bias default: U(-1/sqrt(fan_in), 1/sqrt(fan_in)).
    const auto bound = static_cast<float>(
        1.0 / std::sqrt(static_cast<double>(in_channels / groups * kernel * kernel)));
    bias_ = parameter("bias", {out_channels}, Initializer::uniform(-bound, bound));
  }
}

Tensor Conv2d::forward(const Tensor& x) const {
  return ops::conv2d(x, weight_, bias_, options_);
}

}  // namespace rig::nn
