#include "engine/ps/server.hpp"

#include <algorithm>
#include <cstdio>
#include <limits>

#include <fmt/format.h>

#include "engine/ps/protocol.hpp"
#include "engine/ps/shard_state.hpp"
#include "engine/ps/two_bit.hpp"
#include "rig/error.hpp"
#include "rig/memory_labels.hpp"
#include "rig/ops.hpp"

namespace rig::engine::ps {
namespace {

// How long one wait for a message lasts before the silence checks run.
constexpr auto kPoll = std::chrono::milliseconds(200);

double seconds(std::chrono::steady_clock::duration d) {
  return std::chrono::duration<double>(d).count();
}

}  // namespace

ShardServer::ShardServer(ParameterServerTransport& link, UpdateFactory make_update,
                         std::string config_hash)
    : link_(link),
      make_update_(std::move(make_update)),
      config_hash_(std::move(config_hash)),
      settings_(link.settings()),
      workers_(link.workers()),
      incoming_(static_cast<std::size_t>(workers_)),
      received_(static_cast<std::size_t>(workers_), 0),
      push_clock_(static_cast<std::size_t>(workers_), 0),
      contributed_(static_cast<std::size_t>(workers_), false),
      dropped_(static_cast<std::size_t>(workers_), false),
      heard_(static_cast<std::size_t>(workers_), Clock::now()) {}

ServerReport ShardServer::run() {
  while (!finished()) {
    std::optional<PsMessage> m = link_.receive(kPoll);
    if (m) {
      handle(*m);
    }
    check_silence();
  }
  link_.flush();
  return report_;
}

bool ShardServer::finished() const {
  return initialized_ && gate_->active_workers() == 0 && pulls_.empty() && snapshots_.empty() &&
         (final_snapshot_sent_ || !final_snapshot_expected_) &&
         final_pulls_answered_ >= final_pulls_expected_;
}

int ShardServer::worker_of(const PsMessage& m) const {
  if (m.peer < 0 || m.peer >= workers_) {
    throw RunError(
        fmt::format("parameter server: a {} message from process {}, which is not a "
                    "worker (workers are 0 to {})",
                    kind_name(m.kind), m.peer, workers_ - 1));
  }
  return m.peer;
}

void ShardServer::handle(PsMessage& m) {
  const int worker = worker_of(m);
  heard_[static_cast<std::size_t>(worker)] = Clock::now();
  switch (static_cast<Kind>(m.kind)) {
    case Kind::init:
      init(m);
      break;
    case Kind::push:
      push(m);
      break;
    case Kind::pull:
      pulls_.push_back({worker, m.clock, false});
      break;
    case Kind::snapshot:
      snapshots_.push_back({worker, m.clock, m.count != 0});
      break;
    case Kind::done:
      if (!initialized_) throw RunError("parameter server: a worker finished before init");
      if ((m.count & kDoneSnapshotFollows) != 0) final_snapshot_expected_ = true;
      if ((m.count & kDonePullFollows) != 0) ++final_pulls_expected_;
      gate_->retire(worker);
      apply_synchronous_if_complete();
      break;
    default:
      throw RunError(fmt::format("parameter server: unexpected {} message from worker {}",
                                 kind_name(m.kind), worker));
  }
  serve();
}

void ShardServer::init(const PsMessage& m) {
  if (initialized_) throw RunError("parameter server: a second init message");
  const MemoryLabel label("the server's shard");
  const Pack p = unpack(m.payload);
  const YAML::Node& meta = p.meta;
  if (meta["config_hash"].as<std::string>() != config_hash_) {
    throw UserError(fmt::format(
        "this server resolved a different experiment from worker 0's (config hash {} against "
        "{}): start every process with the same experiment file, overrides and plugins",
        config_hash_, meta["config_hash"].as<std::string>()));
  }
  shard_.begin = meta["begin"].as<std::int64_t>();
  shard_.end = meta["end"].as<std::int64_t>();
  for (const auto& node : meta["pieces"]) {
    ShardPiece piece;
    piece.parameter = node["parameter"].as<std::size_t>();
    piece.name = node["name"].as<std::string>();
    for (const auto& d : node["shape"]) piece.shape.push_back(d.as<std::int64_t>());
    piece.offset = node["offset"].as<std::int64_t>();
    piece.numel = node["numel"].as<std::int64_t>();
    piece.parameter_numel = node["parameter_numel"].as<std::int64_t>();
    store_.declare(piece.name, piece.shape, Initializer::zeros());
    shard_.pieces.push_back(std::move(piece));
  }
  store_.allocate(0, DType::f32, Device::cpu());
  if (store_.numel() != shard_.numel()) {
    throw RunError(fmt::format("parameter server: the shard's pieces hold {} elements, not {}",
                               store_.numel(), shard_.numel()));
  }
  store_.values().copy_from(p.at("values"));
  update_ = [&] {
    const MemoryLabel state("the optimizer's state");
    return make_update_(store_, meta);
  }();
  OptimizerState state;
  for (const auto& [name, t] : p.tensors) {
    if (name.rfind("optimizer/", 0) == 0) state[name.substr(10)] = t;
  }
  if (!state.empty()) update_.optimizer->load_state(state);
  const auto start = meta["start_clock"].as<std::int64_t>();
  gate_.emplace(workers_, settings_.max_staleness, start);
  applied_pushes_ = start * workers_;
  std::fill(push_clock_.begin(), push_clock_.end(), start);
  for (auto& t : incoming_) t = Tensor::zeros({shard_.numel()}, DType::f32, Device::cpu());
  initialized_ = true;
}

void ShardServer::push(PsMessage& m) {
  if (!initialized_) throw RunError("parameter server: a push before init");
  const int worker = m.peer;
  const auto w = static_cast<std::size_t>(worker);
  if (dropped_[w]) {
    // A dropped straggler's push older than max_staleness is refused; once it
    // has caught up, it counts again from this push.
    const std::int64_t s = settings_.max_staleness;
    if (s >= 0 && m.clock < gate_->slowest() - s) {
      ++report_.refused_pushes;
      return;
    }
    dropped_[w] = false;
    push_clock_[w] = m.clock;
    gate_->readmit(worker, m.clock);
    fmt::print(stderr, "rig: parameter server {}: {} caught up at step {}: it counts again\n",
               link_.self() - workers_, link_.describe(worker), m.clock);
  }
  if (m.offset < shard_.begin || m.offset + m.count > shard_.end) {
    throw RunError(fmt::format(
        "parameter server: worker {} pushed elements [{}, {}) outside this shard [{}, {})", worker,
        m.offset, m.offset + m.count, shard_.begin, shard_.end));
  }
  if (m.clock != push_clock_[w]) {
    throw RunError(fmt::format("parameter server: worker {} pushed for clock {} but is at {}",
                               worker, m.clock, push_clock_[w]));
  }
  // Straight into the worker's incoming gradient (a contiguous slice).
  Tensor piece = incoming_[w].slice(0, m.offset - shard_.begin, m.offset - shard_.begin + m.count);
  if (settings_.two_bit_threshold > 0.0F) {
    decompress_2bit(m.payload, m.count, settings_.two_bit_threshold, piece.data<float>());
  } else {
    copy_floats(m, piece);
  }
  received_[w] += m.count;
  if (received_[w] == shard_.numel()) complete_push(worker);
}

void ShardServer::complete_push(int worker) {
  const auto w = static_cast<std::size_t>(worker);
  received_[w] = 0;
  ++push_clock_[w];
  ++report_.pushes;
  if (settings_.max_staleness == 0) {
    contributed_[w] = true;
    gate_->pushed(worker);
    apply_synchronous_if_complete();
  } else {
    store_.grads().copy_from(incoming_[w]);
    apply_grads();
    applied_pushes_ += 1;
    gate_->pushed(worker);
  }
}

// Synchronous: once every active worker has pushed this clock, their
// gradients summed in worker order, then averaged, are one update.
void ShardServer::apply_synchronous_if_complete() {
  if (settings_.max_staleness != 0) return;
  const bool any = std::any_of(contributed_.begin(), contributed_.end(), [](bool c) { return c; });
  if (!any || gate_->slowest() <= global_step()) return;
  // Summed and scaled in the gradient buffer itself: no shard-sized temporaries.
  Tensor grads = store_.grads();
  int contributors = 0;
  for (std::size_t w = 0; w < contributed_.size(); ++w) {
    if (!contributed_[w]) continue;
    if (contributors == 0) {
      grads.copy_from(incoming_[w]);
    } else {
      ops::add_(grads, incoming_[w]);
    }
    contributed_[w] = false;
    ++contributors;
  }
  ops::scale_(grads, 1.0F / static_cast<float>(contributors));
  apply_grads();
  applied_pushes_ += workers_;
}

void ShardServer::apply_grads() {
  const MemoryLabel label("the optimizer update");
  const double lr = update_.lr_policy->learning_rate(global_step());
  if (update_.larc) apply_larc(store_, *update_.larc, lr);
  update_.optimizer->step(lr);
  ++report_.updates;
}

void ShardServer::serve() {
  if (!initialized_) return;
  for (auto it = pulls_.begin(); it != pulls_.end();) {
    const bool final = it->clock == kFinalClock;
    if (final ? gate_->active_workers() > 0 : !gate_->admits(it->clock)) {
      ++it;
      continue;
    }
    const std::int64_t staleness = final ? 0 : gate_->staleness(it->clock);
    if (!final) ++report_.staleness[staleness];
    if (final) ++final_pulls_answered_;
    PsMessage reply = message(Kind::weights, it->worker, it->clock, staleness, applied_pushes_);
    reply.payload = bytes_of(store_.values());
    link_.send(std::move(reply));
    it = pulls_.erase(it);
  }
  for (auto it = snapshots_.begin(); it != snapshots_.end();) {
    if (!snapshot_ready(*it)) {
      ++it;
      continue;
    }
    send_snapshot(*it);
    it = snapshots_.erase(it);
  }
}

bool ShardServer::snapshot_ready(const Pending& p) const {
  if (p.final) return gate_->active_workers() == 0;
  // Synchronous runs checkpoint exactly the step asked for; asynchronous ones
  // whatever the shard holds now (no step is the same on every server).
  return settings_.max_staleness != 0 || global_step() >= p.clock;
}

void ShardServer::send_snapshot(const Pending& p) {
  const MemoryLabel label("a checkpoint's snapshot");
  YAML::Node meta;
  meta["global_step"] = global_step();
  meta["updates"] = report_.updates;
  meta["pushes"] = report_.pushes;
  meta["refused_pushes"] = report_.refused_pushes;
  meta["dropped_workers"] = report_.dropped_workers;
  for (int w = 0; w < workers_; ++w) meta["clocks"].push_back(gate_->clock(w));
  for (const auto& [staleness, count] : report_.staleness) {
    YAML::Node pair;
    pair.push_back(staleness);
    pair.push_back(count);
    meta["staleness"].push_back(pair);
  }
  NamedTensors tensors{{"values", store_.values()}};
  for (const auto& [name, t] : update_.optimizer->state()) {
    tensors.emplace_back("optimizer/" + name, t);
  }
  PsMessage reply = message(Kind::state, p.worker, p.clock, 0, p.final ? 1 : 0);
  reply.payload = pack(meta, tensors);
  link_.send(std::move(reply));
  if (p.final) final_snapshot_sent_ = true;
}

// A worker the others wait for that has gone silent: dropped as a straggler
// after straggler_timeout_s when that is set, else the job ends at timeout_s.
void ShardServer::check_silence() {
  if (!initialized_) {
    const double waited = seconds(Clock::now() - started_);
    if (waited > settings_.startup_timeout_s) {
      throw RunError(fmt::format(
          "parameter server {}: {} sent no init within startup_timeout_s = {} (waited {:.1f} s)",
          link_.self() - workers_, link_.describe(0), settings_.startup_timeout_s, waited));
    }
    return;
  }
  if (pulls_.empty()) return;
  const auto now = Clock::now();
  std::int64_t needed = std::numeric_limits<std::int64_t>::max();
  for (const Pending& p : pulls_) {
    if (p.clock == kFinalClock || !gate_->admits(p.clock)) needed = std::min(needed, p.clock);
  }
  const bool pending = std::any_of(pulls_.begin(), pulls_.end(), [this](const Pending& p) {
    return p.clock == kFinalClock ? gate_->active_workers() > 0 : !gate_->admits(p.clock);
  });
  if (!pending) return;
  for (int worker = 0; worker < workers_; ++worker) {
    const auto w = static_cast<std::size_t>(worker);
    const bool holds_back =
        gate_->active(worker) &&
        (needed == kFinalClock ||
         (settings_.max_staleness >= 0 && gate_->clock(worker) < needed - settings_.max_staleness));
    if (!holds_back) continue;
    const double silent = seconds(now - heard_[w]);
    if (settings_.straggler_timeout_s > 0.0 && silent > settings_.straggler_timeout_s) {
      dropped_[w] = true;
      received_[w] = 0;  // a push it was in the middle of is dropped with it
      ++report_.dropped_workers;
      gate_->retire(worker);
      std::fprintf(stderr,
                   "rig: parameter server %d: dropped %s as a straggler: silent for %.1f s "
                   "(straggler_timeout_s = %g); its later pushes are refused\n",
                   link_.self() - workers_, link_.describe(worker).c_str(), silent,
                   settings_.straggler_timeout_s);
      apply_synchronous_if_complete();
      serve();
      return;
    }
    if (silent > settings_.timeout_s) {
      throw RunError(fmt::format(
          "parameter server {}: {} sent nothing for {:.1f} s while other workers wait for the "
          "weights of {} (max_staleness {}); timeout_s = {}",
          link_.self() - workers_, link_.describe(worker), silent,
          needed == kFinalClock ? std::string("the end") : fmt::format("step {}", needed),
          settings_.max_staleness, settings_.timeout_s));
    }
  }
}

}  // namespace rig::engine::ps
