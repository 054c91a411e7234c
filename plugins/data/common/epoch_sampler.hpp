// What every rig data layer shares: counter-based random streams, the global
// sample order of an epoch (a function of (seed, epoch) only, never of the
// number of processes), this rank's slice of each global batch, and a
// resumable position. Header-only: each data layer is its own plugin.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numbers>
#include <numeric>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <yaml-cpp/yaml.h>

#include "rig/error.hpp"

namespace rig_data {

inline std::uint64_t mix(std::uint64_t x) {  // SplitMix64's finaliser
  x += 0x9E3779B97F4A7C15ULL;
  x = (x ^ (x >> 30U)) * 0xBF58476D1CE4E5B9ULL;
  x = (x ^ (x >> 27U)) * 0x94D049BB133111EBULL;
  return x ^ (x >> 31U);
}

// Counter-based random stream: draw i depends only on (seed, purpose, index, i).
class Stream {
 public:
  Stream(std::uint64_t seed, std::uint64_t purpose, std::uint64_t index = 0)
      : key_(mix(mix(mix(seed) ^ purpose) ^ index)) {}
  std::uint64_t bits(std::uint64_t i) const { return mix(key_ + i * 0xD1B54A32D192ED03ULL); }
  double uniform(std::uint64_t i) const {  // in (0, 1)
    return (static_cast<double>(bits(i) >> 11U) + 0.5) * 0x1.0p-53;
  }
  // Uniform in [0, n), without modulo bias worth the name (n < 2^32).
  std::uint64_t below(std::uint64_t i, std::uint64_t n) const {
    return static_cast<std::uint64_t>((static_cast<unsigned __int128>(bits(i)) * n) >> 64U);
  }
  double normal(std::uint64_t i) const {  // Box-Muller on draws 2i and 2i+1
    const double r = std::sqrt(-2.0 * std::log(uniform(2 * i)));
    return r * std::cos(2.0 * std::numbers::pi * uniform(2 * i + 1));
  }

 private:
  std::uint64_t key_;
};

// Stream purposes shared by the data layers (each layer may add its own above 100).
enum Purpose : std::uint64_t { kShuffle = 4, kAugment = 5 };

// The sample order of `epoch`: 0..n-1, shuffled (Fisher-Yates from a stream
// keyed on (seed, epoch) only) unless `shuffle` is false.
inline std::vector<std::int64_t> epoch_order(std::int64_t n, std::uint64_t seed, std::int64_t epoch,
                                             bool shuffle) {
  std::vector<std::int64_t> order(static_cast<std::size_t>(n));
  std::iota(order.begin(), order.end(), std::int64_t{0});
  if (!shuffle) return order;
  const Stream stream(seed, kShuffle, static_cast<std::uint64_t>(epoch));
  for (std::size_t i = order.size(); i > 1; --i) {
    std::swap(order[i - 1], order[stream.below(i, i)]);
  }
  return order;
}

// The order of an epoch and this rank's share of every global batch of
// batch_size x world_size samples: rank r takes the r-th slice. Train mode
// shuffles and drops the last incomplete global batch; eval and infer keep
// the file order and every sample (a rank whose slice is empty gets nothing).
// A train sampler made with shuffle false keeps the file order too.
class EpochSampler {
 public:
  EpochSampler(const std::string& plugin, std::int64_t num_samples, std::uint64_t seed, bool train,
               std::int64_t batch_size, int rank, int world_size, bool shuffle = true)
      : plugin_(plugin),
        num_samples_(num_samples),
        seed_(seed),
        train_(train),
        shuffle_(train && shuffle),
        batch_size_(batch_size),
        rank_(rank),
        world_size_(world_size) {
    if (batch_size_ < 1) {
      throw rig::UserError(fmt::format("{}: batch size {} must be >= 1", plugin_, batch_size_));
    }
    if (world_size_ < 1 || rank_ < 0 || rank_ >= world_size_) {
      throw std::invalid_argument(
          fmt::format("{}: rank {} of a world of {}", plugin_, rank_, world_size_));
    }
    start_epoch(0);
  }

  std::int64_t num_samples() const { return num_samples_; }
  std::int64_t epoch() const { return epoch_; }
  bool train() const { return train_; }

  void start_epoch(std::int64_t epoch) {
    if (epoch < 0) throw std::invalid_argument(fmt::format("{}: epoch {} < 0", plugin_, epoch));
    epoch_ = epoch;
    offset_ = 0;
    order_ = epoch_order(num_samples_, seed_, epoch, shuffle_);
  }

  // The data-set indices of this rank's next batch, or nullopt at the end of
  // the epoch.
  std::optional<std::vector<std::int64_t>> next() {
    const std::int64_t global = batch_size_ * world_size_;
    if (train_ ? offset_ + global > num_samples_ : offset_ >= num_samples_) return std::nullopt;
    const std::int64_t begin = std::min(offset_ + rank_ * batch_size_, num_samples_);
    const std::int64_t end = std::min(begin + batch_size_, num_samples_);
    offset_ += global;
    if (begin == end) return std::nullopt;
    return std::vector<std::int64_t>(order_.begin() + begin, order_.begin() + end);
  }

  YAML::Node position() const {
    YAML::Node position;
    position["epoch"] = epoch_;
    position["offset"] = offset_;
    return position;
  }

  void seek(const YAML::Node& position) {
    if (!position.IsMap() || !position["epoch"] || !position["offset"]) {
      throw rig::UserError(fmt::format("{}: a data position needs 'epoch' and 'offset'", plugin_));
    }
    const auto offset = position["offset"].as<std::int64_t>();
    if (offset < 0 || offset > num_samples_) {
      throw rig::UserError(fmt::format("{}: offset {} is outside the data set of {} samples",
                                       plugin_, offset, num_samples_));
    }
    start_epoch(position["epoch"].as<std::int64_t>());
    offset_ = offset;
  }

 private:
  std::string plugin_;
  std::int64_t num_samples_;
  std::uint64_t seed_;
  bool train_;
  bool shuffle_;
  std::int64_t batch_size_;
  std::int64_t rank_;
  std::int64_t world_size_;
  std::int64_t epoch_ = 0;
  std::int64_t offset_ = 0;  // in global samples: the start of the next global batch
  std::vector<std::int64_t> order_;
};

}  // namespace rig_data
