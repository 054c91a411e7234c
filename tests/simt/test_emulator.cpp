// The host SIMT emulator (simt/emulator.hpp): thread and block indices, the
// collectives of simt/collectives.hpp, barriers, shuffles, shared memory, and
// the errors it reports for kernels the GPU would run wrongly.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "simt/call_site.hpp"
#include "simt/collectives.hpp"
#include "simt/emulator.hpp"

namespace rig::simt {
namespace {

// Runs `body` and returns the SimtError's message ("" when none is thrown).
template <class Body>
std::string simt_error(Body&& body) {
  try {
    body();
  } catch (const SimtError& e) {
    return e.what();
  }
  return "";
}

// ---- indices ---------------------------------------------------------------

struct Indices {
  int* count;  // per global thread
  Dim3* thread;
  Dim3* block;
  unsigned* lane_warp;  // lane + 1000 * warp
  template <class Ctx>
  void operator()(Ctx& ctx) const {
    const Dim3 b = ctx.block_idx(), g = ctx.grid_dim();
    const std::size_t block_linear = b.x + g.x * (b.y + std::size_t{g.y} * b.z);
    const std::size_t id = block_linear * ctx.block_threads() + ctx.thread_rank();
    count[id] += 1;
    thread[id] = ctx.thread_idx();
    block[id] = b;
    lane_warp[id] = ctx.lane() + 1000 * ctx.warp();
  }
};

TEST(SimtEmulator, EveryThreadOfA3dGridRunsOnceWithItsIndices) {
  const LaunchShape shape{Dim3{3, 2, 2}, Dim3{4, 3, 5}, 0};
  const std::size_t threads = shape.grid.count() * shape.block.count();
  std::vector<int> count(threads, 0);
  std::vector<Dim3> thread(threads), block(threads);
  std::vector<unsigned> lane_warp(threads);
  emulate(shape, Indices{count.data(), thread.data(), block.data(), lane_warp.data()},
          EmulatorOptions{.seed = 7});
  const unsigned bt = 60;
  for (unsigned bz = 0; bz < 2; ++bz)
    for (unsigned by = 0; by < 2; ++by)
      for (unsigned bx = 0; bx < 3; ++bx)
        for (unsigned r = 0; r < bt; ++r) {
          const std::size_t id = (bx + 3 * (by + 2 * bz)) * bt + r;
          ASSERT_EQ(count[id], 1) << id;
          EXPECT_EQ(block[id], (Dim3{bx, by, bz}));
          EXPECT_EQ(thread[id], (Dim3{r % 4, (r / 4) % 3, r / 12}));
          EXPECT_EQ(lane_warp[id], r % 32 + 1000 * (r / 32));
        }
}

// ---- collectives -------------------------------------------------------------

struct BlockReduce {
  const float* in;
  float* sums;  // per thread: every thread gets the block's result
  float* maxima;
  template <class Ctx>
  void operator()(Ctx& ctx) const {
    const std::size_t i = std::size_t{ctx.block_idx().x} * ctx.block_threads() + ctx.thread_rank();
    sums[i] = block_sum(ctx, in[i]);
    maxima[i] = block_max(ctx, in[i]);
  }
};

// The order of simt/collectives.hpp on the host: a butterfly within each warp,
// then the warps' results in order.
template <class Op>
float host_block_reduce(const float* v, unsigned n, Op op) {
  std::vector<float> warp_results;
  for (unsigned w = 0; w < n / 32; ++w) {
    float lanes[32];
    for (unsigned l = 0; l < 32; ++l) lanes[l] = v[w * 32 + l];
    for (unsigned mask = 16; mask > 0; mask /= 2) {
      float next[32];
      for (unsigned l = 0; l < 32; ++l) next[l] = op(lanes[l], lanes[l ^ mask]);
      std::memcpy(lanes, next, sizeof lanes);
    }
    warp_results.push_back(lanes[0]);
  }
  float total = warp_results[0];
  for (std::size_t w = 1; w < warp_results.size(); ++w) total = op(total, warp_results[w]);
  return total;
}

TEST(SimtEmulator, BlockSumAndMaxAreBitEqualToTheHostInTheSameOrder) {
  for (const unsigned threads : {256u, 1024u}) {
    const unsigned blocks = 3;
    std::vector<float> in(std::size_t{threads} * blocks);
    std::mt19937 rng(threads);
    std::uniform_real_distribution<float> mag(-8.f, 8.f);
    for (auto& x : in) x = std::ldexp(mag(rng), static_cast<int>(mag(rng)));
    std::vector<float> first_sums;
    for (const std::uint64_t seed : {0u, 1u, 2u, 3u}) {
      std::vector<float> sums(in.size()), maxima(in.size());
      emulate(LaunchShape{Dim3{blocks}, Dim3{threads}, 0},
              BlockReduce{in.data(), sums.data(), maxima.data()}, EmulatorOptions{.seed = seed});
      for (unsigned b = 0; b < blocks; ++b) {
        const float* v = in.data() + std::size_t{b} * threads;
        const float want_sum = host_block_reduce(v, threads, Sum{});
        const float want_max = host_block_reduce(v, threads, Max{});
        for (unsigned t = 0; t < threads; ++t) {
          const std::size_t i = std::size_t{b} * threads + t;
          ASSERT_EQ(std::memcmp(&sums[i], &want_sum, sizeof(float)), 0)
              << "threads " << threads << " seed " << seed << " block " << b << ": " << sums[i]
              << " vs " << want_sum;
          ASSERT_EQ(maxima[i], want_max);
        }
      }
      if (first_sums.empty()) first_sums = sums;
      EXPECT_EQ(std::memcmp(sums.data(), first_sums.data(), sums.size() * sizeof(float)), 0);
    }
  }
}

// ---- barriers and shared memory ----------------------------------------------

struct ReverseThroughShared {
  const float* in;
  float* out;
  bool barrier;
  template <class Ctx>
  void operator()(Ctx& ctx) const {
    float* tile = ctx.template shared<float>();
    const unsigned t = ctx.thread_rank(), n = ctx.block_threads();
    const std::size_t base = std::size_t{ctx.block_idx().x} * n;
    tile[t] = in[base + t];
    if (barrier) ctx.sync();
    out[base + t] = tile[n - 1 - t];
  }
};

std::vector<float> reverse_blocks(const std::vector<float>& in, unsigned threads) {
  std::vector<float> want(in.size());
  for (std::size_t b = 0; b < in.size() / threads; ++b)
    for (unsigned t = 0; t < threads; ++t)
      want[b * threads + t] = in[b * threads + threads - 1 - t];
  return want;
}

TEST(SimtEmulator, SharedMemoryWithABarrierIsRightForEverySeed) {
  const unsigned threads = 128, blocks = 4;
  std::vector<float> in(threads * blocks);
  for (std::size_t i = 0; i < in.size(); ++i) in[i] = static_cast<float>(i) * 0.5f;
  const auto want = reverse_blocks(in, threads);
  for (std::uint64_t seed = 0; seed < 8; ++seed) {
    std::vector<float> out(in.size());
    emulate(LaunchShape{Dim3{blocks}, Dim3{threads}, threads * sizeof(float)},
            ReverseThroughShared{in.data(), out.data(), true}, EmulatorOptions{.seed = seed});
    EXPECT_EQ(out, want) << "seed " << seed;
  }
}

// The brief's requirement: the emulator catches a removed barrier. Without the
// sync(), a thread reads its partner's slot before the partner wrote it: the
// poison (NaN) or a stale value comes out.
TEST(SimtEmulator, ARemovedBarrierIsCaught) {
  const unsigned threads = 128, blocks = 4;
  std::vector<float> in(threads * blocks);
  for (std::size_t i = 0; i < in.size(); ++i) in[i] = static_cast<float>(i) * 0.5f;
  const auto want = reverse_blocks(in, threads);
  int wrong_seeds = 0;
  bool saw_poison = false;
  for (std::uint64_t seed = 0; seed < 16; ++seed) {
    std::vector<float> out(in.size());
    emulate(LaunchShape{Dim3{blocks}, Dim3{threads}, threads * sizeof(float)},
            ReverseThroughShared{in.data(), out.data(), false}, EmulatorOptions{.seed = seed});
    if (out != want) ++wrong_seeds;
    for (const float x : out) saw_poison = saw_poison || std::isnan(x);
  }
  EXPECT_GT(wrong_seeds, 0) << "no seed exposed the missing barrier";
  EXPECT_TRUE(saw_poison) << "unwritten shared memory should read as NaN";
}

struct ReadPoison {
  float* first;  // per block: shared<float>()[0] before anything writes it
  double* scratch;
  template <class Ctx>
  void operator()(Ctx& ctx) const {
    if (ctx.thread_rank() == 0) {
      first[ctx.block_idx().x] = ctx.template shared<float>()[0];
      scratch[ctx.block_idx().x] = ctx.template reduce_scratch<double>()[31];
      EXPECT_EQ(reinterpret_cast<std::uintptr_t>(ctx.template shared<float>()) % 16, 0u);
      EXPECT_EQ(reinterpret_cast<std::uintptr_t>(ctx.template reduce_scratch<float>()) % 16, 0u);
      EXPECT_EQ(ctx.shared_bytes(), 64u);
    }
    ctx.sync();
    ctx.template shared<float>()[ctx.thread_rank()] = 1.0f;  // the next block must not see it
    ctx.template reduce_scratch<double>()[ctx.thread_rank()] = 2.0;
  }
};

TEST(SimtEmulator, SharedMemoryIsPoisonedAtEveryBlockStart) {
  std::vector<float> first(5, 0.f);
  std::vector<double> scratch(5, 0.);
  emulate(LaunchShape{Dim3{5}, Dim3{16}, 64}, ReadPoison{first.data(), scratch.data()});
  for (int b = 0; b < 5; ++b) {
    EXPECT_TRUE(std::isnan(first[b])) << b;
    EXPECT_TRUE(std::isnan(scratch[b])) << b;
  }
}

// Threads record the order they pass a point before and after a barrier.
struct RecordOrder {
  std::vector<unsigned>* order;
  template <class Ctx>
  void operator()(Ctx& ctx) const {
    order->push_back(ctx.thread_rank());
    ctx.sync();
    order->push_back(1000 + ctx.thread_rank());
  }
};

TEST(SimtEmulator, TheSeedShufflesTheInterleavingDeterministically) {
  auto run = [](std::uint64_t seed) {
    std::vector<unsigned> order;
    emulate(LaunchShape{Dim3{2}, Dim3{64}, 0}, RecordOrder{&order}, EmulatorOptions{.seed = seed});
    return order;
  };
  const auto a = run(1), b = run(1), c = run(2);
  EXPECT_EQ(a, b);
  EXPECT_NE(a, c);
  ASSERT_EQ(a.size(), 256u);
  // Within a block, every thread passes the barrier only after all arrived.
  for (std::size_t block = 0; block < 2; ++block) {
    for (std::size_t i = 0; i < 64; ++i) EXPECT_LT(a[block * 128 + i], 1000u);
    for (std::size_t i = 64; i < 128; ++i) EXPECT_GE(a[block * 128 + i], 1000u);
  }
}

// ---- barrier divergence ----------------------------------------------------------

// The lines of HalfSync's two sync() calls, recorded by the kernel itself.
unsigned half_sync_lines[2] = {0, 0};

struct HalfSync {
  bool other_sync;  // the other half waits at a second sync() instead of returning
  template <class Ctx>
  void operator()(Ctx& ctx) const {
    if (ctx.thread_rank() < 16) {
      half_sync_lines[0] = CallSite::current().line() + 1;
      ctx.sync();
    } else if (other_sync) {
      half_sync_lines[1] = CallSite::current().line() + 1;
      ctx.sync();
    }
  }
};

TEST(SimtEmulator, ASyncThatHalfTheBlockSkipsIsBarrierDivergence) {
  const std::string what = simt_error([] {
    emulate(LaunchShape{Dim3{2, 3}, Dim3{32}, 0}, HalfSync{false});
  });
  ASSERT_NE(what, "");
  EXPECT_NE(what.find("barrier divergence"), std::string::npos) << what;
  EXPECT_NE(what.find("block ("), std::string::npos) << what;
  EXPECT_NE(what.find("threads 0-15 wait at sync() in tests/simt/test_emulator.cpp:" +
                      std::to_string(half_sync_lines[0])),
            std::string::npos)
      << what;
  EXPECT_NE(what.find("threads 16-31 have exited"), std::string::npos) << what;
}

TEST(SimtEmulator, TwoDifferentSyncCallsAreBarrierDivergence) {
  const std::string what = simt_error([] {
    emulate(LaunchShape{Dim3{1}, Dim3{64}, 0}, HalfSync{true});
  });
  EXPECT_NE(what.find("barrier divergence"), std::string::npos) << what;
  EXPECT_NE(what.find("test_emulator.cpp:" + std::to_string(half_sync_lines[0]) + ":"),
            std::string::npos)
      << what;
  EXPECT_NE(what.find("test_emulator.cpp:" + std::to_string(half_sync_lines[1]) + ":"),
            std::string::npos)
      << what;
  EXPECT_NE(what.find("threads 16-63 wait at sync()"), std::string::npos) << what;
}

// ---- shuffles --------------------------------------------------------------------

template <class T>
struct Shuffles {
  T* out;  // 6 results per thread
  template <class Ctx>
  void operator()(Ctx& ctx) const {
    const unsigned r = ctx.thread_rank(), lane = ctx.lane();
    const T v = value(r);
    T* o = out + 6 * std::size_t{r};
    o[0] = ctx.shfl(v, (lane + 3) % 32);
    o[1] = ctx.shfl(v, lane + 35);  // src_lane % 32
    o[2] = ctx.shfl_xor(v, 5u);
    o[3] = ctx.shfl_down(v, 4u);
    o[4] = ctx.shfl_down(v, 40u);  // past lane 31: own value
    o[5] = warp_sum(ctx, v);
  }
  static T value(unsigned r) {
    if constexpr (std::is_floating_point_v<T>) {
      return static_cast<T>(r) * T(0.25) - T(3);
    } else if constexpr (std::is_signed_v<T>) {
      return static_cast<T>(r) * 7 - 100;
    } else {
      return static_cast<T>(r) * 7 +
             (sizeof(T) == 8 ? static_cast<T>(std::uint64_t{1} << 40) : T(0));
    }
  }
};

template <class T>
void check_shuffles() {
  const unsigned threads = 64;
  std::vector<T> out(6 * threads);
  emulate(LaunchShape{Dim3{1}, Dim3{threads}, 0}, Shuffles<T>{out.data()},
          EmulatorOptions{.seed = 3});
  for (unsigned r = 0; r < threads; ++r) {
    const unsigned lane = r % 32, base = r - lane;
    auto v = [&](unsigned l) { return Shuffles<T>::value(base + l); };
    const T* o = out.data() + 6 * r;
    EXPECT_EQ(o[0], v((lane + 3) % 32)) << r;
    EXPECT_EQ(o[1], v((lane + 35) % 32)) << r;
    EXPECT_EQ(o[2], v(lane ^ 5)) << r;
    EXPECT_EQ(o[3], lane + 4 < 32 ? v(lane + 4) : v(lane)) << r;
    EXPECT_EQ(o[4], v(lane)) << r;
    T lanes[32];
    for (unsigned l = 0; l < 32; ++l) lanes[l] = v(l);
    for (unsigned mask = 16; mask > 0; mask /= 2) {
      T next[32];
      for (unsigned l = 0; l < 32; ++l) next[l] = lanes[l] + lanes[l ^ mask];
      for (unsigned l = 0; l < 32; ++l) lanes[l] = next[l];
    }
    EXPECT_EQ(o[5], lanes[lane]) << r;
  }
}

TEST(SimtEmulator, ShufflesExchangeEveryType) {
  check_shuffles<float>();
  check_shuffles<double>();
  check_shuffles<std::int32_t>();
  check_shuffles<std::uint32_t>();
  check_shuffles<std::int64_t>();
  check_shuffles<std::uint64_t>();
}

struct WarpSumOf {
  float* out;
  bool half_returns;
  template <class Ctx>
  void operator()(Ctx& ctx) const {
    if (half_returns && ctx.lane() >= 16) return;
    out[ctx.thread_rank()] = warp_sum(ctx, 1.0f);
  }
};

TEST(SimtEmulator, AShuffleInAPartialWarpIsOverInactiveLanes) {
  std::vector<float> out(48);
  const std::string what = simt_error([&] {
    emulate(LaunchShape{Dim3{1}, Dim3{48}, 0}, WarpSumOf{out.data(), false});
  });
  EXPECT_NE(what.find("shuffle over inactive lanes"), std::string::npos) << what;
  EXPECT_NE(what.find("warp 1"), std::string::npos) << what;
  EXPECT_NE(what.find("lanes 0-15 wait at shfl_xor() in "), std::string::npos) << what;
  EXPECT_NE(what.find("lanes 16-31 do not exist (the block has 48 threads)"), std::string::npos)
      << what;
}

TEST(SimtEmulator, AShuffleAfterHalfTheWarpReturnedIsOverInactiveLanes) {
  std::vector<float> out(32);
  const std::string what = simt_error([&] {
    emulate(LaunchShape{Dim3{2}, Dim3{32}, 0}, WarpSumOf{out.data(), true});
  });
  EXPECT_NE(what.find("shuffle over inactive lanes"), std::string::npos) << what;
  EXPECT_NE(what.find("lanes 16-31 have exited"), std::string::npos) << what;
  EXPECT_NE(what.find("collectives.hpp:"), std::string::npos) << what;
}

struct ShuffleBesideABarrier {
  template <class Ctx>
  void operator()(Ctx& ctx) const {
    if (ctx.lane() == 0) {
      ctx.sync();
    } else {
      (void)ctx.shfl(1, 0u);
    }
  }
};

TEST(SimtEmulator, ALaneAtABarrierIsInactiveForAShuffle) {
  const std::string what = simt_error([] {
    emulate(LaunchShape{Dim3{1}, Dim3{32}, 0}, ShuffleBesideABarrier{});
  });
  EXPECT_NE(what.find("shuffle over inactive lanes"), std::string::npos) << what;
  EXPECT_NE(what.find("lane 0 waits at sync()"), std::string::npos) << what;
  EXPECT_NE(what.find("lanes 1-31 wait at shfl()"), std::string::npos) << what;
}

// ---- exceptions and validation -----------------------------------------------------

struct Throws {
  template <class Ctx>
  void operator()(Ctx& ctx) const {
    std::vector<float> local(100, 1.f);  // must be freed when the launch stops
    ctx.sync();
    if (ctx.block_idx().x == 1 && ctx.thread_rank() == 7) {
      throw std::runtime_error("kernel failed at thread 7");
    }
    ctx.sync();
    local[0] = block_sum(ctx, local[1]);
  }
};

TEST(SimtEmulator, AnExceptionFromTheKernelPropagatesOutOfEmulate) {
  for (std::uint64_t seed = 0; seed < 4; ++seed) {
    try {
      emulate(LaunchShape{Dim3{3}, Dim3{64}, 0}, Throws{}, EmulatorOptions{.seed = seed});
      ADD_FAILURE() << "no exception";
    } catch (const std::runtime_error& e) {
      EXPECT_STREQ(e.what(), "kernel failed at thread 7");
    }
  }
  // The emulator is usable again afterwards.
  std::vector<float> out(64);
  emulate(LaunchShape{Dim3{1}, Dim3{64}, 0}, WarpSumOf{out.data(), false});
  EXPECT_EQ(out[63], 32.f);
}

struct DivergesWithLocals {
  template <class Ctx>
  void operator()(Ctx& ctx) const {
    std::string local(1000, 'x');  // heap memory on every fiber's stack
    if (ctx.thread_rank() % 2 == 0) ctx.sync();
  }
};

TEST(SimtEmulator, ADivergedLaunchLeavesNothingBehind) {
  for (int i = 0; i < 3; ++i) {
    EXPECT_NE(simt_error([] {
                emulate(LaunchShape{Dim3{2}, Dim3{256}, 0}, DivergesWithLocals{});
              }).find("barrier divergence"),
              std::string::npos);
  }
}

// Counts the destructors of the kernels' locals.
int destroyed = 0;
struct CountsDestruction {
  ~CountsDestruction() { ++destroyed; }
};

struct DivergesWithACounter {
  template <class Ctx>
  void operator()(Ctx& ctx) const {
    CountsDestruction local;
    if (ctx.thread_rank() % 2 == 0) ctx.sync();
  }
};

TEST(SimtEmulator, AStoppedLaunchUnwindsTheThreadsWaitingInside) {
  destroyed = 0;
  EXPECT_NE(simt_error([] {
              emulate(LaunchShape{Dim3{1}, Dim3{64}, 0}, DivergesWithACounter{});
            }),
            "");
  EXPECT_EQ(destroyed, 64);  // 32 returned, 32 unwound from their sync()
}

struct Nested {
  template <class Ctx>
  void operator()(Ctx&) const {
    emulate(LaunchShape{Dim3{1}, Dim3{1}, 0}, Nested{});
  }
};

TEST(SimtEmulator, EmulateInsideAKernelIsAnError) {
  EXPECT_NE(simt_error([] {
              emulate(LaunchShape{Dim3{1}, Dim3{1}, 0}, Nested{});
            }).find("inside an emulated kernel"),
            std::string::npos);
}

struct Nothing {
  template <class Ctx>
  void operator()(Ctx&) const {}
};

TEST(SimtEmulator, LaunchesCudaRefusesAreErrors) {
  const auto launch = [](LaunchShape shape, EmulatorOptions options = {}) {
    return simt_error([&] { emulate(shape, Nothing{}, options); });
  };
  EXPECT_NE(launch({Dim3{1}, Dim3{1025}, 0}).find("1 to 1024 threads"), std::string::npos);
  EXPECT_NE(launch({Dim3{1}, Dim3{32, 32, 2}, 0}).find("1 to 1024 threads"), std::string::npos);
  EXPECT_NE(launch({Dim3{1}, Dim3{1, 1, 65}, 0}).find("(1024,1024,64)"), std::string::npos);
  EXPECT_NE(launch({Dim3{0}, Dim3{32}, 0}).find("at least 1"), std::string::npos);
  EXPECT_NE(launch({Dim3{1, 65536}, Dim3{32}, 0}).find("(2147483647,65535,65535)"),
            std::string::npos);
  const std::string shared = launch({Dim3{1}, Dim3{32}, 227 * 1024 + 1});
  EXPECT_NE(shared.find("232449 bytes of dynamic shared memory"), std::string::npos) << shared;
  EXPECT_NE(shared.find("max_shared_bytes"), std::string::npos) << shared;
  EXPECT_EQ(launch({Dim3{1}, Dim3{32}, 227 * 1024}), "");
  EXPECT_NE(launch({Dim3{1}, Dim3{32}, 4096}, EmulatorOptions{.max_shared_bytes = 1024}), "");
  EXPECT_EQ(launch({Dim3{1}, Dim3{1024}, 0}), "");
}

// ---- speed -----------------------------------------------------------------------------

struct ThreeBarriers {
  float* out;
  template <class Ctx>
  void operator()(Ctx& ctx) const {
    float* tile = ctx.template shared<float>();
    const unsigned t = ctx.thread_rank(), n = ctx.block_threads();
    tile[t] = static_cast<float>(t);
    ctx.sync();
    const float a = tile[(t + 1) % n];
    ctx.sync();
    tile[t] = a;
    ctx.sync();
    out[std::size_t{ctx.block_idx().x} * n + t] = tile[(t + 1) % n];
  }
};

TEST(SimtEmulator, SixtyFourBlocksOf256ThreadsRunQuickly) {
  std::vector<float> out(64 * 256);
  const auto start = std::chrono::steady_clock::now();
  emulate(LaunchShape{Dim3{64}, Dim3{256}, 256 * sizeof(float)}, ThreeBarriers{out.data()});
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  RecordProperty("seconds", std::to_string(seconds));
  std::printf("64 blocks x 256 threads, 3 barriers: %.3f s\n", seconds);
  for (std::size_t i = 0; i < out.size(); ++i) ASSERT_EQ(out[i], static_cast<float>((i + 2) % 256));
#if !defined(__SANITIZE_ADDRESS__)
  EXPECT_LT(seconds, 1.0);
#endif
}

}  // namespace
}  // namespace rig::simt
