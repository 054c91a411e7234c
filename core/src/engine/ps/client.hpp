// The worker side of a parameter-server job: pushes gradients to the servers
// that hold them, pulls fresh weights, and (worker 0) hands the servers their
// shards at the start and gathers them back for checkpoints (protocol.hpp).
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <vector>

#include <yaml-cpp/yaml.h>

#include "engine/ps/shard_plan.hpp"
#include "rig/optimizer.hpp"
#include "rig/parameter_server.hpp"
#include "rig/parameter_store.hpp"

namespace rig::engine::ps {

struct PullResult {
  std::int64_t applied_pushes = 0;  // the least over the servers
  std::int64_t global_step = 0;     // applied pushes / workers
  std::int64_t staleness = 0;       // the most over the servers (staleness_gate.hpp)
  double wait_seconds = 0.0;
};

struct SnapshotResult {
  std::int64_t global_step = 0;
  std::map<std::int64_t, std::int64_t> staleness;  // every server's reads, summed
  std::int64_t refused_pushes = 0;
  std::int64_t dropped_workers = 0;
  std::vector<std::int64_t> clocks;  // each worker's pushes, as server 0 counted them
};

// The servers' shards for `params`: split only for an element-wise optimizer.
std::vector<Shard> plan_for(const ParameterStore& params, int servers, bool split_parameters);

class Client {
 public:
  Client(ParameterServerTransport& link, ParameterStore& params, std::vector<Shard> shards);

  const std::vector<Shard>& shards() const { return shards_; }
  const PsSettings& settings() const { return link_.settings(); }

  // Worker 0, before anyone pulls: every server gets its shard of the values
  // and of `optimizer`'s state, and `run` (config_hash, max_steps, ...).
  void initialize(const Optimizer& optimizer, YAML::Node run, std::int64_t start_clock);
  // The weights this worker computes its push for `clock` with, into
  // params.values(); waits until every server has answered.
  PullResult pull(std::int64_t clock);
  // A slice of the flat gradient buffer from `offset`, for the clock last
  // pulled: each server gets its part. Returns once queued.
  void push(std::int64_t offset, const Tensor& gradients);
  // Worker 0: the servers' values and optimizer state into params and
  // `optimizer`; `final` waits until every worker is done.
  SnapshotResult snapshot(Optimizer& optimizer, std::int64_t step, bool final);
  // This worker pushed its last gradient; it says whether it will ask for
  // the final snapshot (worker 0) and the final weights (pull(kFinalClock)),
  // so that the servers stay until they have answered.
  void done(bool final_snapshot_follows, bool final_pull_follows);
  // Bytes this worker sent in pushes and received in pulls, so far.
  std::int64_t bytes_moved() const { return bytes_pushed_ + bytes_pulled_; }
  // The servers' applied pushes at the last pull.
  std::int64_t applied_pushes() const { return applied_pushes_; }

 private:
  // One reply of `kind` from every server, by server index.
  std::vector<PsMessage> gather(std::int32_t kind, std::int64_t clock, double timeout_s,
                                const char* what);

  ParameterServerTransport& link_;
  ParameterStore& params_;
  std::vector<Shard> shards_;
  std::int64_t clock_ = 0;  // the clock being computed (last pulled)
  bool pulled_ = false;
  std::int64_t bytes_pushed_ = 0;
  std::int64_t bytes_pulled_ = 0;
  std::int64_t applied_pushes_ = 0;
  Tensor residual_;  // 2-bit compression: what was not sent yet, flat, on the CPU
  std::chrono::milliseconds test_delay_{0};
};

}  // namespace rig::engine::ps
