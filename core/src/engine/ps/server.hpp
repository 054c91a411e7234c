// One server of a parameter-server job: it holds a shard of the parameters,
// runs the experiment's optimizer and lr policy over it, and answers the
// workers' pushes, pulls and snapshots (protocol.hpp).
//
// Consistency is max_staleness s: a pull for clock c is answered once every
// active worker has pushed c - s gradients (staleness_gate.hpp). With s = 0
// the W pushes of a clock are summed in worker order and applied as one
// update (the same bits as one process with iter_size W); otherwise each push
// is applied as it arrives (MXNet's dist_async), and the global step is
// applied pushes / W.
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "engine/larc.hpp"
#include "engine/ps/shard_plan.hpp"
#include "engine/ps/staleness_gate.hpp"
#include "rig/lr_policy.hpp"
#include "rig/optimizer.hpp"
#include "rig/parameter_server.hpp"
#include "rig/parameter_store.hpp"

namespace rig::engine::ps {

// What turns a gradient into an update of the shard.
struct ShardUpdate {
  std::shared_ptr<Optimizer> optimizer;
  std::shared_ptr<LrPolicy> lr_policy;
  std::optional<LarcSettings> larc;
};

// Builds the update over `store` (allocated, holding the shard's pieces) from
// worker 0's init message.
using UpdateFactory = std::function<ShardUpdate(ParameterStore& store, const YAML::Node& init)>;

struct ServerReport {
  std::int64_t updates = 0;
  std::int64_t pushes = 0;
  std::int64_t refused_pushes = 0;  // from a worker dropped as a straggler
  std::int64_t dropped_workers = 0;
  std::map<std::int64_t, std::int64_t> staleness;  // of the reads served: value -> count
};

class ShardServer {
 public:
  // `config_hash` must equal the one worker 0 sends.
  ShardServer(ParameterServerTransport& link, UpdateFactory make_update, std::string config_hash);
  // Serves until every worker is done and the final snapshot has been sent.
  ServerReport run();

 private:
  using Clock = std::chrono::steady_clock;
  struct Pending {
    int worker = 0;
    std::int64_t clock = 0;
    bool final = false;
  };

  void handle(PsMessage& m);
  void init(const PsMessage& m);
  void push(PsMessage& m);
  void complete_push(int worker);
  void apply_synchronous_if_complete();
  // One update of the optimizer from the gradient in store_.grads().
  void apply_grads();
  void serve();
  bool snapshot_ready(const Pending& p) const;
  void send_snapshot(const Pending& p);
  void check_silence();
  int worker_of(const PsMessage& m) const;
  std::int64_t global_step() const { return applied_pushes_ / workers_; }
  bool finished() const;

  ParameterServerTransport& link_;
  UpdateFactory make_update_;
  std::string config_hash_;
  const PsSettings settings_;
  const int workers_;
  bool initialized_ = false;
  Shard shard_;
  ParameterStore store_;
  ShardUpdate update_;
  std::optional<StalenessGate> gate_;
  std::vector<Tensor> incoming_;          // per worker: the push being received
  std::vector<std::int64_t> received_;    // its elements so far
  std::vector<std::int64_t> push_clock_;  // its clock
  std::vector<bool> contributed_;         // s = 0: pushed the clock being summed
  std::vector<bool> dropped_;
  std::vector<Clock::time_point> heard_;  // per worker: its last message
  std::deque<Pending> pulls_;
  std::deque<Pending> snapshots_;
  bool final_snapshot_expected_ = false;  // worker 0 said so when it finished
  bool final_snapshot_sent_ = false;
  // Final pulls workers said would follow their done, and those answered:
  // the server must not end while one is still on its way.
  int final_pulls_expected_ = 0;
  int final_pulls_answered_ = 0;
  std::int64_t applied_pushes_ = 0;  // global step x workers
  ServerReport report_;
  Clock::time_point started_ = Clock::now();
};

}  // namespace rig::engine::ps
