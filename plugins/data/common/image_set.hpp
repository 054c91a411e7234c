// A labelled image set held in memory (uint8 pixels [N, C, H, W], int64
// labels), and the data layer every small-image plugin builds on it: the
// shared epoch sampler, normalised and (in train mode) augmented float
// batches, class-id decoding and interactive input of raw pixel values.
// Each plugin only reads its files into an ImageSet.
#pragma once

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "epoch_sampler.hpp"
#include "line_input.hpp"
#include "rig/error.hpp"
#include "rig/plugin.hpp"
#include "small_image_augment.hpp"

namespace rig_data {

struct ImageSet {
  std::int64_t channels = 0;
  std::int64_t height = 0;
  std::int64_t width = 0;
  std::vector<std::uint8_t> pixels;  // [N, C, H, W]
  std::vector<std::int64_t> labels;  // [N]

  std::int64_t size() const { return static_cast<std::int64_t>(labels.size()); }
  std::int64_t image_size() const { return channels * height * width; }
  const std::uint8_t* image(std::int64_t i) const { return pixels.data() + i * image_size(); }
  // Keeps the first n samples (all when n is 0 or at least size()).
  void keep_first(std::int64_t n) {
    if (n <= 0 || n >= size()) return;
    labels.resize(static_cast<std::size_t>(n));
    pixels.resize(static_cast<std::size_t>(n * image_size()));
    labels.shrink_to_fit();
    pixels.shrink_to_fit();
  }
};

// A label must name one of the classes.
inline void check_label(const std::string& plugin, const std::string& file, std::int64_t record,
                        std::int64_t label, std::int64_t num_classes) {
  if (label < 0 || label >= num_classes) {
    throw rig::UserError(fmt::format(
        "{}: {}: record {} has label {}, outside the {} classes (labels 0..{}); is num_classes "
        "right?",
        plugin, file, record, label, num_classes, num_classes - 1));
  }
}

// A data file named by parameter `key` must exist; `hint` says where it comes from.
inline void require_file(const std::string& plugin, const std::string& key, const std::string& path,
                         const std::string& hint) {
  std::error_code error;
  if (std::filesystem::is_regular_file(path, error)) return;
  throw rig::UserError(fmt::format("{}: {}: file {} not found{}", plugin, key, path,
                                   hint.empty() ? "" : "; " + hint));
}

// The data layer over an in-memory ImageSet. Batches: "images" f32 [n, C, H, W]
// (normalised; in train mode randomly cropped from the padded image and
// flipped), "labels" i64 [n].
class ImageSetLayer : public rig::DataLayer {
 public:
  ImageSetLayer(const std::string& plugin, ImageSet set, std::int64_t num_classes,
                PixelNormaliser normaliser, Augment augment, std::uint64_t seed,
                const rig::DataLayerContext& ctx)
      : plugin_(plugin),
        set_(std::move(set)),
        num_classes_(num_classes),
        normaliser_(std::move(normaliser)),
        train_(ctx.run.mode == rig::Mode::train),
        augment_(train_ ? augment : Augment{}),
        seed_(seed),
        sampler_(plugin_, checked_size(), seed_, train_, ctx.batch_size, ctx.run.rank,
                 ctx.run.world_size) {
    if (normaliser_.channels() != set_.channels) {
      throw rig::UserError(
          fmt::format("{}: mean and std have {} value(s) but the images have {} channel(s); give "
                      "one per channel",
                      plugin_, normaliser_.channels(), set_.channels));
    }
  }

  YAML::Node info() const override {
    YAML::Node info;
    info["task"] = "classification";
    info["num_classes"] = num_classes_;
    info["channels"] = set_.channels;
    info["height"] = set_.height;
    info["width"] = set_.width;
    info["num_samples"] = set_.size();
    return info;
  }

  std::int64_t epoch_size() const override { return set_.size(); }
  void start_epoch(std::int64_t epoch) override { sampler_.start_epoch(epoch); }

  std::optional<rig::Batch> next_batch() override {
    auto indices = sampler_.next();
    if (!indices) return std::nullopt;
    return make_batch(std::move(*indices), sampler_.epoch());
  }

  YAML::Node position() const override { return sampler_.position(); }
  void seek(const YAML::Node& position) override { sampler_.seek(position); }

  // The batch of the given data-set samples in `epoch` (whose draws it uses).
  rig::Batch make_batch(std::vector<std::int64_t> indices, std::int64_t epoch) const {
    const auto rows = static_cast<std::int64_t>(indices.size());
    const std::int64_t size = set_.image_size();
    rig::Tensor images = rig::Tensor::empty({rows, set_.channels, set_.height, set_.width});
    rig::Tensor labels = rig::Tensor::empty({rows}, rig::DType::i64);
    float* x = images.data<float>();
    std::int64_t* y = labels.data<std::int64_t>();
    const bool augmenting = augment_.pad > 0 || augment_.flip;
    for (std::int64_t r = 0; r < rows; ++r) {
      const std::int64_t s = indices[static_cast<std::size_t>(r)];
      const CropFlip draw = augmenting ? draw_crop_flip(augment_, seed_, epoch, s) : CropFlip{};
      render_image(set_.image(s), set_.channels, set_.height, set_.width, normaliser_, augment_.pad,
                   draw, x + r * size);
      y[r] = set_.labels[static_cast<std::size_t>(s)];
    }
    rig::Batch batch;
    batch.num_objects = rows;
    batch.indices = std::move(indices);
    batch.tensors["images"] = std::move(images);
    batch.tensors["labels"] = std::move(labels);
    return batch;
  }

  // One line per sample: the predicted class id (predictions i64 [n]).
  std::vector<std::string> decode(const rig::Batch& batch,
                                  const rig::Tensor& predictions) const override {
    const auto rows = static_cast<std::int64_t>(batch.indices.size());
    if (predictions.dtype() != rig::DType::i64 || predictions.dim() != 1 ||
        predictions.size(0) != rows) {
      throw std::invalid_argument(
          fmt::format("{}: expected class ids i64 [{}] to decode, got {} {}", plugin_, rows,
                      rig::dtype_name(predictions.dtype()), rig::to_string(predictions.shape())));
    }
    const auto* p = predictions.data<std::int64_t>();
    std::vector<std::string> lines;
    lines.reserve(static_cast<std::size_t>(rows));
    for (std::int64_t i = 0; i < rows; ++i) lines.push_back(std::to_string(p[i]));
    return lines;
  }

  // The label of each sample; empty for a batch made from typed lines.
  std::vector<std::string> decode_targets(const rig::Batch& batch) const override {
    std::vector<std::string> lines;
    if (batch.tensors.find("labels") == batch.tensors.end()) return lines;
    lines.reserve(batch.indices.size());
    for (const auto s : batch.indices) {
      lines.push_back(std::to_string(set_.labels[static_cast<std::size_t>(s)]));
    }
    return lines;
  }

  // Each line: C*H*W pixel values in 0..255 (channel-major, then rows),
  // separated by spaces or commas. Normalised like eval, never augmented.
  rig::Batch encode_lines(const std::vector<std::string>& lines) const override {
    const auto rows = static_cast<std::int64_t>(lines.size());
    const std::int64_t size = set_.image_size();
    const std::int64_t plane = set_.height * set_.width;
    rig::Tensor images = rig::Tensor::empty({rows, set_.channels, set_.height, set_.width});
    float* x = images.data<float>();
    for (std::int64_t r = 0; r < rows; ++r) {
      read_line_numbers(
          lines[static_cast<std::size_t>(r)], size,
          [&](std::int64_t i, const std::string& word) {
            x[r * size + i] = normaliser_(i / plane, parse_pixel(word));
          },
          [&](std::int64_t count) {
            return fmt::format(
                "{}: expected {} pixel values (0..255, {} channel(s) of {}x{}) separated by "
                "spaces or commas, got {}",
                plugin_, size, set_.channels, set_.height, set_.width,
                count < size ? fmt::format("{}", count) : "more");
          });
    }
    return typed_batch("images", std::move(images), rows);
  }

 private:
  std::int64_t checked_size() const {
    if (set_.size() == 0) throw rig::UserError(fmt::format("{}: the data set is empty", plugin_));
    return set_.size();
  }

  double parse_pixel(const std::string& word) const {
    double value = -1.0;
    try {
      std::size_t used = 0;
      value = std::stod(word, &used);
      if (used != word.size()) value = -1.0;
    } catch (const std::exception&) {
      value = -1.0;
    }
    if (!(value >= 0.0 && value <= 255.0)) {
      throw rig::UserError(
          fmt::format("{}: '{}' is not a pixel value (a number from 0 to 255)", plugin_, word));
    }
    return value;
  }

  std::string plugin_;
  ImageSet set_;
  std::int64_t num_classes_;
  PixelNormaliser normaliser_;
  bool train_;
  Augment augment_;  // none outside train mode
  std::uint64_t seed_;
  EpochSampler sampler_;
};

}  // namespace rig_data
