// The layers of a ResNet, named as torchvision names them: a bias-free
// convolution ("<name>.weight"), residual blocks (conv1/bn1, conv2/bn2[,
// conv3/bn3], downsample.0 / downsample.1) and the stem (conv1, bn1).
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "architecture.hpp"
#include "rig/nn.hpp"
#include "rig/ops.hpp"
#include "rig/parameter_store.hpp"
#include "rig/tensor.hpp"

namespace rig_resnet {

// A convolution without bias, initialised as torchvision's ResNet:
// kaiming_normal_(mode="fan_out", nonlinearity="relu"), N(0, sqrt(2 / (out k k))).
class Conv {
 public:
  Conv(rig::ParameterStore& store, const std::string& name, std::int64_t in, std::int64_t out,
       std::int64_t kernel, std::int64_t stride, std::int64_t pad, bool channels_last);
  rig::Tensor forward(const rig::Tensor& x) const;

 private:
  rig::ops::Conv2dOptions options_;
  rig::Tensor weight_;
};

// A batch norm (then relu when `relu`) of NCHW x, or of NHWC x as the
// [N H W, C] rows it is (channels last).
rig::Tensor batch_norm(const rig::nn::BatchNorm2d& bn, const rig::Tensor& x, bool channels_last,
                       bool relu, bool training);
// relu(batch norm of x + residual), of either layout: a block's end.
rig::Tensor batch_norm_add_relu(const rig::nn::BatchNorm2d& bn, const rig::Tensor& x,
                                const rig::Tensor& residual, bool channels_last, bool training);

// One residual block: basic (two 3x3 convs) or bottleneck (1x1, 3x3 with the
// stride, 1x1 to width x 4), with its shortcut.
class Block {
 public:
  Block(rig::ParameterStore& store, const std::string& name, const Architecture& arch,
        std::int64_t in, std::int64_t width, std::int64_t stride, bool zero_init_residual);
  rig::Tensor forward(const rig::Tensor& x, bool training) const;
  std::int64_t out_channels() const { return out_; }

 private:
  // The identity or option A's zero-padded shortcut (a projection's conv and
  // batch norm are part of forward's last op).
  rig::Tensor shortcut(const rig::Tensor& x) const;

  bool channels_last_;
  std::int64_t in_;
  std::int64_t out_;
  std::int64_t stride_;
  Conv conv1_;
  rig::nn::BatchNorm2d bn1_;
  Conv conv2_;
  rig::nn::BatchNorm2d bn2_;
  std::optional<Conv> conv3_;  // bottleneck only
  std::optional<rig::nn::BatchNorm2d> bn3_;
  std::optional<Conv> downsample_conv_;  // projection shortcut when the shape changes
  std::optional<rig::nn::BatchNorm2d> downsample_bn_;
};

}  // namespace rig_resnet
