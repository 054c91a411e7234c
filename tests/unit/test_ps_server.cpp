// The parameter-server protocol end to end in one process: a server on a
// thread of its own, two workers driven by the test through an in-process
// transport. Round-robin asynchronous updates with max_staleness 1 are
// delayed SGD exactly; a read more than max_staleness ahead waits; a silent
// worker ends the run with a message naming it.
#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <thread>
#include <vector>

#include "engine/ps/client.hpp"
#include "engine/ps/protocol.hpp"
#include "engine/ps/server.hpp"
#include "rig/error.hpp"

namespace {

using rig::PsMessage;
using rig::Tensor;
namespace ps = rig::engine::ps;

// Mailboxes for every process of the job, in this process.
struct Hub {
  std::mutex mutex;
  std::condition_variable changed;
  std::vector<std::deque<PsMessage>> boxes;
};

class FakeLink final : public rig::ParameterServerTransport {
 public:
  FakeLink(Hub& hub, int self, int workers, int servers, rig::PsSettings settings)
      : hub_(hub), self_(self), workers_(workers), servers_(servers), settings_(settings) {}
  int workers() const override { return workers_; }
  int servers() const override { return servers_; }
  int self() const override { return self_; }
  std::string describe(int process) const override {
    return process < workers_ ? "worker " + std::to_string(process)
                              : "server " + std::to_string(process - workers_);
  }
  const rig::PsSettings& settings() const override { return settings_; }
  void send(PsMessage m) override {
    std::lock_guard lock(hub_.mutex);
    const auto to = static_cast<std::size_t>(m.peer);
    m.peer = self_;
    hub_.boxes[to].push_back(std::move(m));
    hub_.changed.notify_all();
  }
  std::optional<PsMessage> receive(std::chrono::milliseconds timeout) override {
    std::unique_lock lock(hub_.mutex);
    auto& box = hub_.boxes[static_cast<std::size_t>(self_)];
    if (!hub_.changed.wait_for(lock, timeout, [&] { return !box.empty(); })) return std::nullopt;
    PsMessage m = std::move(box.front());
    box.pop_front();
    return m;
  }
  void flush() override {}

 private:
  Hub& hub_;
  int self_;
  int workers_;
  int servers_;
  rig::PsSettings settings_;
};

// w <- w - lr g, element by element, in f32.
class PlainSgd final : public rig::Optimizer {
 public:
  explicit PlainSgd(rig::ParameterStore& store) : values_(store.values()), grads_(store.grads()) {}
  void step(double learning_rate) override {
    float* v = values_.data<float>();
    const float* g = grads_.data<float>();
    for (std::int64_t i = 0; i < values_.numel(); ++i)
      v[i] -= static_cast<float>(learning_rate) * g[i];
  }
  std::map<std::string, Tensor> state() const override { return {}; }
  void load_state(const std::map<std::string, Tensor>& /*state*/) override {}
  bool element_wise() const override { return true; }

 private:
  Tensor values_;
  Tensor grads_;
};

class ConstantLr final : public rig::LrPolicy {
 public:
  double learning_rate(std::int64_t /*step*/) const override { return 0.1; }
};

constexpr int kWorkers = 2;
const std::vector<float> kTarget = {1.0F, -2.0F, 0.5F, 3.0F};

// The gradient of 0.5 |w - target|^2.
std::vector<float> gradient(const std::vector<float>& w) {
  std::vector<float> g(w.size());
  for (std::size_t i = 0; i < w.size(); ++i) g[i] = w[i] - kTarget[i];
  return g;
}

void step(std::vector<float>& w, const std::vector<float>& g) {
  for (std::size_t i = 0; i < w.size(); ++i) w[i] -= static_cast<float>(0.1) * g[i];
}

// One job: a server thread and two workers' stores and clients.
struct Job {
  explicit Job(std::int64_t max_staleness, double timeout_s = 30.0) {
    hub.boxes.resize(kWorkers + 1);
    rig::PsSettings settings;
    settings.max_staleness = max_staleness;
    settings.timeout_s = timeout_s;
    settings.startup_timeout_s = timeout_s;
    for (int w = 0; w <= kWorkers; ++w) {
      links.push_back(std::make_unique<FakeLink>(hub, w, kWorkers, 1, settings));
    }
    for (int w = 0; w < kWorkers; ++w) {
      stores.push_back(std::make_unique<rig::ParameterStore>());
      stores.back()->declare("w", {4}, rig::Initializer::zeros());
      stores.back()->allocate(0);
    }
    stores[0]->values().copy_from(
        Tensor::from_vector(std::vector<float>{4.0F, 4.0F, -1.0F, 0.0F}, {4}));
    for (int w = 0; w < kWorkers; ++w) {
      clients.push_back(std::make_unique<ps::Client>(
          *links[static_cast<std::size_t>(w)], *stores[static_cast<std::size_t>(w)],
          ps::plan_for(*stores[static_cast<std::size_t>(w)], 1, true)));
    }
    server_thread = std::thread([this] {
      try {
        ps::ShardServer server(
            *links[kWorkers],
            [](rig::ParameterStore& store, const YAML::Node& /*init*/) {
              return ps::ShardUpdate{std::make_shared<PlainSgd>(store),
                                     std::make_shared<ConstantLr>(), std::nullopt};
            },
            "hash");
        report = server.run();
      } catch (const std::exception& e) {
        server_error = e.what();
      }
    });
    YAML::Node run;
    run["config_hash"] = "hash";
    PlainSgd unused(*stores[0]);
    clients[0]->initialize(unused, run, 0);
  }
  ~Job() {
    if (server_thread.joinable()) server_thread.join();
  }
  std::vector<float> values(int w) const {
    return stores[static_cast<std::size_t>(w)]->values().to_vector();
  }
  // Worker w computes its gradient on the weights it last pulled and pushes it.
  void push(int w) {
    rig::ParameterStore& store = *stores[static_cast<std::size_t>(w)];
    const std::vector<float> g = gradient(values(w));
    store.grads().copy_from(Tensor::from_vector(g, {4}));
    clients[static_cast<std::size_t>(w)]->push(0, store.grads());
  }

  Hub hub;
  std::vector<std::unique_ptr<FakeLink>> links;
  std::vector<std::unique_ptr<rig::ParameterStore>> stores;
  std::vector<std::unique_ptr<ps::Client>> clients;
  std::thread server_thread;
  ps::ServerReport report;
  std::string server_error;
};

// Round robin with max_staleness 1: each update is the gradient at the
// weights one update old, w(t+1) = w(t) - lr g(w(t-1)): delayed SGD, bit for bit.
TEST(PsServer, RoundRobinAsyncIsDelayedSgd) {
  Job job(1);
  std::vector<std::vector<float>> reference = {{4.0F, 4.0F, -1.0F, 0.0F}};
  job.clients[0]->pull(0);
  job.clients[1]->pull(0);
  EXPECT_EQ(job.values(1), reference[0]);
  // Worker 0 goes first and then is always one update ahead.
  job.push(0);
  reference.push_back(reference[0]);
  step(reference.back(), gradient(reference[0]));
  constexpr int kSteps = 10;
  for (std::int64_t c = 1; c <= kSteps; ++c) {
    const ps::PullResult read0 = job.clients[0]->pull(c);
    EXPECT_EQ(job.values(0), reference.back()) << "worker 0 at clock " << c;
    EXPECT_EQ(read0.staleness, 1);
    job.push(1);  // computed on the weights worker 1 pulled one update ago
    const std::vector<float> stale = reference[reference.size() - 2];
    reference.push_back(reference.back());
    step(reference.back(), gradient(stale));
    job.clients[1]->pull(c);
    EXPECT_EQ(job.values(1), reference.back()) << "worker 1 at clock " << c;
    job.push(0);
    const std::vector<float> stale0 = reference[reference.size() - 2];
    reference.push_back(reference.back());
    step(reference.back(), gradient(stale0));
  }
  job.clients[0]->done(true, false);
  job.clients[1]->done(false, false);
  PlainSgd container(*job.stores[0]);
  const ps::SnapshotResult snap = job.clients[0]->snapshot(container, kSteps + 1, true);
  EXPECT_EQ(job.values(0), reference.back());
  EXPECT_EQ(snap.global_step, (2 * kSteps + 1) / kWorkers);
  job.server_thread.join();
  EXPECT_EQ(job.server_error, "");
  EXPECT_EQ(job.report.updates, 2 * kSteps + 1);
  EXPECT_EQ(job.report.staleness.rbegin()->first, 1);
}

// A read more than max_staleness ahead of the slowest worker waits for it.
TEST(PsServer, ReadAheadOfTheBoundWaits) {
  Job job(1);
  job.clients[0]->pull(0);
  job.clients[1]->pull(0);
  job.push(0);
  job.clients[0]->pull(1);  // 1 ahead of worker 1: allowed
  job.push(0);
  // Clock 2 is 2 ahead: no answer until worker 1 pushes.
  job.links[0]->send(ps::message(ps::Kind::pull, kWorkers, 2));
  EXPECT_FALSE(job.links[0]->receive(std::chrono::milliseconds(100)).has_value());
  job.push(1);
  const std::optional<PsMessage> reply = job.links[0]->receive(std::chrono::milliseconds(5000));
  ASSERT_TRUE(reply.has_value());
  EXPECT_EQ(reply->kind, static_cast<std::int32_t>(ps::Kind::weights));
  EXPECT_EQ(reply->clock, 2);
  job.clients[0]->done(false, false);
  job.clients[1]->done(false, false);
}

// Synchronous: the two gradients are averaged into one update.
TEST(PsServer, SynchronousAveragesTheWorkers) {
  Job job(0);
  job.clients[0]->pull(0);
  job.clients[1]->pull(0);
  job.stores[1]->values().copy_from(
      Tensor::from_vector(std::vector<float>{0.0F, 0.0F, 0.0F, 0.0F}, {4}));
  std::vector<float> w = job.values(0);
  const std::vector<float> g0 = gradient(w);
  const std::vector<float> g1 = gradient(job.values(1));
  job.push(0);
  job.push(1);
  job.clients[0]->pull(1);
  std::vector<float> mean(4);
  for (std::size_t i = 0; i < 4; ++i) mean[i] = (g0[i] + g1[i]) * 0.5F;
  step(w, mean);
  EXPECT_EQ(job.values(0), w);
  job.clients[0]->done(false, false);
  job.clients[1]->done(false, false);
}

// Asynchronous workers pull the final weights after their done. Worker 0's
// final snapshot is served as soon as the last worker is done; the server
// must stay until the final pulls announced in the done messages arrive (a
// late one hung cli.parameter_server under load).
TEST(PsServer, StaysForTheFinalPullsAnnounced) {
  Job job(1);
  job.clients[0]->pull(0);
  job.clients[1]->pull(0);
  job.push(0);
  job.push(1);
  job.clients[0]->done(true, true);
  job.clients[1]->done(false, true);
  PlainSgd container(*job.stores[0]);
  job.clients[0]->snapshot(container, 1, true);
  job.clients[0]->pull(ps::kFinalClock);
  std::this_thread::sleep_for(std::chrono::milliseconds(300));  // worker 1 is late
  // The server is still there: a fresh link message gets a reply.
  job.links[1]->send(ps::message(ps::Kind::pull, kWorkers, ps::kFinalClock));
  const std::optional<PsMessage> reply = job.links[1]->receive(std::chrono::milliseconds(5000));
  ASSERT_TRUE(reply.has_value()) << "the server ended before worker 1's final pull";
  EXPECT_EQ(reply->kind, static_cast<std::int32_t>(ps::Kind::weights));
  job.server_thread.join();
  EXPECT_EQ(job.server_error, "");
}

// A worker the others wait for that stays silent ends the job, named.
TEST(PsServer, SilentWorkerIsNamed) {
  Job job(0, 0.3);
  job.clients[0]->pull(0);
  job.clients[1]->pull(0);
  job.push(0);
  EXPECT_THROW(job.clients[0]->pull(1), rig::RunError);
  job.server_thread.join();
  EXPECT_NE(job.server_error.find("worker 1 sent nothing"), std::string::npos) << job.server_error;
}

}  // namespace
