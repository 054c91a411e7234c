// Drives the mpi communicator plugin under mpirun (tests/mpi/CMakeLists.txt).
//   comm_mpi_driver checks N   every collective, dtype and edge case on N ranks
//   comm_mpi_driver timeout    rank 1 never joins an allreduce (timeout_s 2)
//   comm_mpi_driver stalled    rank 1 stops (SIGSTOP) inside a large allreduce
//   comm_mpi_driver late_start rank 1 reaches the first collective 3 s late (timeout_s 1)
//   comm_mpi_driver startup_timeout  rank 1 never reaches the first collective
//   comm_mpi_driver killed     rank 1 kills itself with SIGKILL mid-run
//   comm_mpi_driver abort      rank 1 calls abort("...", 5)
// Loads the plugin the way rig does, so MPI is started by the plugin's thread.
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>
#include <yaml-cpp/yaml.h>
#include <boost/dll/shared_library.hpp>

#include "rig/plugin.hpp"

namespace {

using rig::DType;
using rig::ReduceOp;
using rig::Tensor;
using Clock = std::chrono::steady_clock;

struct Plugin {
  boost::dll::shared_library library{std::string(RIG_MPI_PLUGIN)};
  const rig::PluginDescriptor& descriptor =
      library.get_alias<const rig::PluginDescriptor>("rig_plugin");

  // The schema's default start-up limit (600 s) unless given: the timeout
  // tests' tight limits then apply from the first meeting on, whatever the
  // ranks' start-up skew on a busy machine.
  std::unique_ptr<rig::Communicator> make(double timeout_s, double startup_timeout_s = 600) const {
    YAML::Node params;
    params["timeout_s"] = timeout_s;
    params["startup_timeout_s"] = startup_timeout_s;
    return descriptor.make_communicator(params, rig::CommunicatorContext{});
  }
};

int g_failures = 0;
int g_checks = 0;
int g_rank = -1;

void expect(bool ok, const std::string& what) {
  ++g_checks;
  if (!ok) {
    ++g_failures;
    std::fprintf(stderr, "rank %d: FAIL: %s\n", g_rank, what.c_str());
  }
}

// Element i of rank r's buffer: small integers, exact in every dtype.
float value(int rank, std::int64_t i) {
  return static_cast<float>((rank + 1) * (i % 7 + 1));
}

Tensor filled(std::int64_t n, DType dtype, const std::function<float(std::int64_t)>& f) {
  Tensor t = Tensor::empty({n}, dtype);
  for (std::int64_t i = 0; i < n; ++i) {
    const float v = f(i);
    switch (dtype) {
      case DType::f32:
        t.data<float>()[i] = v;
        break;
      case DType::f16:
        t.data<std::uint16_t>()[i] = rig::float_to_half(v);
        break;
      case DType::bf16:
        t.data<std::uint16_t>()[i] = rig::float_to_bfloat16(v);
        break;
      case DType::i32:
        t.data<std::int32_t>()[i] = static_cast<std::int32_t>(v);
        break;
      case DType::i64:
        t.data<std::int64_t>()[i] = static_cast<std::int64_t>(v);
        break;
      case DType::u8:
        t.data<std::uint8_t>()[i] = static_cast<std::uint8_t>(v);
        break;
    }
  }
  return t;
}

// The reduction of value(r, i) over every rank, as the dtype computes it.
float expected_reduction(int size, std::int64_t i, DType dtype, ReduceOp op) {
  float sum = 0;
  for (int r = 0; r < size; ++r) sum += value(r, i);
  if (op == ReduceOp::sum) return sum;
  if (rig::is_floating(dtype)) return sum / static_cast<float>(size);
  return static_cast<float>(static_cast<std::int64_t>(sum) / size);  // truncates
}

bool timing_sane(const rig::CommRequest& request, Clock::time_point issued,
                 Clock::time_point waited) {
  const auto t = request.timing();
  return t.known && issued <= t.start && t.start <= t.end && t.end <= waited;
}

void check_allreduce(rig::Communicator& comm, DType dtype, ReduceOp op, std::int64_t n) {
  const int rank = comm.rank();
  Tensor t = filled(n, dtype, [&](std::int64_t i) { return value(rank, i); });
  const auto issued = Clock::now();
  auto request = comm.allreduce(t, op);
  request->wait();
  const auto waited = Clock::now();
  const auto got = t.to_vector();
  std::int64_t wrong = 0;
  std::int64_t first = -1;
  for (std::int64_t i = 0; i < n; ++i) {
    if (got[static_cast<std::size_t>(i)] != expected_reduction(comm.size(), i, dtype, op)) {
      if (first < 0) first = i;
      ++wrong;
    }
  }
  const auto what = fmt::format("allreduce {} {} of {}", op == ReduceOp::sum ? "sum" : "average",
                                rig::dtype_name(dtype), n);
  expect(wrong == 0,
         fmt::format("{}: {} wrong, first at {}: {} expected {}", what, wrong, first,
                     first < 0 ? 0.0F : got[static_cast<std::size_t>(first)],
                     first < 0 ? 0.0F : expected_reduction(comm.size(), first, dtype, op)));
  expect(request->done(), what + ": done() after wait()");
  expect(timing_sane(*request, issued, waited), what + ": timing known and within issue..wait");
}

// f16 / bf16 sums are computed in f32 and rounded to nearest even: 1 + 2^-11
// is a tie in f16 (rounds to 1), 1 + 2^-8 one in bf16 (rounds to 1).
void check_half_rounding(rig::Communicator& comm) {
  if (comm.size() != 2) return;  // with more ranks the order of roundings matters
  const float tiny_f16 = 1.0F / 2048;
  const float tiny_bf16 = 1.0F / 256;
  for (const auto& [dtype, tiny] :
       std::vector<std::pair<DType, float>>{{DType::f16, tiny_f16}, {DType::bf16, tiny_bf16}}) {
    Tensor t = filled(3, dtype, [&comm, tiny = tiny](std::int64_t i) {
      // element 0: tie -> 1; element 1: 1 + 3 x tiny -> rounds up to 1 + 4 x tiny; element 2: 3 x
      // tiny
      if (comm.rank() == 0) return i == 2 ? 2 * tiny : 1.0F;
      return i == 0 ? tiny : (i == 1 ? 3 * tiny : tiny);
    });
    comm.allreduce(t, ReduceOp::sum)->wait();
    const auto got = t.to_vector();
    expect(got[0] == 1.0F && got[1] == 1.0F + 4 * tiny && got[2] == 3 * tiny,
           fmt::format("{} sum rounds to nearest even: got {} {} {}", rig::dtype_name(dtype),
                       got[0], got[1], got[2]));
  }
}

void check_broadcast(rig::Communicator& comm, int root, DType dtype) {
  const int rank = comm.rank();
  const std::int64_t n = 1001;
  Tensor t =
      filled(n, dtype, [&](std::int64_t i) { return static_cast<float>(rank * 10 + i % 9); });
  comm.broadcast(t, root)->wait();
  const auto got = t.to_vector();
  bool ok = true;
  for (std::int64_t i = 0; i < n; ++i) {
    ok = ok && got[static_cast<std::size_t>(i)] == static_cast<float>(root * 10 + i % 9);
  }
  expect(ok, fmt::format("broadcast {} from root {}", rig::dtype_name(dtype), root));
}

void check_allgather(rig::Communicator& comm, bool in_place) {
  const int rank = comm.rank();
  const int size = comm.size();
  const std::int64_t n = 333;
  Tensor output = Tensor::zeros({size * n}, DType::i64);
  Tensor input =
      in_place ? output.slice(0, rank * n, (rank + 1) * n) : Tensor::empty({n}, DType::i64);
  for (std::int64_t i = 0; i < n; ++i) input.data<std::int64_t>()[i] = rank * 100000 + i;
  comm.allgather(input, output)->wait();
  bool ok = true;
  for (int r = 0; r < size; ++r) {
    for (std::int64_t i = 0; i < n; ++i)
      ok = ok && output.data<std::int64_t>()[r * n + i] == r * 100000 + i;
  }
  expect(ok, fmt::format("allgather i64{}", in_place ? " in place" : ""));
}

// Many requests in flight at once: they run in issue order and all finish right.
void check_queued(rig::Communicator& comm) {
  const int rank = comm.rank();
  std::vector<Tensor> buffers;
  std::vector<std::unique_ptr<rig::CommRequest>> requests;
  const auto issued = Clock::now();
  for (int k = 0; k < 64; ++k) {
    const std::int64_t n = 1 + (k * 7919) % 50000;
    buffers.push_back(filled(n, DType::f32, [&](std::int64_t i) { return value(rank, i + k); }));
    requests.push_back(comm.allreduce(buffers.back(), ReduceOp::sum));
  }
  requests.back()->wait();
  bool all_done = true;
  for (auto& r : requests) all_done = all_done && r->done();
  expect(all_done, "queued: every earlier request is done once the last one is");
  for (auto& r : requests) r->wait();
  const auto waited = Clock::now();
  bool in_order = true;
  bool sane = true;
  bool values = true;
  for (std::size_t k = 0; k < requests.size(); ++k) {
    sane = sane && timing_sane(*requests[k], issued, waited);
    if (k > 0) in_order = in_order && requests[k - 1]->timing().end <= requests[k]->timing().start;
    const auto got = buffers[k].to_vector();
    for (std::size_t i = 0; i < got.size(); ++i) {
      values = values && got[i] == expected_reduction(comm.size(), static_cast<std::int64_t>(i + k),
                                                      DType::f32, ReduceOp::sum);
    }
  }
  expect(sane, "queued: every timing known and within issue..wait");
  expect(in_order, "queued: each ran after the one issued before it");
  expect(values, "queued: every result right");
}

void check_empty(rig::Communicator& comm) {
  Tensor empty = Tensor::empty({0}, DType::f32);
  auto a = comm.allreduce(empty, ReduceOp::average);
  auto b = comm.broadcast(empty, comm.size() - 1);
  auto c = comm.allgather(empty, Tensor::empty({0}, DType::f32));
  a->wait();
  b->wait();
  c->wait();
  expect(a->timing().known && b->timing().known && c->timing().known, "empty buffers complete");
}

template <class F>
void expect_invalid(F&& f, const std::string& what, const std::string& needle) {
  try {
    f();
    expect(false, what + ": no exception");
  } catch (const std::invalid_argument& e) {
    expect(std::string(e.what()).find(needle) != std::string::npos,
           fmt::format("{}: message '{}' names '{}'", what, e.what(), needle));
  }
}

// The ranks before this one with the same host name: the local rank when
// ranks are numbered host by host, as mpirun does by default.
int expected_local_rank(rig::Communicator& comm) {
  constexpr std::int64_t kName = 256;
  Tensor mine = Tensor::zeros({kName}, DType::u8);
  ::gethostname(reinterpret_cast<char*>(mine.data<std::uint8_t>()), kName - 1);
  Tensor all = Tensor::zeros({comm.size() * kName}, DType::u8);
  comm.allgather(mine, all)->wait();
  const auto* names = reinterpret_cast<const char*>(all.data<std::uint8_t>());
  const std::string me(names + comm.rank() * kName);
  int before = 0;
  for (int r = 0; r < comm.rank(); ++r) before += std::string(names + r * kName) == me ? 1 : 0;
  return before;
}

int run_checks(const Plugin& plugin, int expected_size) {
  auto comm = plugin.make(60);
  g_rank = comm->rank();
  expect(comm->size() == expected_size, fmt::format("size {} == {}", comm->size(), expected_size));
  expect(comm->rank() >= 0 && comm->rank() < comm->size(), "0 <= rank < size");
  const int expected_local = expected_local_rank(*comm);
  expect(comm->local_rank() == expected_local,
         fmt::format("local_rank {} == {} (ranks before this one on its host)", comm->local_rank(),
                     expected_local));
  for (DType dtype : {DType::f32, DType::f16, DType::bf16, DType::i32, DType::i64}) {
    for (ReduceOp op : {ReduceOp::sum, ReduceOp::average}) check_allreduce(*comm, dtype, op, 4099);
  }
  check_allreduce(*comm, DType::f32, ReduceOp::average, 3'000'001);  // MPI's large-message path
  check_allreduce(*comm, DType::f16, ReduceOp::sum, 1'000'003);
  check_half_rounding(*comm);
  for (int root = 0; root < comm->size(); ++root) check_broadcast(*comm, root, DType::f32);
  check_broadcast(*comm, comm->size() - 1, DType::bf16);
  check_allgather(*comm, false);
  check_allgather(*comm, true);
  comm->barrier();
  check_queued(*comm);
  check_empty(*comm);
  expect_invalid([&] { comm->broadcast(Tensor::zeros({4}), comm->size()); }, "broadcast root",
                 "is not a rank");
  expect_invalid(
      [&] { comm->allgather(Tensor::zeros({4}), Tensor::zeros({4 * comm->size() + 1})); },
      "allgather output size", "must hold");
  expect_invalid(
      [&] {
        comm->allreduce(Tensor::zeros({4, 4}).transpose(0, 1), ReduceOp::sum);
      },
      "non-contiguous buffer", "not contiguous");
  comm->barrier();
  if (g_rank == 0 || g_failures > 0) {
    std::fprintf(stderr, "rank %d: %d checks, %d failed\n", g_rank, g_checks, g_failures);
  }
  return g_failures == 0 ? 0 : 1;
}

// Rank 1 never issues the allreduce rank 0 waits for.
int run_timeout(const Plugin& plugin) {
  auto comm = plugin.make(2);
  Tensor t = Tensor::ones({1'000'000});
  comm->allreduce(t, ReduceOp::sum)->wait();  // #1: both take part
  if (comm->rank() == 1) {
    std::this_thread::sleep_for(std::chrono::seconds(60));
    return 0;
  }
  comm->allreduce(t, ReduceOp::sum)->wait();  // #2: rank 1 is asleep
  std::fprintf(stderr, "rank 0: allreduce returned although rank 1 never joined\n");
  return 0;
}

// Rank 1 stops (SIGSTOP) 100 ms into a 512 MB allreduce that takes longer:
// the blocking MPI call cannot return, and the watchdog ends the job.
int run_stalled(const Plugin& plugin) {
  auto comm = plugin.make(2);
  Tensor t = Tensor::zeros({128 << 20});
  comm->allreduce(Tensor::ones({1000}), ReduceOp::sum)->wait();  // #1: in step
  std::thread stopper;
  if (comm->rank() == 1) {
    stopper = std::thread([] {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      std::raise(SIGSTOP);
    });
  }
  comm->allreduce(t, ReduceOp::sum)->wait();  // #2
  if (stopper.joinable()) stopper.join();
  std::fprintf(stderr, "rank %d: allreduce #2 returned although rank 1 stopped\n", comm->rank());
  return 0;
}

// Rank 1 starts 3 s late: the first collective waits for it (startup_timeout_s),
// although timeout_s is 1; the second, issued together, is held to timeout_s.
int run_late_start(const Plugin& plugin) {
  auto comm = plugin.make(1);
  if (comm->rank() == 1) std::this_thread::sleep_for(std::chrono::seconds(3));
  Tensor t = Tensor::ones({1000});
  comm->allreduce(t, ReduceOp::sum)->wait();  // #1
  comm->allreduce(t, ReduceOp::sum)->wait();  // #2
  const bool right = t.data<float>()[0] == 4.0F;
  std::fprintf(stderr, "rank %d: late start %s\n", comm->rank(), right ? "met" : "WRONG SUM");
  return right ? 0 : 1;
}

// Rank 1 never reaches the first collective: rank 0 gives up after
// startup_timeout_s (2 s here), naming that key.
int run_startup_timeout(const Plugin& plugin) {
  auto comm = plugin.make(1, 2);
  if (comm->rank() == 1) {
    std::this_thread::sleep_for(std::chrono::seconds(60));
    return 0;
  }
  Tensor t = Tensor::ones({1000});
  comm->allreduce(t, ReduceOp::sum)->wait();
  std::fprintf(stderr, "rank 0: allreduce returned although rank 1 never joined\n");
  return 0;
}

volatile std::sig_atomic_t g_terminated = 0;

// Rank 1 dies by SIGKILL after a few collectives; the others go on issuing
// them. Like the engine, the driver catches SIGTERM and carries on.
int run_killed(const Plugin& plugin) {
  std::signal(SIGTERM, [](int) { g_terminated = 1; });
  auto comm = plugin.make(600);
  Tensor t = Tensor::ones({100'000});
  for (int step = 0; step < 1000000; ++step) {
    if (step == 5 && comm->rank() == 1) std::raise(SIGKILL);
    comm->allreduce(t, ReduceOp::average)->wait();
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return 0;
}

int run_abort(const Plugin& plugin) {
  auto comm = plugin.make(600);
  comm->barrier();
  if (comm->rank() == 1) comm->abort("rank 1 failed on purpose (test)", 5);
  Tensor t = Tensor::ones({1000});
  comm->allreduce(t, ReduceOp::sum)->wait();
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "";
  try {
    Plugin plugin;
    if (mode == "checks" && argc > 2) return run_checks(plugin, std::stoi(argv[2]));
    if (mode == "timeout") return run_timeout(plugin);
    if (mode == "stalled") return run_stalled(plugin);
    if (mode == "late_start") return run_late_start(plugin);
    if (mode == "startup_timeout") return run_startup_timeout(plugin);
    if (mode == "killed") return run_killed(plugin);
    if (mode == "abort") return run_abort(plugin);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "rank %d: error: %s\n", g_rank, e.what());
    return 1;
  }
  std::fprintf(
      stderr,
      "usage: comm_mpi_driver checks N | timeout | stalled | late_start | startup_timeout | "
      "killed | abort\n");
  return 2;
}
