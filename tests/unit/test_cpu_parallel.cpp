// The CPU kernels' thread pool (core/cpu/parallel.cpp): every index of every
// job runs exactly once, back to back, at any thread count, and when the
// machine is oversubscribed so that workers wake after their job's chunks were
// all claimed (they must skip that job, never run the next one's chunks with
// the old one's function).
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <thread>
#include <vector>

#include "cpu/parallel.hpp"

namespace {

// Runs `jobs` parallel_for calls of varying sizes; each writes its job number
// into the indices it covers and counts them. Returns the first mismatch.
::testing::AssertionResult every_index_once(int jobs) {
  std::vector<std::int64_t> owner(6000, -1);
  for (int job = 0; job < jobs; ++job) {
    const std::int64_t n = 1 + (job * 7919) % 6000;
    const std::int64_t grain = 1 + job % 64;
    std::atomic<std::int64_t> covered{0};
    rig::cpu::parallel_for(n, grain, [&](std::int64_t begin, std::int64_t end) {
      for (std::int64_t i = begin; i < end; ++i) owner[static_cast<std::size_t>(i)] = job;
      covered.fetch_add(end - begin, std::memory_order_relaxed);
    });
    if (covered.load() != n) {
      return ::testing::AssertionFailure()
             << "job " << job << " covered " << covered.load() << " of " << n << " indices";
    }
    for (std::int64_t i = 0; i < n; ++i) {
      if (owner[static_cast<std::size_t>(i)] != job) {
        return ::testing::AssertionFailure() << "job " << job << " missed index " << i;
      }
    }
  }
  return ::testing::AssertionSuccess();
}

struct RestoreThreads {
  int threads = rig::cpu::num_threads();
  ~RestoreThreads() { rig::cpu::set_num_threads(threads); }
};

TEST(CpuParallel, EveryIndexOnceAtEveryThreadCount) {
  const RestoreThreads restore;
  for (const int threads : {1, 2, 3, 8}) {
    SCOPED_TRACE(threads);
    rig::cpu::set_num_threads(threads);
    EXPECT_EQ(rig::cpu::num_threads(), threads);
    EXPECT_TRUE(every_index_once(500));
  }
}

TEST(CpuParallel, EveryIndexOnceWhenTheCoresAreBusy) {
  // Threads spinning on every core keep the pool's workers off their cores
  // for whole scheduling periods, so they wake late, often after the caller
  // claimed every chunk and went on to the next job.
  const RestoreThreads restore;
  rig::cpu::set_num_threads(4);
  std::atomic<bool> stop{false};
  std::vector<std::thread> busy;
  const unsigned cores = std::max(1u, std::thread::hardware_concurrency());
  for (unsigned i = 0; i < cores; ++i) {
    busy.emplace_back([&stop] {
      while (!stop.load(std::memory_order_relaxed)) {
      }
    });
  }
  const ::testing::AssertionResult result = every_index_once(1000);
  stop.store(true);
  for (auto& t : busy) t.join();
  EXPECT_TRUE(result);
}

}  // namespace
