// synthetic_images: random image-classification batches for benchmarking
// image models (resnet) without reading a data set. The batch is that of the
// image data layers: "images" f32 [n, C, H, W], 8-bit pixels normalised as
// (pixel / 255 - mean[c]) / std[c], and "labels" i64 [n]. Sample i's pixels
// and label depend only on (seed, random_seed, i), never on the mode, the
// epoch, the batch or the rank. The order, sharding and resuming are the
// shared EpochSampler's. With prefetch on, the next batch is filled on a
// background thread while the model trains on this one (as image_folder's
// workers do): the engine reads a batch, then runs the step to its end.
#include <bit>
#include <cstdint>
#include <cstring>
#include <future>
#include <optional>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "../common/epoch_sampler.hpp"
#include "rig/error.hpp"
#include "rig/plugin.hpp"

namespace {

constexpr const char* kPlugin = "synthetic_images";
constexpr std::uint64_t kPixels = 104;  // stream purposes
constexpr std::uint64_t kLabels = 105;

// The per-channel values of `key` (mean or std): one for every channel, or one per channel.
std::vector<double> per_channel(const YAML::Node& params, const char* key, std::int64_t channels) {
  auto values = params[key].as<std::vector<double>>();
  if (values.size() == 1) values.assign(static_cast<std::size_t>(channels), values.front());
  if (static_cast<std::int64_t>(values.size()) != channels) {
    throw rig::UserError(fmt::format(
        "{}: {} has {} values but channels is {}; give one value for every channel or one per "
        "channel (the defaults are ImageNet's R, G, B)",
        kPlugin, key, values.size(), channels));
  }
  return values;
}

class SyntheticImages final : public rig::DataLayer {
 public:
  SyntheticImages(const YAML::Node& params, const rig::DataLayerContext& ctx)
      : image_size_(params["image_size"].as<std::int64_t>()),
        channels_(params["channels"].as<std::int64_t>()),
        num_classes_(params["num_classes"].as<std::int64_t>()),
        num_samples_(params["num_samples"].as<std::int64_t>()),
        seed_(rig_data::mix(params["seed"].as<std::uint64_t>()) ^ ctx.run.seed),
        prefetch_(params["prefetch"].as<bool>()),
        sampler_(kPlugin, num_samples_, seed_, ctx.run.mode == rig::Mode::train, ctx.batch_size,
                 ctx.run.rank, ctx.run.world_size) {
    const auto mean = per_channel(params, "mean", channels_);
    const auto std = per_channel(params, "std", channels_);
    for (std::size_t c = 0; c < mean.size(); ++c) {
      if (!(std[c] > 0)) {
        throw rig::UserError(fmt::format("{}: std[{}] must be > 0, got {}", kPlugin, c, std[c]));
      }
      scale_.push_back(static_cast<float>(1.0 / (255.0 * std[c])));
      shift_.push_back(static_cast<float>(-mean[c] / std[c]));
    }
  }

  YAML::Node info() const override {
    YAML::Node info;
    info["task"] = "classification";
    info["num_classes"] = num_classes_;
    info["channels"] = channels_;
    info["height"] = image_size_;
    info["width"] = image_size_;
    info["num_samples"] = num_samples_;
    return info;
  }

  std::int64_t epoch_size() const override { return num_samples_; }
  void start_epoch(std::int64_t epoch) override { sampler_.start_epoch(epoch); }
  YAML::Node position() const override { return sampler_.position(); }
  void seek(const YAML::Node& position) override { sampler_.seek(position); }

  std::optional<rig::Batch> next_batch() override {
    auto indices = sampler_.next();
    if (!indices) return std::nullopt;
    // The prefetched batch when it holds these samples (after a start_epoch
    // or seek elsewhere it does not, and is dropped), else this one made now.
    std::optional<Pending> ready = std::move(pending_);
    pending_.reset();
    if (!ready || ready->indices != *indices) {
      ready.reset();  // waits for a stale fill to end
      ready = start(std::move(*indices));
    }
    ready->filled.get();  // rethrows what the fill threw
    if (prefetch_) {
      rig_data::EpochSampler ahead = sampler_;
      if (auto next = ahead.next()) pending_ = start(std::move(*next), std::launch::async);
    }
    rig::Batch batch;
    batch.num_objects = static_cast<std::int64_t>(ready->indices.size());
    batch.indices = std::move(ready->indices);
    batch.tensors["images"] = std::move(ready->images);
    batch.tensors["labels"] = std::move(ready->labels);
    return batch;
  }

  // One line per sample: the predicted class id (predictions i64 [n]).
  std::vector<std::string> decode(const rig::Batch& batch,
                                  const rig::Tensor& predictions) const override {
    const auto rows = static_cast<std::int64_t>(batch.indices.size());
    if (predictions.dtype() != rig::DType::i64 || predictions.numel() != rows) {
      throw rig::RunError(fmt::format("{}: expected predicted class ids (i64 [{}]), got {} {}",
                                      kPlugin, rows, rig::dtype_name(predictions.dtype()),
                                      rig::to_string(predictions.shape())));
    }
    const auto* p = predictions.data<std::int64_t>();
    std::vector<std::string> lines;
    lines.reserve(static_cast<std::size_t>(rows));
    for (std::int64_t r = 0; r < rows; ++r) lines.push_back(std::to_string(p[r]));
    return lines;
  }

  std::vector<std::string> decode_targets(const rig::Batch& batch) const override {
    std::vector<std::string> lines;
    lines.reserve(batch.indices.size());
    for (const auto i : batch.indices) lines.push_back(std::to_string(label(i)));
    return lines;
  }

 private:
  // A batch being filled: its tensors are made on the caller's thread, the
  // fill writes their values (on another thread with std::launch::async).
  struct Pending {
    std::vector<std::int64_t> indices;
    rig::Tensor images;
    rig::Tensor labels;
    std::future<void> filled;
  };

  Pending start(std::vector<std::int64_t> indices,
                std::launch policy = std::launch::deferred) const {
    Pending pending;
    pending.indices = std::move(indices);
    const auto rows = static_cast<std::int64_t>(pending.indices.size());
    pending.images = rig::Tensor::empty({rows, channels_, image_size_, image_size_});
    pending.labels = rig::Tensor::empty({rows}, rig::DType::i64);
    pending.filled = std::async(
        policy, [this, samples = pending.indices.data(), rows, x = pending.images.data<float>(),
                 y = pending.labels.data<std::int64_t>()] { fill(samples, rows, x, y); });
    return pending;
  }

  // The images and labels of `rows` samples. Reads only what the constructor set.
  void fill(const std::int64_t* samples, std::int64_t rows, float* x, std::int64_t* y) const {
    const std::int64_t floats = channels_ * image_size_ * image_size_;
    std::vector<std::uint8_t> bytes(static_cast<std::size_t>(words_per_image()) * 8);
    for (std::int64_t r = 0; r < rows; ++r) {
      render(samples[r], bytes.data(), x + r * floats);
      y[r] = label(samples[r]);
    }
  }

  std::int64_t words_per_image() const { return (channels_ * image_size_ * image_size_ + 7) / 8; }

  // Sample i's label: draw i of the (seed, labels) stream, uniform in [0, num_classes).
  std::int64_t label(std::int64_t i) const {
    const rig_data::Stream stream(seed_, kLabels);
    return static_cast<std::int64_t>(
        stream.below(static_cast<std::uint64_t>(i), static_cast<std::uint64_t>(num_classes_)));
  }

  // Sample i's normalised pixels [C, H, W] into `out`. Pixel p (in C, H, W
  // order) is byte p % 8 (least significant first) of draw p / 8 of the
  // (seed, pixels, i) stream: 8 pixels per 64-bit hash, then one multiply-add
  // per pixel (a loop the compiler vectorises).
  void render(std::int64_t i, std::uint8_t* bytes, float* out) const {
    const rig_data::Stream stream(seed_, kPixels, static_cast<std::uint64_t>(i));
    const std::int64_t words = words_per_image();
    for (std::int64_t k = 0; k < words; ++k) {
      std::uint64_t word = stream.bits(static_cast<std::uint64_t>(k));
      if constexpr (std::endian::native == std::endian::big) word = __builtin_bswap64(word);
      std::memcpy(bytes + 8 * k, &word, sizeof word);
    }
    const std::int64_t plane = image_size_ * image_size_;
    for (std::int64_t c = 0; c < channels_; ++c) {
      const float scale = scale_[static_cast<std::size_t>(c)];
      const float shift = shift_[static_cast<std::size_t>(c)];
      const std::uint8_t* in = bytes + c * plane;
      float* y = out + c * plane;
      for (std::int64_t p = 0; p < plane; ++p) y[p] = static_cast<float>(in[p]) * scale + shift;
    }
  }

  std::int64_t image_size_;
  std::int64_t channels_;
  std::int64_t num_classes_;
  std::int64_t num_samples_;
  std::uint64_t seed_;
  bool prefetch_;
  std::vector<float> scale_;  // per channel: 1 / (255 std)
  std::vector<float> shift_;  // per channel: -mean / std
  rig_data::EpochSampler sampler_;
  // The next batch, being filled; last, so that it is destroyed (waiting for
  // its fill) before the members the fill reads.
  std::optional<Pending> pending_;
};

}  // namespace

RIG_PLUGIN(data_layer, "synthetic_images", "0.1.0",
           "random normalised images and labels in the image-classification batch layout, for "
           "benchmarks",
           SyntheticImages)
