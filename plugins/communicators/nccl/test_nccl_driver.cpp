// Drives the nccl communicator plugin against its fake NCCL (RIG_NCCL_FAKE=1)
// on the emulated CUDA device (RIG_CUDA_EMULATOR=1), under mpirun (see
// CMakeLists.txt next to it):
//   test_nccl_driver checks    every collective on device and host buffers,
//                              buckets issued while earlier ones run, waited
//                              out of order, timing, barrier
//   test_nccl_driver timeout   two allreduces with timeout_s 2 (the fake's hooks
//                              make a rank hang or fail in the second)
//   test_nccl_driver abort     rank 1 calls abort("...", 5)
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>
#include <yaml-cpp/yaml.h>
#include <boost/dll/shared_library.hpp>

#include "rig/plugin.hpp"

namespace {

using rig::Device;
using rig::DType;
using rig::ReduceOp;
using rig::Tensor;
using Clock = std::chrono::steady_clock;

struct Plugin {
  boost::dll::shared_library library{std::string(RIG_NCCL_PLUGIN)};
  const rig::PluginDescriptor& descriptor =
      library.get_alias<const rig::PluginDescriptor>("rig_plugin");

  std::unique_ptr<rig::Communicator> make(double timeout_s) const {
    YAML::Node params;
    params["timeout_s"] = timeout_s;
    params["startup_timeout_s"] = 600.0;
    return descriptor.make_communicator(params, rig::CommunicatorContext{});
  }
};

int g_failures = 0;
int g_rank = -1;

void expect(bool ok, const std::string& what) {
  if (!ok) {
    ++g_failures;
    std::fprintf(stderr, "rank %d: FAIL: %s\n", g_rank, what.c_str());
  }
}

float value(int rank, std::int64_t i) {
  return static_cast<float>((rank + 1) * (i % 7 + 1));
}

Tensor filled(std::int64_t n, DType dtype, Device device,
              const std::function<float(std::int64_t)>& f) {
  std::vector<float> values(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) values[static_cast<std::size_t>(i)] = f(i);
  return Tensor::from_vector(values, {n}).to(dtype).to(device);
}

float expected_reduction(int size, std::int64_t i, ReduceOp op) {
  float sum = 0;
  for (int r = 0; r < size; ++r) sum += value(r, i);
  return op == ReduceOp::sum ? sum : sum / static_cast<float>(size);
}

bool timing_sane(const rig::CommRequest& request, Clock::time_point issued,
                 Clock::time_point waited) {
  const auto t = request.timing();
  // The fake's events are stamped on its stream thread; the anchor is taken
  // just after its own event, so allow a millisecond of slack before `issued`.
  return t.known && issued - std::chrono::milliseconds(50) <= t.start && t.start <= t.end &&
         t.end <= waited + std::chrono::milliseconds(50);
}

void check_allreduce(rig::Communicator& comm, DType dtype, Device device, ReduceOp op,
                     std::int64_t n) {
  const int rank = comm.rank();
  Tensor t = filled(n, dtype, device, [&](std::int64_t i) { return value(rank, i); });
  const auto issued = Clock::now();
  auto request = comm.allreduce(t, op);
  request->wait();
  const auto waited = Clock::now();
  const auto got = t.to_vector();
  std::int64_t wrong = 0;
  for (std::int64_t i = 0; i < n; ++i) {
    if (got[static_cast<std::size_t>(i)] != expected_reduction(comm.size(), i, op)) ++wrong;
  }
  const auto what =
      fmt::format("allreduce {} {} of {} on {}", op == ReduceOp::sum ? "sum" : "average",
                  rig::dtype_name(dtype), n, rig::to_string(device));
  expect(wrong == 0, fmt::format("{}: {} wrong", what, wrong));
  expect(request->done(), what + ": done() after wait()");
  expect(timing_sane(*request, issued, waited), what + ": timing known and within issue..wait");
}

// Buckets as the engine issues them during backward: all in flight at once,
// then waited (here in reverse order); each must hold its own sum.
void check_buckets(rig::Communicator& comm, Device device) {
  const int rank = comm.rank();
  Tensor flat = filled(10000, DType::f32, device, [&](std::int64_t i) { return value(rank, i); });
  std::vector<std::unique_ptr<rig::CommRequest>> requests;
  const std::int64_t bounds[] = {0, 1000, 1001, 4000, 10000};
  for (int b = 3; b >= 0; --b) {
    requests.push_back(comm.allreduce(flat.slice(0, bounds[b], bounds[b + 1]), ReduceOp::average));
  }
  for (auto it = requests.rbegin(); it != requests.rend(); ++it) (*it)->wait();
  Clock::time_point previous_end{};
  for (const auto& r : requests) {
    const auto t = r->timing();
    expect(t.known && t.start >= previous_end - std::chrono::milliseconds(1),
           "buckets ran in issue order on the communication stream");
    previous_end = t.end;
  }
  const auto got = flat.to_vector();
  std::int64_t wrong = 0;
  for (std::int64_t i = 0; i < 10000; ++i) {
    if (got[static_cast<std::size_t>(i)] != expected_reduction(comm.size(), i, ReduceOp::average))
      ++wrong;
  }
  expect(wrong == 0, fmt::format("buckets on {}: {} wrong", rig::to_string(device), wrong));
}

void check_broadcast_and_allgather(rig::Communicator& comm, Device device) {
  const int rank = comm.rank();
  const int size = comm.size();
  const int root = size - 1;
  Tensor b = filled(100, DType::f32, device, [&](std::int64_t i) { return value(rank, i); });
  comm.broadcast(b, root)->wait();
  const auto got = b.to_vector();
  bool ok = true;
  for (std::int64_t i = 0; i < 100; ++i)
    ok = ok && got[static_cast<std::size_t>(i)] == value(root, i);
  expect(ok, "broadcast from the last rank on " + rig::to_string(device));

  Tensor input = filled(5, DType::i32, device, [&](std::int64_t i) { return value(rank, i); });
  Tensor output = Tensor::zeros({5 * size}, DType::i32, device);
  comm.allgather(input, output)->wait();
  // In place: the input is this rank's slot of the output.
  Tensor in_place = Tensor::zeros({5 * size}, DType::i32, device);
  in_place.slice(0, 5 * rank, 5 * rank + 5).copy_from(input);
  comm.allgather(in_place.slice(0, 5 * rank, 5 * rank + 5), in_place)->wait();
  const auto a = output.to_vector();
  const auto c = in_place.to_vector();
  ok = true;
  for (int r = 0; r < size; ++r) {
    for (std::int64_t i = 0; i < 5; ++i) {
      const auto at = static_cast<std::size_t>(r * 5 + i);
      ok = ok && a[at] == value(r, i) && c[at] == value(r, i);
    }
  }
  expect(ok, "allgather (separate input and in place) on " + rig::to_string(device));
}

int run_checks(const Plugin& plugin) {
  auto comm = plugin.make(60);
  g_rank = comm->rank();
  const Device cuda = Device::cuda(0);
  for (const Device device : {cuda, Device::cpu()}) {
    for (const DType dtype : {DType::f32, DType::f16, DType::bf16}) {
      check_allreduce(*comm, dtype, device, ReduceOp::sum, 1000);
      check_allreduce(*comm, dtype, device, ReduceOp::average, 1000);
    }
    check_allreduce(*comm, DType::f32, device, ReduceOp::sum, 0);
    check_buckets(*comm, device);
    check_broadcast_and_allgather(*comm, device);
  }
  comm->barrier();
  std::fprintf(stderr, "rank %d of %d: %s\n", g_rank, comm->size(),
               g_failures == 0 ? "all checks passed" : "FAILED");
  return g_failures == 0 ? 0 : 1;
}

int run_timeout(const Plugin& plugin) {
  auto comm = plugin.make(2);
  g_rank = comm->rank();
  for (int k = 0; k < 2; ++k) {
    Tensor t = Tensor::ones({1024}, DType::f32, Device::cuda(0));
    comm->allreduce(t, ReduceOp::sum)->wait();
  }
  std::this_thread::sleep_for(std::chrono::seconds(60));  // the watchdog ends the job first
  return 0;
}

int run_abort(const Plugin& plugin) {
  auto comm = plugin.make(600);
  g_rank = comm->rank();
  comm->barrier();
  if (comm->rank() == 1) comm->abort("rank 1 failed on purpose (test)", 5);
  std::this_thread::sleep_for(std::chrono::seconds(60));
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "";
  try {
    Plugin plugin;
    if (mode == "checks") return run_checks(plugin);
    if (mode == "timeout") return run_timeout(plugin);
    if (mode == "abort") return run_abort(plugin);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "rank %d: error: %s\n", g_rank, e.what());
    return 1;
  }
  std::fprintf(stderr, "usage: test_nccl_driver checks | timeout | abort\n");
  return 2;
}
