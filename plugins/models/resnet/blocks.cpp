#include "blocks.hpp"

#include <cmath>

namespace rig_resnet {

namespace ops = rig::ops;
using rig::Tensor;

namespace {

std::string join(const std::string& name, const char* local) {
  return name + "." + local;
}

rig::nn::BatchNorm2d batch_norm(rig::ParameterStore& store, const std::string& name,
                                std::int64_t channels, bool zero_gamma = false) {
  // torch.nn.BatchNorm2d's defaults: momentum 0.1, eps 1e-5.
  return rig::nn::BatchNorm2d(store, name, channels, 0.1F, 1e-5F, zero_gamma);
}

}  // namespace

Conv::Conv(rig::ParameterStore& store, const std::string& name, std::int64_t in, std::int64_t out,
           std::int64_t kernel, std::int64_t stride, std::int64_t pad) {
  options_.stride_h = options_.stride_w = stride;
  options_.pad_h = options_.pad_w = pad;
  const auto std = static_cast<float>(std::sqrt(2.0 / static_cast<double>(out * kernel * kernel)));
  weight_ = store.declare(name + ".weight", {out, in, kernel, kernel},
                          rig::Initializer::normal(0.0F, std));
}

Tensor Conv::forward(const Tensor& x) const {
  return ops::conv2d(x, weight_, {}, options_);
}

Block::Block(rig::ParameterStore& store, const std::string& name, BlockKind kind, Shortcut shortcut,
             std::int64_t in, std::int64_t width, std::int64_t stride, bool zero_init_residual)
    : in_(in),
      out_(kind == BlockKind::bottleneck ? width * 4 : width),
      stride_(stride),
      // Basic: 3x3 (stride) + 3x3. Bottleneck v1.5: 1x1 + 3x3 (stride) + 1x1.
      conv1_(store, join(name, "conv1"), in, width, kind == BlockKind::basic ? 3 : 1,
             kind == BlockKind::basic ? stride : 1, kind == BlockKind::basic ? 1 : 0),
      bn1_(batch_norm(store, join(name, "bn1"), width)),
      conv2_(store, join(name, "conv2"), width, width, 3, kind == BlockKind::basic ? 1 : stride, 1),
      bn2_(batch_norm(store, join(name, "bn2"), width,
                      zero_init_residual && kind == BlockKind::basic)) {
  if (kind == BlockKind::bottleneck) {
    conv3_.emplace(store, join(name, "conv3"), width, out_, 1, 1, 0);
    bn3_.emplace(batch_norm(store, join(name, "bn3"), out_, zero_init_residual));
  }
  if ((stride != 1 || in != out_) && shortcut == Shortcut::projection) {
    downsample_conv_.emplace(store, join(name, "downsample.0"), in, out_, 1, stride, 0);
    downsample_bn_.emplace(batch_norm(store, join(name, "downsample.1"), out_));
  }
}

Tensor Block::shortcut(const Tensor& x, bool training) const {
  if (downsample_conv_) return downsample_bn_->forward(downsample_conv_->forward(x), training);
  if (stride_ == 1 && in_ == out_) return x;
  // Option A: x[:, :, ::stride, ::stride], zero channels added on both sides.
  Tensor sub = x;
  if (stride_ != 1) sub = x.slice(2, 0, x.size(2), stride_).slice(3, 0, x.size(3), stride_);
  const std::int64_t before = (out_ - in_) / 2;
  const std::int64_t after = out_ - in_ - before;
  const auto zeros = [&](std::int64_t channels) {
    return Tensor::zeros({sub.size(0), channels, sub.size(2), sub.size(3)}, x.dtype(), x.device());
  };
  if (before == 0) return ops::concat({sub, zeros(after)}, 1);
  return ops::concat({zeros(before), sub, zeros(after)}, 1);
}

Tensor Block::forward(const Tensor& x, bool training) const {
  Tensor h = bn1_.forward_relu(conv1_.forward(x), training);
  if (conv3_) {
    h = bn2_.forward_relu(conv2_.forward(h), training);
    h = bn3_->forward(conv3_->forward(h), training);
  } else {
    h = bn2_.forward(conv2_.forward(h), training);
  }
  return ops::add_relu(h, shortcut(x, training));
}

}  // namespace rig_resnet
