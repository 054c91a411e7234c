// Position-wise feed-forward block: inner (fused activation), dropout, outer.
#include <utility>

#include "rig/nn.hpp"

namespace rig::nn {

FeedForward::FeedForward(ParameterStore& store, std::string name, std::int64_t model_dim,
                         std::int64_t hidden_dim, ops::Activation activation, float dropout)
    : Module(store, std::move(name)),
      activation_(activation),
      dropout_(child("dropout"), dropout),
      inner_(store, child("inner"), model_dim, hidden_dim),
      outer_(store, child("outer"), hidden_dim, model_dim) {}

Tensor FeedForward::forward(const Tensor& x, bool training, const RandomKey& key) const {
  if (activation_ == ops::Activation::relu) {
    // Dropout fused into the inner layer, its 1 / (1 - p) applied by the
    // outer layer's products (an unscaled OutputDropout).
    return ops::relu_feed_forward(x, inner_.weight(), inner_.bias(), outer_.weight(), outer_.bias(),
                                  dropout_.as_output_dropout(training, key, false),
                                  dropout_.keep_scale(training));
  }
  return outer_.forward(dropout_.forward(inner_.forward(x, activation_), training, key));
}

}  // namespace rig::nn
