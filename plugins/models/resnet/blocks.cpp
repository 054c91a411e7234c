#include "blocks.hpp"

#include <cmath>

namespace rig_resnet {

namespace ops = rig::ops;
using rig::Tensor;

namespace {

std::string join(const std::string& name, const char* local) {
  return name + "." + local;
}

rig::nn::BatchNorm2d make_batch_norm(rig::ParameterStore& store, const std::string& name,
                                     std::int64_t channels, bool zero_gamma = false) {
  // torch.nn.BatchNorm2d's defaults: momentum 0.1, eps 1e-5.
  return rig::nn::BatchNorm2d(store, name, channels, 0.1F, 1e-5F, zero_gamma);
}

}  // namespace

Tensor batch_norm(const rig::nn::BatchNorm2d& bn, const Tensor& x, bool channels_last, bool relu,
                  bool training) {
  if (!channels_last) return relu ? bn.forward_relu(x, training) : bn.forward(x, training);
  const Tensor rows = x.reshape({-1, x.size(3)});
  return (relu ? bn.forward_relu(rows, training) : bn.forward(rows, training)).reshape(x.shape());
}

Tensor batch_norm_add_relu(const rig::nn::BatchNorm2d& bn, const Tensor& x, const Tensor& residual,
                           bool channels_last, bool training) {
  if (!channels_last) return bn.forward_add_relu(x, residual, training);
  const std::int64_t c = x.size(3);
  return bn.forward_add_relu(x.reshape({-1, c}), residual.reshape({-1, c}), training)
      .reshape(x.shape());
}

Tensor batch_norm_add_batch_norm_relu(const rig::nn::BatchNorm2d& bn, const Tensor& x,
                                      const rig::nn::BatchNorm2d& shortcut_bn,
                                      const Tensor& shortcut_x, bool channels_last, bool training) {
  if (!channels_last) return bn.forward_add_relu(x, shortcut_bn, shortcut_x, training);
  const std::int64_t c = x.size(3);
  return bn.forward_add_relu(x.reshape({-1, c}), shortcut_bn, shortcut_x.reshape({-1, c}), training)
      .reshape(x.shape());
}

Conv::Conv(rig::ParameterStore& store, const std::string& name, std::int64_t in, std::int64_t out,
           std::int64_t kernel, std::int64_t stride, std::int64_t pad, bool channels_last) {
  options_.stride_h = options_.stride_w = stride;
  options_.pad_h = options_.pad_w = pad;
  options_.channels_last = channels_last;
  const auto std = static_cast<float>(std::sqrt(2.0 / static_cast<double>(out * kernel * kernel)));
  weight_ = store.declare(name + ".weight", {out, in, kernel, kernel},
                          rig::Initializer::normal(0.0F, std));
}

Tensor Conv::forward(const Tensor& x) const {
  return ops::conv2d(x, weight_, {}, options_);
}

Block::Block(rig::ParameterStore& store, const std::string& name, const Architecture& arch,
             std::int64_t in, std::int64_t width, std::int64_t stride, bool zero_init_residual)
    : channels_last_(arch.channels_last),
      in_(in),
      out_(arch.block == BlockKind::bottleneck ? width * 4 : width),
      stride_(stride),
      // Basic: 3x3 (stride) + 3x3. Bottleneck v1.5: 1x1 + 3x3 (stride) + 1x1.
      conv1_(store, join(name, "conv1"), in, width, arch.block == BlockKind::basic ? 3 : 1,
             arch.block == BlockKind::basic ? stride : 1, arch.block == BlockKind::basic ? 1 : 0,
             channels_last_),
      bn1_(make_batch_norm(store, join(name, "bn1"), width)),
      conv2_(store, join(name, "conv2"), width, width, 3,
             arch.block == BlockKind::basic ? 1 : stride, 1, channels_last_),
      bn2_(make_batch_norm(store, join(name, "bn2"), width,
                           zero_init_residual && arch.block == BlockKind::basic)) {
  if (arch.block == BlockKind::bottleneck) {
    conv3_.emplace(store, join(name, "conv3"), width, out_, 1, 1, 0, channels_last_);
    bn3_.emplace(make_batch_norm(store, join(name, "bn3"), out_, zero_init_residual));
  }
  if ((stride != 1 || in != out_) && arch.shortcut == Shortcut::projection) {
    downsample_conv_.emplace(store, join(name, "downsample.0"), in, out_, 1, stride, 0,
                             channels_last_);
    downsample_bn_.emplace(make_batch_norm(store, join(name, "downsample.1"), out_));
  }
}

Tensor Block::shortcut(const Tensor& x) const {
  if (stride_ == 1 && in_ == out_) return x;
  // Option A: x[:, :, ::stride, ::stride], zero channels added on both sides.
  const std::int64_t row_axis = channels_last_ ? 1 : 2;
  const std::int64_t channel_axis = channels_last_ ? 3 : 1;
  Tensor sub = x;
  if (stride_ != 1) {
    sub = x.slice(row_axis, 0, x.size(row_axis), stride_)
              .slice(row_axis + 1, 0, x.size(row_axis + 1), stride_);
  }
  const std::int64_t before = (out_ - in_) / 2;
  const std::int64_t after = out_ - in_ - before;
  const auto zeros = [&](std::int64_t channels) {
    rig::Shape shape = sub.shape();
    shape[static_cast<std::size_t>(channel_axis)] = channels;
    return Tensor::zeros(shape, x.dtype(), x.device());
  };
  if (before == 0) return ops::concat({sub, zeros(after)}, channel_axis);
  return ops::concat({zeros(before), sub, zeros(after)}, channel_axis);
}

Tensor Block::forward(const Tensor& x, bool training) const {
  Tensor h = batch_norm(bn1_, conv1_.forward(x), channels_last_, true, training);
  if (conv3_) h = batch_norm(bn2_, conv2_.forward(h), channels_last_, true, training);
  // The last batch norm, the shortcut's add and the relu: one op, with a
  // projection shortcut's batch norm too.
  const Conv& last_conv = conv3_ ? *conv3_ : conv2_;
  const rig::nn::BatchNorm2d& last_bn = conv3_ ? *bn3_ : bn2_;
  if (downsample_conv_) {
    const Tensor projected = downsample_conv_->forward(x);
    return batch_norm_add_batch_norm_relu(last_bn, last_conv.forward(h), *downsample_bn_, projected,
                                          channels_last_, training);
  }
  const Tensor shortcut_out = shortcut(x);
  return batch_norm_add_relu(last_bn, last_conv.forward(h), shortcut_out, channels_last_, training);
}

}  // namespace rig_resnet
