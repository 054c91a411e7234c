// Dropout: a no-op in eval mode or with p = 0; otherwise ops::dropout on the
// stream key.derive(name), so every dropout site has its own mask.
#include <stdexcept>
#include <utility>

#include <fmt/format.h>

#include "rig/nn.hpp"

namespace rig::nn {

Dropout::Dropout(std::string name, float p) : name_(std::move(name)), p_(p) {
  if (!(p >= 0.0F && p < 1.0F)) {
    throw std::invalid_argument(
        fmt::format("Dropout '{}': probability {} must be in [0, 1)", name_, p));
  }
}

Tensor Dropout::forward(const Tensor& x, bool training, const RandomKey& key) const {
  if (!training || p_ == 0.0F) return x;
  return ops::dropout(x, p_, key.derive(name_));
}

Tensor Dropout::forward_added_to(const Tensor& residual, const Tensor& x, bool training,
                                 const RandomKey& key, const Tensor& row_scale) const {
  if (!training || p_ == 0.0F) {
    return ops::add(residual, row_scale.defined() ? ops::mul(x, row_scale) : x);
  }
  return ops::dropout_add(residual, x, p_, key.derive(name_), row_scale);
}

ops::OutputDropout Dropout::as_output_dropout(bool training, const RandomKey& key,
                                              bool scaled) const {
  if (!training || p_ == 0.0F) return {};
  return {p_, key.derive(name_), scaled};
}

float Dropout::keep_scale(bool training) const {
  if (!training || p_ == 0.0F) return 1.0F;
  return p_ < 1.0F ? 1.0F / (1.0F - p_) : 0.0F;
}

}  // namespace rig::nn
