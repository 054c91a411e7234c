// synthetic_text: random sentence pairs of fixed lengths for benchmarking
// text2text models without reading a corpus. Pair i's tokens depend only on
// (seed, i); its rows end with EOS and hold no PAD. The order, sharding and
// resuming are the shared EpochSampler's.
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "../common/epoch_sampler.hpp"
#include "../common/text_batch.hpp"
#include "rig/plugin.hpp"

namespace {

constexpr const char* kPlugin = "synthetic_text";
constexpr std::uint64_t kSourceTokens = 102;  // stream purposes
constexpr std::uint64_t kTargetTokens = 103;

namespace text = rig_data::text;

class SyntheticText final : public rig::DataLayer {
 public:
  SyntheticText(const YAML::Node& params, const rig::DataLayerContext& ctx)
      : vocab_size_(params["vocab_size"].as<std::int64_t>()),
        source_length_(params["source_length"].as<std::int64_t>()),
        target_length_(params["target_length"].as<std::int64_t>()),
        num_samples_(params["num_samples"].as<std::int64_t>()),
        seed_(rig_data::mix(params["seed"].as<std::uint64_t>()) ^ ctx.run.seed),
        infer_(ctx.run.mode == rig::Mode::infer),
        sampler_(kPlugin, num_samples_, seed_, ctx.run.mode == rig::Mode::train, ctx.batch_size,
                 ctx.run.rank, ctx.run.world_size) {}

  YAML::Node info() const override {
    YAML::Node info = text::text2text_info(vocab_size_, vocab_size_);
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
    const auto n = static_cast<std::int64_t>(indices->size());
    rig::Batch batch;
    std::vector<std::int32_t> row;
    const auto sample = [&](std::uint64_t purpose, std::int64_t length) {
      return [&, purpose, length](std::int64_t r) {
        make_row((*indices)[static_cast<std::size_t>(r)], purpose, length, row);
        return std::span<const std::int32_t>(row);
      };
    };
    const std::int64_t source_tokens =
        text::put_rows(batch, "source", n, false, sample(kSourceTokens, source_length_));
    const std::int64_t target_tokens =
        text::put_rows(batch, "target", n, false, sample(kTargetTokens, target_length_));
    batch.num_objects = infer_ ? source_tokens : target_tokens;
    batch.indices = std::move(*indices);
    return batch;
  }

  // The ids of each row up to its EOS, special ids left out.
  std::vector<std::string> decode(const rig::Batch& batch,
                                  const rig::Tensor& predictions) const override {
    std::vector<std::string> lines(batch.indices.size());
    text::for_each_prediction(kPlugin, predictions, static_cast<std::int64_t>(lines.size()),
                              [&](std::int64_t r, std::span<const std::int64_t> ids) {
                                lines[static_cast<std::size_t>(r)] = ids_line(ids);
                              });
    return lines;
  }

  std::vector<std::string> decode_targets(const rig::Batch& batch) const override {
    std::vector<std::string> lines;
    std::vector<std::int32_t> row;
    for (const auto i : batch.indices) {
      make_row(i, kTargetTokens, target_length_, row);
      lines.push_back(
          ids_line(std::vector<std::int64_t>(row.begin(), row.end() - 1)));  // without EOS
    }
    return lines;
  }

 private:
  // Pair i's row: length - 1 tokens uniform in [4, vocab_size), then EOS.
  void make_row(std::int64_t i, std::uint64_t purpose, std::int64_t length,
                std::vector<std::int32_t>& row) const {
    const rig_data::Stream stream(seed_, purpose, static_cast<std::uint64_t>(i));
    const auto choices = static_cast<std::uint64_t>(vocab_size_ - text::kNumSpecial);
    row.resize(static_cast<std::size_t>(length));
    for (std::int64_t t = 0; t + 1 < length; ++t) {
      row[static_cast<std::size_t>(t)] = static_cast<std::int32_t>(
          text::kNumSpecial + stream.below(static_cast<std::uint64_t>(t), choices));
    }
    row.back() = text::kEos;
  }

  static std::string ids_line(std::span<const std::int64_t> ids) {
    std::vector<std::int64_t> kept;
    for (const auto id : ids) {
      if (id >= text::kNumSpecial) kept.push_back(id);
    }
    return fmt::format("{}", fmt::join(kept, " "));
  }

  std::int64_t vocab_size_;
  std::int64_t source_length_;
  std::int64_t target_length_;
  std::int64_t num_samples_;
  std::uint64_t seed_;
  bool infer_;
  rig_data::EpochSampler sampler_;
};

}  // namespace

RIG_PLUGIN(data_layer, "synthetic_text", "0.1.0",
           "random fixed-length token pairs in the text2text batch layout, for benchmarks",
           SyntheticText)
