// synthetic: a learnable, reproducible data set generated in memory. Gaussian
// inputs are labelled by a fixed random linear "teacher" (the argmax of its
// noisy logits, or its noisy outputs for regression). The train split and the
// held-out eval split come from different streams of the same distribution.
#include <algorithm>
#include <cmath>
#include <numbers>
#include <numeric>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "rig/error.hpp"
#include "rig/plugin.hpp"

namespace {

using rig::Tensor;

std::uint64_t mix(std::uint64_t x) {  // SplitMix64
  x += 0x9E3779B97F4A7C15ULL;
  x = (x ^ (x >> 30U)) * 0xBF58476D1CE4E5B9ULL;
  x = (x ^ (x >> 27U)) * 0x94D049BB133111EBULL;
  return x ^ (x >> 31U);
}

// Counter-based random stream: draw i depends only on (seed, purpose, index, i).
class Stream {
 public:
  enum Purpose : std::uint64_t { teacher = 1, train = 2, eval = 3, shuffle = 4 };
  Stream(std::uint64_t seed, Purpose purpose, std::uint64_t index = 0)
      : key_(mix(mix(mix(seed) ^ purpose) ^ index)) {}
  std::uint64_t bits(std::uint64_t i) const { return mix(key_ + i * 0xD1B54A32D192ED03ULL); }
  double uniform(std::uint64_t i) const {  // in (0, 1)
    return (static_cast<double>(bits(i) >> 11U) + 0.5) * 0x1.0p-53;
  }
  double normal(std::uint64_t i) const {  // Box-Muller on draws 2i and 2i+1
    const double r = std::sqrt(-2.0 * std::log(uniform(2 * i)));
    return r * std::cos(2.0 * std::numbers::pi * uniform(2 * i + 1));
  }

 private:
  std::uint64_t key_;
};

class Synthetic final : public rig::DataLayer {
 public:
  Synthetic(const YAML::Node& params, const rig::DataLayerContext& ctx)
      : classification_(params["task"].as<std::string>() == "classification"),
        num_features_(params["num_features"].as<std::int64_t>()),
        num_classes_(params["num_classes"].as<std::int64_t>()),
        num_outputs_(classification_ ? num_classes_ : params["num_outputs"].as<std::int64_t>()),
        train_(ctx.run.mode == rig::Mode::train),
        num_samples_(params[train_ ? "num_samples" : "num_eval_samples"].as<std::int64_t>()),
        seed_(mix(params["seed"].as<std::uint64_t>()) ^ ctx.run.seed),
        batch_size_(ctx.batch_size),
        rank_(ctx.run.rank),
        world_size_(ctx.run.world_size) {
    if (batch_size_ < 1) {
      throw rig::UserError(fmt::format("synthetic: batch size {} must be >= 1", batch_size_));
    }
    if (world_size_ < 1 || rank_ < 0 || rank_ >= world_size_) {
      throw std::invalid_argument(
          fmt::format("synthetic: rank {} of a world of {}", rank_, world_size_));
    }
    generate(params["noise"].as<double>());
    start_epoch(0);
  }

  YAML::Node info() const override {
    YAML::Node info;
    info["task"] = classification_ ? "classification" : "regression";
    info["num_features"] = num_features_;
    if (classification_) info["num_classes"] = num_classes_;
    info["num_outputs"] = num_outputs_;
    info["num_samples"] = num_samples_;
    return info;
  }

  std::int64_t epoch_size() const override { return num_samples_; }

  void start_epoch(std::int64_t epoch) override {
    if (epoch < 0) throw std::invalid_argument(fmt::format("synthetic: epoch {} < 0", epoch));
    epoch_ = epoch;
    offset_ = 0;
    order_.resize(static_cast<std::size_t>(num_samples_));
    std::iota(order_.begin(), order_.end(), std::int64_t{0});
    if (!train_) return;
    // Fisher-Yates from a stream keyed on (seed, epoch) only: every world size
    // sees the same global order.
    const Stream stream(seed_, Stream::shuffle, static_cast<std::uint64_t>(epoch));
    for (std::size_t i = order_.size(); i > 1; --i) {
      const auto j = static_cast<std::size_t>(
          (static_cast<unsigned __int128>(stream.bits(i)) * i) >> 64U);  // uniform in [0, i)
      std::swap(order_[i - 1], order_[j]);
    }
  }

  std::optional<rig::Batch> next_batch() override {
    const std::int64_t global = batch_size_ * world_size_;
    // Train drops the last incomplete global batch; eval and infer keep it so
    // every sample is seen exactly once (a rank may then get nothing).
    if (train_ ? offset_ + global > num_samples_ : offset_ >= num_samples_) return std::nullopt;
    const std::int64_t begin = std::min(offset_ + rank_ * batch_size_, num_samples_);
    const std::int64_t end = std::min(begin + batch_size_, num_samples_);
    offset_ += global;
    if (begin == end) return std::nullopt;
    return make_batch(begin, end);
  }

  YAML::Node position() const override {
    YAML::Node position;
    position["epoch"] = epoch_;
    position["offset"] = offset_;
    return position;
  }

  void seek(const YAML::Node& position) override {
    if (!position.IsMap() || !position["epoch"] || !position["offset"]) {
      throw rig::UserError("synthetic: a data position needs 'epoch' and 'offset'");
    }
    const auto offset = position["offset"].as<std::int64_t>();
    if (offset < 0 || offset > num_samples_) {
      throw rig::UserError(fmt::format("synthetic: offset {} is outside the data set of {} samples",
                                       offset, num_samples_));
    }
    start_epoch(position["epoch"].as<std::int64_t>());
    offset_ = offset;
  }

  std::vector<std::string> decode(const rig::Batch& batch,
                                  const Tensor& predictions) const override {
    const auto rows = static_cast<std::int64_t>(batch.indices.size());
    if (predictions.dim() < 1 || predictions.size(0) != rows) {
      throw std::invalid_argument(fmt::format("synthetic: predictions {} for a batch of {}",
                                              rig::to_string(predictions.shape()), rows));
    }
    std::vector<std::string> lines;
    lines.reserve(static_cast<std::size_t>(rows));
    if (predictions.dtype() == rig::DType::i64) {
      const auto* p = predictions.data<std::int64_t>();
      for (std::int64_t i = 0; i < rows; ++i) lines.push_back(std::to_string(p[i]));
      return lines;
    }
    const auto* p = predictions.data<float>();
    const auto cols = rows > 0 ? predictions.numel() / rows : 0;
    for (std::int64_t i = 0; i < rows; ++i) {
      lines.push_back(fmt::format("{}", fmt::join(p + i * cols, p + (i + 1) * cols, " ")));
    }
    return lines;
  }

  std::vector<std::string> decode_targets(const rig::Batch& batch) const override {
    std::vector<std::string> lines;
    lines.reserve(batch.indices.size());
    for (const auto s : batch.indices) {
      if (classification_) {
        lines.push_back(std::to_string(labels_[s]));
      } else {
        const auto* t = targets_.data() + s * num_outputs_;
        lines.push_back(fmt::format("{}", fmt::join(t, t + num_outputs_, " ")));
      }
    }
    return lines;
  }

  // Each line: num_features numbers separated by spaces or commas.
  rig::Batch encode_lines(const std::vector<std::string>& lines) const override {
    const auto rows = static_cast<std::int64_t>(lines.size());
    Tensor features = Tensor::empty({rows, num_features_});
    float* x = features.data<float>();
    for (std::int64_t r = 0; r < rows; ++r) {
      std::string text = lines[static_cast<std::size_t>(r)];
      std::replace(text.begin(), text.end(), ',', ' ');
      std::istringstream in(text);
      std::int64_t count = 0;
      std::string word;
      while (in >> word) {
        if (count == num_features_) break;
        try {
          std::size_t used = 0;
          x[r * num_features_ + count] = std::stof(word, &used);
          if (used != word.size()) throw std::invalid_argument(word);
        } catch (const std::exception&) {
          throw rig::UserError(fmt::format("synthetic: '{}' is not a number", word));
        }
        ++count;
      }
      if (count != num_features_ || (in >> word)) {
        throw rig::UserError(fmt::format(
            "synthetic: expected {} numbers (the features) separated by spaces or commas",
            num_features_));
      }
    }
    rig::Batch batch;
    batch.num_objects = rows;
    for (std::int64_t r = 0; r < rows; ++r) batch.indices.push_back(r);
    batch.tensors["features"] = std::move(features);
    return batch;
  }

 private:
  // Every sample of this mode's split: x ~ N(0, I), teacher output t = x W + noise.
  void generate(double noise) {
    const auto f = num_features_;
    const auto o = num_outputs_;
    const Stream teacher(seed_, Stream::teacher);
    std::vector<double> weight(static_cast<std::size_t>(f * o));
    const double scale = 1.0 / std::sqrt(static_cast<double>(f));  // unit-variance outputs
    for (std::size_t i = 0; i < weight.size(); ++i) weight[i] = scale * teacher.normal(i);

    const Stream data(seed_, train_ ? Stream::train : Stream::eval);
    features_.resize(static_cast<std::size_t>(num_samples_ * f));
    if (classification_) {
      labels_.resize(static_cast<std::size_t>(num_samples_));
    } else {
      targets_.resize(static_cast<std::size_t>(num_samples_ * o));
    }
    std::vector<double> out(static_cast<std::size_t>(o));
    for (std::int64_t s = 0; s < num_samples_; ++s) {
      const auto base = static_cast<std::uint64_t>(s * (f + o));  // this sample's draws
      float* x = features_.data() + s * f;
      for (std::int64_t i = 0; i < f; ++i) x[i] = static_cast<float>(data.normal(base + i));
      for (std::int64_t j = 0; j < o; ++j) {
        double t = noise * data.normal(base + f + j);
        for (std::int64_t i = 0; i < f; ++i) t += x[i] * weight[i * o + j];
        out[j] = t;
      }
      if (classification_) {
        labels_[s] = std::max_element(out.begin(), out.end()) - out.begin();
      } else {
        std::copy(out.begin(), out.end(), targets_.begin() + s * o);
      }
    }
  }

  // The batch of the samples at positions [begin, end) of this epoch's order.
  rig::Batch make_batch(std::int64_t begin, std::int64_t end) const {
    const auto rows = end - begin;
    const auto f = num_features_;
    rig::Batch batch;
    batch.num_objects = rows;
    batch.indices.assign(order_.begin() + begin, order_.begin() + end);
    Tensor features = Tensor::empty({rows, f});
    float* x = features.data<float>();
    Tensor labels = classification_ ? Tensor::empty({rows}, rig::DType::i64)
                                    : Tensor::empty({rows, num_outputs_});
    for (std::int64_t r = 0; r < rows; ++r) {
      const auto s = batch.indices[r];
      std::copy_n(features_.begin() + s * f, f, x + r * f);
      if (classification_) {
        labels.data<std::int64_t>()[r] = labels_[s];
      } else {
        std::copy_n(targets_.begin() + s * num_outputs_, num_outputs_,
                    labels.data<float>() + r * num_outputs_);
      }
    }
    batch.tensors["features"] = std::move(features);
    batch.tensors["labels"] = std::move(labels);
    return batch;
  }

  bool classification_;
  std::int64_t num_features_;
  std::int64_t num_classes_;
  std::int64_t num_outputs_;
  bool train_;
  std::int64_t num_samples_;
  std::uint64_t seed_;
  std::int64_t batch_size_;
  std::int64_t rank_;
  std::int64_t world_size_;

  std::vector<float> features_;       // [num_samples, num_features]
  std::vector<std::int64_t> labels_;  // classification: [num_samples]
  std::vector<float> targets_;        // regression: [num_samples, num_outputs]

  std::int64_t epoch_ = 0;
  std::int64_t offset_ = 0;  // in global samples: the start of the next global batch
  std::vector<std::int64_t> order_;
};

}  // namespace

RIG_PLUGIN(data_layer, "synthetic", "0.1.0",
           "Seeded synthetic data labelled by a random linear teacher", Synthetic)
