// bench_allreduce: plain MPI_Allreduce against rig's mpi communicator (the
// plugin, loaded as rig loads it: the engine's code path) for f32 sum buffers
// of 1 KB .. 256 MB. With --dtype f16 or bf16, rig sums half-precision
// buffers (its own MPI_Op, as for fp16-compressed gradients) and "plain" is
// MPI_Allreduce of as many bytes of f32: what the custom op costs. Run under mpirun
// (tools/bench/allreduce does). Prints, per size, the median time over the slowest rank, algbw
// (bytes / time) and busbw (algbw x 2(n-1)/n) of both, and rig / plain as a ratio of bandwidths.
//
// This program initialises MPI itself (MPI_THREAD_MULTIPLE, or SERIALIZED),
// so the plugin uses it and leaves finalizing to it. The main thread and the
// communication thread never call MPI at the same time: the main thread's
// calls (barriers, the plain allreduce) happen while no rig collective is in
// flight.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <mpi.h>
#include <yaml-cpp/yaml.h>
#include <boost/dll/shared_library.hpp>

#include "rig/plugin.hpp"

namespace {

using Clock = std::chrono::steady_clock;

struct Options {
  std::int64_t min_bytes = 1024;
  std::int64_t max_bytes = std::int64_t{256} << 20;
  int factor = 4;        // sizes grow by this factor
  double seconds = 0.3;  // time each method about this long per size
  int min_runs = 5;
  int max_runs = 200;
  int warmup = 3;
  rig::DType dtype = rig::DType::f32;
};

[[noreturn]] void usage(const char* message) {
  std::fprintf(stderr,
               "bench_allreduce: %s\nusage: bench_allreduce [--min-bytes N] [--max-bytes N] "
               "[--factor F] [--seconds S] [--min-runs N] [--max-runs N] [--warmup N] "
               "[--dtype f32|f16|bf16]\n",
               message);
  MPI_Abort(MPI_COMM_WORLD, 2);
  std::exit(2);
}

rig::DType parse_dtype(const std::string& text) {
  if (text == "f32") return rig::DType::f32;
  if (text == "f16") return rig::DType::f16;
  if (text == "bf16") return rig::DType::bf16;
  usage("--dtype is f32, f16 or bf16");
}

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string key = argv[i];
    if (i + 1 >= argc) usage(("missing value after " + key).c_str());
    const char* value = argv[++i];
    if (key == "--min-bytes") {
      o.min_bytes = std::atoll(value);
    } else if (key == "--max-bytes") {
      o.max_bytes = std::atoll(value);
    } else if (key == "--factor") {
      o.factor = std::atoi(value);
    } else if (key == "--seconds") {
      o.seconds = std::atof(value);
    } else if (key == "--min-runs") {
      o.min_runs = std::atoi(value);
    } else if (key == "--max-runs") {
      o.max_runs = std::atoi(value);
    } else if (key == "--warmup") {
      o.warmup = std::atoi(value);
    } else if (key == "--dtype") {
      o.dtype = parse_dtype(value);
    } else {
      usage(("unknown option " + key).c_str());
    }
  }
  if (o.min_bytes < 4 || o.max_bytes < o.min_bytes || o.factor < 2 || o.min_runs < 1 ||
      o.max_runs < o.min_runs) {
    usage("bad sizes or run counts");
  }
  return o;
}

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const auto n = v.size();
  return n % 2 == 1 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

// The slowest rank's value, on rank 0.
double slowest(double mine) {
  double max = 0;
  MPI_Reduce(&mine, &max, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
  return max;
}

std::string size_text(std::int64_t bytes) {
  if (bytes >= (std::int64_t{1} << 20)) return fmt::format("{} MB", bytes >> 20);
  if (bytes >= 1024) return fmt::format("{} KB", bytes >> 10);
  return fmt::format("{} B", bytes);
}

std::string time_text(double s) {
  if (s < 1e-3) return fmt::format("{:.1f} us", s * 1e6);
  return fmt::format("{:.2f} ms", s * 1e3);
}

}  // namespace

int main(int argc, char** argv) {
  int provided = MPI_THREAD_SINGLE;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  if (provided < MPI_THREAD_SERIALIZED) {
    std::fprintf(stderr, "bench_allreduce: MPI gave thread level %d, below SERIALIZED\n", provided);
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  const Options options = parse(argc, argv);
  int rank = 0;
  int size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  {
    boost::dll::shared_library library{std::string(RIG_BENCH_MPI_PLUGIN)};
    const auto& plugin = library.get_alias<const rig::PluginDescriptor>("rig_plugin");
    YAML::Node params;
    params["timeout_s"] = 600;
    auto comm = plugin.make_communicator(params, rig::CommunicatorContext{});

    if (rank == 0) {
      const auto dtype = std::string(rig::dtype_name(options.dtype));
      std::printf("allreduce %s sum, %d ranks: median of each size's runs, on the slowest rank%s\n",
                  dtype.c_str(), size,
                  options.dtype == rig::DType::f32 ? "" : " (plain: the same bytes of f32)");
      std::printf("%9s %5s | %10s %8s %8s | %10s %8s %8s | %9s\n", "size", "runs", "plain", "algbw",
                  "busbw", "rig", "algbw", "busbw", "rig/plain");
      std::printf("%9s %5s | %10s %8s %8s | %10s %8s %8s |\n", "", "", "time", "GB/s", "GB/s",
                  "time", "GB/s", "GB/s");
    }
    for (std::int64_t bytes = options.min_bytes; bytes <= options.max_bytes;
         bytes *= options.factor) {
      const std::int64_t count = bytes / 4;  // f32 elements of the plain allreduce
      // One buffer for both, so neither gets warmer memory.
      rig::Tensor buffer = rig::Tensor::zeros(
          {bytes / static_cast<std::int64_t>(rig::dtype_size(options.dtype))}, options.dtype);
      auto* data = buffer.raw_data();
      auto plain = [&] {
        MPI_Barrier(MPI_COMM_WORLD);
        const auto start = Clock::now();
        MPI_Allreduce(MPI_IN_PLACE, data, static_cast<int>(count), MPI_FLOAT, MPI_SUM,
                      MPI_COMM_WORLD);
        return seconds_since(start);
      };
      auto with_rig = [&] {
        MPI_Barrier(MPI_COMM_WORLD);  // no rig collective is in flight here
        const auto start = Clock::now();
        comm->allreduce(buffer, rig::ReduceOp::sum)->wait();
        return seconds_since(start);
      };
      double estimate = 0;
      for (int i = 0; i < options.warmup; ++i) estimate = std::max(plain(), with_rig());
      // Rank 0 picks the number of runs for all.
      int runs = std::clamp(static_cast<int>(options.seconds / std::max(estimate, 1e-9)),
                            options.min_runs, options.max_runs);
      MPI_Bcast(&runs, 1, MPI_INT, 0, MPI_COMM_WORLD);
      std::vector<double> plain_times;
      std::vector<double> rig_times;
      for (int i = 0; i < runs; ++i) {  // interleaved: both see the same machine
        plain_times.push_back(plain());
        rig_times.push_back(with_rig());
      }
      const double plain_s = slowest(median(plain_times));
      const double rig_s = slowest(median(rig_times));
      if (rank == 0) {
        const double bus = 2.0 * (size - 1) / size;
        const double plain_bw = static_cast<double>(bytes) / plain_s / 1e9;
        const double rig_bw = static_cast<double>(bytes) / rig_s / 1e9;
        std::printf("%9s %5d | %10s %8.3f %8.3f | %10s %8.3f %8.3f | %8.1f%%\n",
                    size_text(bytes).c_str(), runs, time_text(plain_s).c_str(), plain_bw,
                    plain_bw * bus, time_text(rig_s).c_str(), rig_bw, rig_bw * bus,
                    100.0 * rig_bw / plain_bw);
        std::fflush(stdout);
      }
    }
    MPI_Barrier(MPI_COMM_WORLD);
  }  // the communicator (its last barrier) before MPI_Finalize
  MPI_Finalize();
  return 0;
}
