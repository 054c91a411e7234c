// Token batching with length buckets (as Marian's maxi-batches and fairseq's
// max_tokens do): the epoch's shuffled order is cut into chunks of
// chunk_size pairs; each chunk is sorted by length and cut into batches of at
// most `budget` padded tokens (rows x the longest row's cost); the batches of
// the whole epoch are then shuffled. Everything depends on (seed, epoch) only;
// global step k is batches [k W, k W + W) of that list and rank r takes batch
// k W + r (a last incomplete group of W is dropped), so the position is one
// number of batches, like EpochSampler's.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <yaml-cpp/yaml.h>

namespace parallel_text {

class TokenBatchSampler {
 public:
  // cost[i]: the padded tokens pair i takes per row (the longer of its source
  // and target rows, rounded up as the batch will be). Every cost must fit the
  // budget.
  TokenBatchSampler(std::string plugin, std::vector<std::int64_t> cost, std::int64_t budget,
                    std::int64_t chunk_size, std::uint64_t seed, bool shuffle, int rank,
                    int world_size);

  std::int64_t epoch() const { return epoch_; }
  // The batches of the current epoch over all ranks (pair indices each).
  const std::vector<std::vector<std::int64_t>>& batches() const { return batches_; }

  void start_epoch(std::int64_t epoch);
  std::optional<std::vector<std::int64_t>> next();
  YAML::Node position() const;
  void seek(const YAML::Node& position);

 private:
  std::string plugin_;
  std::vector<std::int64_t> cost_;
  std::int64_t budget_;
  std::int64_t chunk_size_;
  std::uint64_t seed_;
  bool shuffle_;
  std::int64_t rank_;
  std::int64_t world_size_;
  std::int64_t epoch_ = 0;
  std::int64_t offset_ = 0;  // in batches: the first batch of the next global step
  std::vector<std::vector<std::int64_t>> batches_;
};

}  // namespace parallel_text
