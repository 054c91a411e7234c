// resnet: residual networks for image classification (He et al. 2016), in the
// CIFAR style (ResNet-20/32/56/110) and torchvision's ImageNet style
// (resnet18/34/50/101), with torchvision's parameter names. It computes in the
// run's dtype (the f32 images are cast to it); the loss is f32.
#include <algorithm>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "architecture.hpp"
#include "blocks.hpp"
#include "rig/error.hpp"
#include "rig/nn.hpp"
#include "rig/ops.hpp"
#include "rig/plugin.hpp"

namespace {

using rig::Tensor;
namespace ops = rig::ops;
using rig_resnet::Architecture;
using rig_resnet::Block;
using rig_resnet::Conv;

std::int64_t info_int(const YAML::Node& info, const char* key) {
  const YAML::Node value = info[key];
  if (!value) {
    throw rig::UserError(fmt::format(
        "model 'resnet': the data layer does not say '{}' in its info(); resnet needs channels "
        "and num_classes (an image classification data layer)",
        key));
  }
  const auto n = value.as<std::int64_t>();
  if (n < 1) {
    throw rig::UserError(
        fmt::format("model 'resnet': data layer info {} = {} must be >= 1", key, n));
  }
  return n;
}

class Resnet final : public rig::Model {
 public:
  Resnet(const YAML::Node& params, const rig::ModelContext& ctx)
      : arch_(rig_resnet::architecture(params["style"].as<std::string>(),
                                       params["depth"].as<std::int64_t>(),
                                       params["shortcut"].as<std::string>(),
                                       params["data_format"].as<std::string>() == "channels_last")),
        channels_(info_int(ctx.data_info, "channels")),
        num_classes_(info_int(ctx.data_info, "num_classes")),
        label_smoothing_(params["label_smoothing"].as<float>()),
        recompute_(params["recompute_activations"].as<bool>()),
        dtype_(ctx.run.dtype),
        conv1_(ctx.params, "conv1", channels_, arch_.stem_width, arch_.imagenet_stem ? 7 : 3,
               arch_.imagenet_stem ? 2 : 1, arch_.imagenet_stem ? 3 : 1, arch_.channels_last),
        bn1_(ctx.params, "bn1", arch_.stem_width),
        blocks_(make_blocks(ctx.params, arch_, params["zero_init_residual"].as<bool>())),
        fc_(ctx.params, "fc", arch_.features(), num_classes_) {
    const YAML::Node task = ctx.data_info["task"];
    if (task && task.as<std::string>() != "classification") {
      throw rig::UserError(
          fmt::format("model 'resnet': the data layer's task is '{}'; resnet needs classification",
                      task.as<std::string>()));
    }
    if (!rig::is_floating(dtype_)) {
      throw std::invalid_argument(
          fmt::format("resnet: compute dtype {} is not floating", rig::dtype_name(dtype_)));
    }
  }

  rig::ModelOutput forward(const rig::Batch& batch, rig::Mode mode) override {
    std::optional<rig::NoGradGuard> no_grad;
    if (mode != rig::Mode::train) no_grad.emplace();
    const Tensor& images = batch.at("images");
    const Tensor& labels = batch.at("labels");
    check_images(images);
    check_labels(batch, labels, images.size(0));  // before any work
    const Tensor logits = compute(images, mode == rig::Mode::train);
    rig::ModelOutput result;
    result.loss = ops::cross_entropy(logits, labels, label_smoothing_);
    if (mode == rig::Mode::eval) add_metrics(result, logits, labels);  // training reads nothing
    return result;
  }

  Tensor infer(const rig::Batch& batch) override {
    rig::NoGradGuard no_grad;
    return ops::argmax(compute(batch.at("images"), false));
  }

 private:
  // layer<s>.<b> for stage s (from 1) and block b (from 0), declared after the
  // stem and before fc, in torchvision's order.
  static std::vector<Block> make_blocks(rig::ParameterStore& store, const Architecture& arch,
                                        bool zero_init_residual) {
    std::vector<Block> blocks;
    std::int64_t in = arch.stem_width;
    for (std::size_t s = 0; s < arch.stages.size(); ++s) {
      const rig_resnet::Stage& stage = arch.stages[s];
      for (std::int64_t b = 0; b < stage.blocks; ++b) {
        blocks.emplace_back(store, fmt::format("layer{}.{}", s + 1, b), arch, in, stage.width,
                            b == 0 ? stage.stride : 1, zero_init_residual);
        in = blocks.back().out_channels();
      }
    }
    return blocks;
  }

  void check_images(const Tensor& images) const {
    if (images.dtype() != rig::DType::f32 || images.dim() != 4 || images.size(1) != channels_) {
      throw std::invalid_argument(fmt::format(
          "resnet: images {} {}, expected f32 [batch,{},height,width] (channels from the data "
          "layer's info())",
          rig::dtype_name(images.dtype()), rig::to_string(images.shape()), channels_));
    }
  }

  // Logits [N, num_classes] in the compute dtype.
  Tensor compute(const Tensor& images, bool training) const {
    check_images(images);
    const bool last = arch_.channels_last;
    // Channels last: the images are transposed to [N, H, W, C] once, in the cast.
    const Tensor x =
        last ? images.permute({0, 2, 3, 1}).to(dtype_).contiguous() : images.to(dtype_);
    Tensor h = rig_resnet::batch_norm(bn1_, conv1_.forward(x), last, true, training);
    if (arch_.imagenet_stem) h = ops::max_pool2d(h, {3, 3, 2, 2, 1, 1, last});
    for (const Block& block : blocks_) {
      if (recompute_ && training) {
        h = rig::nn::recompute(
            [&block](const rig::TensorList& in) { return block.forward(in[0], true); }, {h});
      } else {
        h = block.forward(h, training);
      }
    }
    return fc_.forward(ops::global_avg_pool2d(h, last));
  }

  void check_labels(const rig::Batch& batch, const Tensor& labels, std::int64_t rows) const {
    if (labels.dtype() != rig::DType::i64 || labels.dim() != 1 || labels.size(0) != rows) {
      throw std::invalid_argument(fmt::format("resnet: labels {} {}, expected i64 [{}]",
                                              rig::dtype_name(labels.dtype()),
                                              rig::to_string(labels.shape()), rows));
    }
    // On the host copy the engine keeps of a moved batch: no device read.
    const std::vector<std::int64_t> y = batch.host("labels").to_int_vector();
    for (std::int64_t i = 0; i < rows; ++i) {
      const auto yi = y[static_cast<std::size_t>(i)];
      if (yi >= 0 && yi < num_classes_) continue;
      const std::string index =
          static_cast<std::size_t>(i) < batch.indices.size()
              ? fmt::format(" (data-set index {})", batch.indices[static_cast<std::size_t>(i)])
              : "";
      throw rig::UserError(fmt::format(
          "model 'resnet': label {} at batch position {}{} is outside [0, {}): the data layer "
          "says num_classes {}",
          yi, i, index, num_classes_, num_classes_));
    }
  }

  // The loss, Acc@1 and (with 5 or more classes) Acc@5, as {sum, samples},
  // counted on the device and read back together.
  void add_metrics(rig::ModelOutput& result, const Tensor& logits, const Tensor& labels) const {
    const std::int64_t rows = logits.size(0);
    const std::int64_t k = std::min<std::int64_t>(5, num_classes_);
    const Tensor top = ops::topk(logits.detach(), k).second;  // i64 [rows, k]
    // At most one of a row's k predictions is its label.
    const Tensor hits = ops::equal(top, labels.reshape({rows, 1})).to(rig::DType::f32);
    const std::vector<float> numbers =
        ops::concat({result.loss.detach().reshape({1}), ops::sum(hits.slice(1, 0, 1)).reshape({1}),
                     ops::sum(hits).reshape({1})},
                    0)
            .to_vector();
    const auto n = static_cast<double>(rows);
    result.metrics["loss"] = {static_cast<double>(numbers[0]) * n, n};
    result.metrics["Acc@1"] = {static_cast<double>(numbers[1]), n};
    if (num_classes_ >= 5) result.metrics["Acc@5"] = {static_cast<double>(numbers[2]), n};
  }

  Architecture arch_;
  std::int64_t channels_;
  std::int64_t num_classes_;
  float label_smoothing_;
  bool recompute_;  // training's residual blocks through rig::nn::recompute
  rig::DType dtype_;
  Conv conv1_;
  rig::nn::BatchNorm2d bn1_;
  std::vector<Block> blocks_;
  rig::nn::Linear fc_;
};

}  // namespace

RIG_PLUGIN(
    model, "resnet", "0.1.0",
    "ResNet image classifier: CIFAR-style ResNet-20/32/56/110, torchvision ResNet-18/34/50/101",
    Resnet)
