// BatchNorm2d: weight/bias trainable, running statistics as store buffers
// (checkpointed, never given gradients); updated in place while training.
#include <stdexcept>
#include <utility>

#include <fmt/format.h>

#include "rig/nn.hpp"

namespace rig::nn {

BatchNorm2d::BatchNorm2d(ParameterStore& store, std::string name, std::int64_t channels,
                         float momentum, float eps, bool zero_init_gamma)
    : Module(store, std::move(name)), momentum_(momentum), eps_(eps) {
  if (channels < 1) {
    throw std::invalid_argument(
        fmt::format("BatchNorm2d '{}': channels {} must be >= 1", this->name(), channels));
  }
  gamma_ =
      parameter("weight", {channels}, zero_init_gamma ? Initializer::zeros() : Initializer::ones());
  beta_ = parameter("bias", {channels}, Initializer::zeros());
  running_mean_ = buffer("running_mean", {channels}, Initializer::zeros());
  running_var_ = buffer("running_var", {channels}, Initializer::ones());
}

Tensor BatchNorm2d::forward(const Tensor& x, bool training) const {
  const ops::BatchNormParams p = params(training);
  return ops::batch_norm(x, p.gamma, p.beta, p.running_mean, p.running_var, training, momentum_,
                         eps_);
}

Tensor BatchNorm2d::forward_relu(const Tensor& x, bool training) const {
  const ops::BatchNormParams p = params(training);
  return ops::batch_norm_relu(x, p.gamma, p.beta, p.running_mean, p.running_var, training,
                              momentum_, eps_);
}

Tensor BatchNorm2d::forward_add_relu(const Tensor& x, const Tensor& residual, bool training) const {
  const ops::BatchNormParams p = params(training);
  return ops::batch_norm_add_relu(x, residual, p.gamma, p.beta, p.running_mean, p.running_var,
                                  training, momentum_, eps_);
}

Tensor BatchNorm2d::forward_add_relu(const Tensor& x, const BatchNorm2d& shortcut,
                                     const Tensor& shortcut_x, bool training) const {
  return ops::batch_norm_add_batch_norm_relu(x, params(training), shortcut_x,
                                             shortcut.params(training), training);
}

ops::BatchNormParams BatchNorm2d::params(bool training) const {
  // A segment's second run (nn::recompute) normalises with the batch's
  // statistics as the first did, but the running ones moved once already.
  if (training && recomputing()) return {gamma_, beta_, Tensor(), Tensor(), momentum_, eps_};
  return {gamma_, beta_, running_mean_, running_var_, momentum_, eps_};
}

}  // namespace rig::nn
