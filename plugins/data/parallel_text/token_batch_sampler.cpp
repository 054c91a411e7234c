#include "token_batch_sampler.hpp"

#include <algorithm>
#include <stdexcept>
#include <utility>

#include <fmt/format.h>

#include "../common/epoch_sampler.hpp"
#include "rig/error.hpp"

namespace parallel_text {

namespace {
constexpr std::uint64_t kBatchOrder = 101;  // stream purpose: the order of the batches
}

TokenBatchSampler::TokenBatchSampler(std::string plugin, std::vector<std::int64_t> cost,
                                     std::int64_t budget, std::int64_t chunk_size,
                                     std::uint64_t seed, bool shuffle, int rank, int world_size)
    : plugin_(std::move(plugin)),
      cost_(std::move(cost)),
      budget_(budget),
      chunk_size_(chunk_size),
      seed_(seed),
      shuffle_(shuffle),
      rank_(rank),
      world_size_(world_size) {
  if (world_size_ < 1 || rank_ < 0 || rank_ >= world_size_) {
    throw std::invalid_argument(
        fmt::format("{}: rank {} of a world of {}", plugin_, rank_, world_size_));
  }
  if (chunk_size_ < 1) throw std::invalid_argument(plugin_ + ": chunk size < 1");
  for (const auto c : cost_) {
    if (c > budget_) throw std::invalid_argument(plugin_ + ": a pair is over the token budget");
  }
  start_epoch(0);
}

void TokenBatchSampler::start_epoch(std::int64_t epoch) {
  if (epoch < 0) throw std::invalid_argument(fmt::format("{}: epoch {} < 0", plugin_, epoch));
  epoch_ = epoch;
  offset_ = 0;
  batches_.clear();
  std::vector<std::int64_t> order =
      rig_data::epoch_order(static_cast<std::int64_t>(cost_.size()), seed_, epoch, shuffle_);
  for (std::size_t begin = 0; begin < order.size();
       begin += static_cast<std::size_t>(chunk_size_)) {
    const auto first = order.begin() + static_cast<std::ptrdiff_t>(begin);
    const auto last =
        order.begin() + static_cast<std::ptrdiff_t>(std::min(order.size(), begin + chunk_size_));
    // Stable: pairs of equal cost keep the (shuffled) order among them.
    std::stable_sort(first, last, [&](std::int64_t a, std::int64_t b) {
      return cost_[static_cast<std::size_t>(a)] < cost_[static_cast<std::size_t>(b)];
    });
    std::vector<std::int64_t> batch;
    for (auto it = first; it != last; ++it) {
      // Sorted ascending, so the new pair is the batch's longest.
      const std::int64_t cost = cost_[static_cast<std::size_t>(*it)];
      if (!batch.empty() && (static_cast<std::int64_t>(batch.size()) + 1) * cost > budget_) {
        batches_.push_back(std::move(batch));
        batch.clear();
      }
      batch.push_back(*it);
    }
    if (!batch.empty()) batches_.push_back(std::move(batch));
  }
  if (shuffle_) {
    const rig_data::Stream stream(seed_, kBatchOrder, static_cast<std::uint64_t>(epoch));
    for (std::size_t i = batches_.size(); i > 1; --i) {
      std::swap(batches_[i - 1], batches_[stream.below(i, i)]);
    }
  }
}

std::optional<std::vector<std::int64_t>> TokenBatchSampler::next() {
  if (offset_ + world_size_ > static_cast<std::int64_t>(batches_.size())) return std::nullopt;
  const std::int64_t mine = offset_ + rank_;
  offset_ += world_size_;
  return batches_[static_cast<std::size_t>(mine)];
}

YAML::Node TokenBatchSampler::position() const {
  YAML::Node position;
  position["epoch"] = epoch_;
  position["offset"] = offset_;
  return position;
}

void TokenBatchSampler::seek(const YAML::Node& position) {
  if (!position.IsMap() || !position["epoch"] || !position["offset"]) {
    throw rig::UserError(fmt::format("{}: a data position needs 'epoch' and 'offset'", plugin_));
  }
  start_epoch(position["epoch"].as<std::int64_t>());
  const auto offset = position["offset"].as<std::int64_t>();
  if (offset < 0 || offset > static_cast<std::int64_t>(batches_.size())) {
    throw rig::UserError(fmt::format("{}: offset {} is outside epoch {}'s {} token batches",
                                     plugin_, offset, epoch_, batches_.size()));
  }
  offset_ = offset;
}

}  // namespace parallel_text
