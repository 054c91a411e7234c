// Shared by rig_bench's workloads (bench_layers.cpp, bench_resnet_train.cpp,
// bench_transformer.cpp):
// settings, step timing, memory measures and the key=value report line.
#pragma once

#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "rig/random.hpp"
#include "rig/tensor.hpp"

namespace rig_bench {

struct Settings {
  int warmup = 5;
  int iterations = 30;
  int threads = 2;
};

inline long max_rss_bytes() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return usage.ru_maxrss * 1024L;  // Linux reports KiB
}

inline rig::Tensor random_tensor(rig::Shape shape, std::uint32_t purpose) {
  rig::Tensor t = rig::Tensor::empty(std::move(shape));
  rig::fill_normal({1, 0, 0, purpose}, t.data<float>(), t.numel());
  return t;
}

struct Timing {
  double median_ms = 0.0;
  double min_ms = 0.0;
};

// Runs `step(i)` warmup + iterations times; times the last `iterations`.
inline Timing time_steps(const Settings& s, const std::function<void(int)>& step) {
  using Clock = std::chrono::steady_clock;
  for (int i = 0; i < s.warmup; ++i) step(i);
  std::vector<double> ms;
  for (int i = 0; i < s.iterations; ++i) {
    const auto start = Clock::now();
    step(s.warmup + i);
    ms.push_back(std::chrono::duration<double, std::milli>(Clock::now() - start).count());
  }
  std::sort(ms.begin(), ms.end());
  const auto n = ms.size();
  const double median = n % 2 == 1 ? ms[n / 2] : 0.5 * (ms[n / 2 - 1] + ms[n / 2]);
  return {median, ms.front()};
}

// One line of key=value pairs; `extra` is appended (" key=value ...").
inline void report(const char* workload, const Timing& t, const rig::AllocatorStats& stats,
                   std::size_t baseline_bytes, long rss_before, const std::string& extra) {
  std::printf(
      "workload=%s ms_median=%.3f ms_min=%.3f alloc_peak_bytes=%zu "
      "alloc_peak_above_start_bytes=%zu "
      "rss_delta_bytes=%ld%s\n",
      workload, t.median_ms, t.min_ms, stats.peak_bytes,
      stats.peak_bytes > baseline_bytes ? stats.peak_bytes - baseline_bytes : 0,
      max_rss_bytes() - rss_before, extra.c_str());
}

// Workloads defined in other files.
// FLOPs of the GEMMs in one forward of the encoder + decoder layer pair
// (attention scores and context counted dense, as both frameworks compute them).
inline double transformer_forward_gemm_flops(double batch, double src, double tgt, double model,
                                             double hidden) {
  const double ns = batch * src;
  const double nt = batch * tgt;
  const double projection = 2.0 * model * model;  // per token, per projection
  const double encoder =
      4 * ns * projection + 2 * (2.0 * batch * src * src * model) + 2 * (2.0 * ns * model * hidden);
  const double decoder = 4 * nt * projection + 2 * (2.0 * batch * tgt * tgt * model) +
                         2 * nt * projection + 2 * ns * projection +
                         2 * (2.0 * batch * tgt * src * model) + 2 * (2.0 * nt * model * hidden);
  return encoder + decoder;
}

void bench_resnet20_train(const Settings& s);     // bench_resnet_train.cpp
void bench_transformer_train(const Settings& s);  // bench_transformer.cpp
void bench_transformer_beam(const Settings& s);   // bench_transformer.cpp

}  // namespace rig_bench
