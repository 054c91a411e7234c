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

#include "../common/epoch_sampler.hpp"
#include "../common/line_input.hpp"
#include "rig/error.hpp"
#include "rig/plugin.hpp"

namespace {

using rig::Tensor;

using rig_data::mix;
using rig_data::Stream;

// This layer's stream purposes (rig_data::kShuffle orders the epochs).
enum SyntheticPurpose : std::uint64_t { kTeacher = 1, kTrain = 2, kEval = 3 };

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
        sampler_("synthetic", num_samples_, seed_, train_, ctx.batch_size, ctx.run.rank,
                 ctx.run.world_size) {
    generate(params["noise"].as<double>());
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

  void start_epoch(std::int64_t epoch) override { sampler_.start_epoch(epoch); }

  std::optional<rig::Batch> next_batch() override {
    auto indices = sampler_.next();
    if (!indices) return std::nullopt;
    return make_batch(std::move(*indices));
  }

  YAML::Node position() const override { return sampler_.position(); }
  void seek(const YAML::Node& position) override { sampler_.seek(position); }

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
      rig_data::read_line_numbers(
          lines[static_cast<std::size_t>(r)], num_features_,
          [&](std::int64_t i, const std::string& word) {
            try {
              std::size_t used = 0;
              x[r * num_features_ + i] = std::stof(word, &used);
              if (used != word.size()) throw std::invalid_argument(word);
            } catch (const std::exception&) {
              throw rig::UserError(fmt::format("synthetic: '{}' is not a number", word));
            }
          },
          [&](std::int64_t) {
            return fmt::format(
                "synthetic: expected {} numbers (the features) separated by spaces or commas",
                num_features_);
          });
    }
    return rig_data::typed_batch("features", std::move(features), rows);
  }

 private:
  // Every sample of this mode's split: x ~ N(0, I), teacher output t = x W + noise.
  void generate(double noise) {
    const auto f = num_features_;
    const auto o = num_outputs_;
    const Stream teacher(seed_, kTeacher);
    std::vector<double> weight(static_cast<std::size_t>(f * o));
    const double scale = 1.0 / std::sqrt(static_cast<double>(f));  // unit-variance outputs
    for (std::size_t i = 0; i < weight.size(); ++i) weight[i] = scale * teacher.normal(i);

    const Stream data(seed_, train_ ? kTrain : kEval);
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

  // The batch of the given samples.
  rig::Batch make_batch(std::vector<std::int64_t> indices) const {
    const auto rows = static_cast<std::int64_t>(indices.size());
    const auto f = num_features_;
    rig::Batch batch;
    batch.num_objects = rows;
    batch.indices = std::move(indices);
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

  std::vector<float> features_;       // [num_samples, num_features]
  std::vector<std::int64_t> labels_;  // classification: [num_samples]
  std::vector<float> targets_;        // regression: [num_samples, num_outputs]
  rig_data::EpochSampler sampler_;
};

}  // namespace

RIG_PLUGIN(data_layer, "synthetic", "0.1.0",
           "Seeded synthetic data labelled by a random linear teacher", Synthetic)
