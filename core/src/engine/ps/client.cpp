#include "engine/ps/client.hpp"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <thread>

#include <fmt/format.h>

#include "engine/ps/protocol.hpp"
#include "engine/ps/shard_state.hpp"
#include "engine/ps/two_bit.hpp"
#include "rig/error.hpp"

namespace rig::engine::ps {
namespace {

using Clock = std::chrono::steady_clock;
constexpr double kForever = 1e9;

YAML::Node shape_node(const Shape& shape) {
  YAML::Node node(YAML::NodeType::Sequence);
  for (const std::int64_t d : shape) node.push_back(d);
  return node;
}

}  // namespace

std::vector<Shard> plan_for(const ParameterStore& params, int servers, bool split_parameters) {
  std::vector<ParameterExtent> extents;
  for (const ParameterInfo& p : params.parameters()) extents.push_back({p.name, p.shape, p.offset});
  return plan_shards(extents, servers, split_parameters);
}

Client::Client(ParameterServerTransport& link, ParameterStore& params, std::vector<Shard> shards)
    : link_(link), params_(params), shards_(std::move(shards)) {
  if (static_cast<int>(shards_.size()) != link_.servers()) {
    throw std::logic_error("ps::Client: one shard per server");
  }
  if (link_.settings().two_bit_threshold > 0.0F) {
    residual_ = Tensor::zeros({params_.numel()}, DType::f32, Device::cpu());
  }
  // Tests slow one worker down: RIG_PS_TEST_SLOW_WORKER=WORKER:MILLISECONDS
  // makes that worker wait before each pull, as if its steps took that long.
  if (const char* slow = std::getenv("RIG_PS_TEST_SLOW_WORKER")) {
    int worker = -1;
    long ms = 0;
    if (std::sscanf(slow, "%d:%ld", &worker, &ms) == 2 && worker == link_.self()) {
      test_delay_ = std::chrono::milliseconds(ms);
    }
  }
}

void Client::initialize(const Optimizer& optimizer, YAML::Node run, std::int64_t start_clock) {
  const OptimizerState full = optimizer.state();
  const Tensor values = params_.values().to_host();
  for (std::size_t s = 0; s < shards_.size(); ++s) {
    const Shard& shard = shards_[s];
    YAML::Node meta = YAML::Clone(run);
    meta["start_clock"] = start_clock;
    meta["server"] = static_cast<int>(s);
    meta["begin"] = shard.begin;
    meta["end"] = shard.end;
    for (const ShardPiece& p : shard.pieces) {
      YAML::Node piece;
      piece["parameter"] = p.parameter;
      piece["name"] = p.name;
      piece["shape"] = shape_node(p.shape);
      piece["offset"] = p.offset;
      piece["numel"] = p.numel;
      piece["parameter_numel"] = p.parameter_numel;
      meta["pieces"].push_back(piece);
    }
    NamedTensors tensors{{"values", values.slice(0, shard.begin, shard.end).contiguous()}};
    for (auto& [name, t] : shard_state(full, shard, params_.numel(), params_.parameters().size())) {
      tensors.emplace_back("optimizer/" + name, t);
    }
    PsMessage m = message(Kind::init, link_.workers() + static_cast<int>(s));
    m.payload = pack(meta, tensors);
    link_.send(std::move(m));
  }
}

std::vector<PsMessage> Client::gather(std::int32_t kind, std::int64_t clock, double timeout_s,
                                      const char* what) {
  const int servers = link_.servers();
  std::vector<PsMessage> replies(static_cast<std::size_t>(servers));
  std::vector<bool> got(static_cast<std::size_t>(servers), false);
  int missing = servers;
  const auto start = Clock::now();
  const auto deadline =
      start + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(timeout_s));
  while (missing > 0) {
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    std::optional<PsMessage> m =
        left.count() > 0 ? link_.receive(std::min(left, std::chrono::milliseconds(1000)))
                         : std::nullopt;
    if (!m) {
      if (Clock::now() < deadline) continue;
      std::string silent;
      for (int s = 0; s < servers; ++s) {
        if (!got[static_cast<std::size_t>(s)]) {
          silent += (silent.empty() ? "" : ", ") + link_.describe(link_.workers() + s);
        }
      }
      throw RunError(fmt::format(
          "worker {}: no {} for step {} from {} within {} s (communicator_params/timeout_s)",
          link_.self(), what, clock, silent, timeout_s));
    }
    const int server = m->peer - link_.workers();
    if (m->kind != kind || m->clock != clock || server < 0 || server >= servers ||
        got[static_cast<std::size_t>(server)]) {
      throw RunError(fmt::format(
          "worker {}: expected {} for step {} from the servers, got {} for step {} from process {}",
          link_.self(), what, clock, kind_name(m->kind), m->clock, m->peer));
    }
    got[static_cast<std::size_t>(server)] = true;
    replies[static_cast<std::size_t>(server)] = std::move(*m);
    --missing;
  }
  return replies;
}

PullResult Client::pull(std::int64_t clock) {
  if (test_delay_.count() > 0 && clock != kFinalClock) std::this_thread::sleep_for(test_delay_);
  const auto start = Clock::now();
  for (int s = 0; s < link_.servers(); ++s) {
    link_.send(message(Kind::pull, link_.workers() + s, clock));
  }
  // Servers start apart from the workers: the first pull waits as long as the first collective.
  const PsSettings& settings = link_.settings();
  // The final weights wait for the slowest worker: the servers watch the workers then.
  const double timeout = clock == kFinalClock ? kForever
                         : pulled_            ? settings.timeout_s
                                              : settings.startup_timeout_s;
  std::vector<PsMessage> replies =
      gather(static_cast<std::int32_t>(Kind::weights), clock, timeout, "weights");
  PullResult result;
  result.applied_pushes = std::numeric_limits<std::int64_t>::max();
  Tensor values = params_.values();
  const bool on_host = values.device().is_cpu();
  Tensor host = on_host ? values : Tensor::empty({params_.numel()}, DType::f32, Device::cpu());
  for (std::size_t s = 0; s < replies.size(); ++s) {
    const Shard& shard = shards_[s];
    copy_floats(replies[s], host.slice(0, shard.begin, shard.end));
    result.applied_pushes = std::min(result.applied_pushes, replies[s].count);
    bytes_pulled_ += static_cast<std::int64_t>(replies[s].payload.size());
    result.staleness = std::max(result.staleness, replies[s].offset);
  }
  if (!on_host) values.copy_from(host);
  result.global_step = result.applied_pushes / link_.workers();
  applied_pushes_ = result.applied_pushes;
  clock_ = clock;
  pulled_ = true;
  result.wait_seconds = std::chrono::duration<double>(Clock::now() - start).count();
  return result;
}

void Client::push(std::int64_t offset, const Tensor& gradients) {
  const std::int64_t end = offset + gradients.numel();
  const Tensor host = gradients.device().is_cpu() ? gradients : gradients.to_host();
  for (std::size_t s = 0; s < shards_.size(); ++s) {
    const Shard& shard = shards_[s];
    const std::int64_t lo = std::max(offset, shard.begin);
    const std::int64_t hi = std::min(end, shard.end);
    if (lo >= hi) continue;
    PsMessage m = message(Kind::push, link_.workers() + static_cast<int>(s), clock_, lo, hi - lo);
    const Tensor piece = host.slice(0, lo - offset, hi - offset).contiguous();
    if (residual_.defined()) {
      auto* residual = reinterpret_cast<float*>(residual_.raw_data()) + lo;
      m.payload = compress_2bit(reinterpret_cast<const float*>(piece.raw_data()), residual, hi - lo,
                                link_.settings().two_bit_threshold);
    } else {
      m.payload = bytes_of(piece);
    }
    bytes_pushed_ += static_cast<std::int64_t>(m.payload.size());
    link_.send(std::move(m));
  }
}

SnapshotResult Client::snapshot(Optimizer& optimizer, std::int64_t step, bool final) {
  for (int s = 0; s < link_.servers(); ++s) {
    link_.send(message(Kind::snapshot, link_.workers() + s, step, 0, final ? 1 : 0));
  }
  // A final snapshot waits for the slowest worker to finish.
  const PsSettings& settings = link_.settings();
  const double timeout =
      final ? std::max(settings.timeout_s, settings.startup_timeout_s) : settings.timeout_s;
  std::vector<PsMessage> replies =
      gather(static_cast<std::int32_t>(Kind::state), step, timeout, "checkpoint state");
  SnapshotResult result;
  result.global_step = std::numeric_limits<std::int64_t>::max();
  Tensor host = Tensor::empty({params_.numel()}, DType::f32, Device::cpu());
  std::vector<OptimizerState> states;
  for (std::size_t s = 0; s < replies.size(); ++s) {
    const Pack p = unpack(replies[s].payload);
    const Shard& shard = shards_[s];
    host.slice(0, shard.begin, shard.end).copy_from(p.at("values"));
    OptimizerState state;
    for (const auto& [name, t] : p.tensors) {
      if (name.rfind("optimizer/", 0) == 0) state[name.substr(10)] = t;
    }
    states.push_back(std::move(state));
    result.global_step = std::min(result.global_step, p.meta["global_step"].as<std::int64_t>());
    result.refused_pushes += p.meta["refused_pushes"].as<std::int64_t>();
    result.dropped_workers =
        std::max(result.dropped_workers, p.meta["dropped_workers"].as<std::int64_t>());
    if (s == 0) {
      for (const auto& c : p.meta["clocks"]) result.clocks.push_back(c.as<std::int64_t>());
    }
    for (const auto& pair : p.meta["staleness"]) {
      result.staleness[pair[0].as<std::int64_t>()] += pair[1].as<std::int64_t>();
    }
  }
  params_.values().copy_from(host);
  OptimizerState merged =
      merge_state(states, shards_, params_.numel(), params_.parameters().size());
  const Device device = params_.values().device();
  for (auto& [name, t] : merged) {
    if (!device.is_cpu() && is_floating(t.dtype())) t = t.to(device);
  }
  if (!merged.empty()) optimizer.load_state(merged);
  return result;
}

void Client::done(bool final_snapshot_follows, bool final_pull_follows) {
  const std::int64_t follows = (final_snapshot_follows ? kDoneSnapshotFollows : 0) |
                               (final_pull_follows ? kDonePullFollows : 0);
  for (int s = 0; s < link_.servers(); ++s) {
    link_.send(message(Kind::done, link_.workers() + s, clock_, 0, follows));
  }
  link_.flush();
}

}  // namespace rig::engine::ps
