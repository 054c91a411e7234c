#include "cuda/kernels/larc.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "kernel_test_util.hpp"

namespace rig::kernels::test {
namespace {

// The three kernels of Backend::larc, with the host's chunk table.
void larc(const std::vector<float>& values, std::vector<float>& grads,
          const std::vector<FlatSlice>& slices, const LarcOptions& options, std::uint64_t seed) {
  const auto count = static_cast<std::int64_t>(slices.size());
  if (count == 0) return;
  std::vector<std::int64_t> starts(slices.size() + 1);
  const std::int64_t chunks = larc_chunk_starts(slices.data(), count, starts.data());
  std::vector<double> scratch(larc_scratch_bytes(count, chunks) / sizeof(double) + 1, -3.0);
  double* partial = scratch.data();
  auto* ratio = reinterpret_cast<float*>(partial + 2 * chunks);
  run(LarcPartials{values.data(), grads.data(), slices.data(), starts.data(), count, chunks,
                   partial},
      seed);
  run(LarcRatios{partial, starts.data(), count, options, ratio}, seed);
  run(LarcScale{grads.data(), slices.data(), starts.data(), count, chunks, ratio}, seed);
}

// Slices of every kind: empty, one element, a partial block, more than one
// chunk, gaps between slices (their elements must stay as they are), all
// values or all gradients zero.
std::vector<FlatSlice> slices() {
  return {{0, 0}, {1, 1}, {4, 37}, {50, 5000}, {5060, 300}, {5400, 0}, {5400, 64}, {5500, 40}};
}
constexpr std::int64_t kElements = 5600;

struct Inputs {
  std::vector<float> values, grads;
};
Inputs inputs() {
  Inputs in{uniform(kElements, -1.0F, 1.0F, 31), uniform(kElements, -0.01F, 0.01F, 32)};
  for (std::int64_t i = 5400; i < 5464; ++i) in.values[static_cast<std::size_t>(i)] = 0.0F;
  for (std::int64_t i = 5500; i < 5540; ++i) in.grads[static_cast<std::size_t>(i)] = 0.0F;
  return in;
}

// The norms are summed in another order than the CPU's, so the f32 ratio can
// differ in its last bit: gradients within 2 ulp (relative 2.5e-7); the
// elements outside the slices and the slices left alone: bit-equal.
TEST(KernelLarc, MatchesCpu) {
  const LarcOptions options[] = {
      {.eta = 0.002, .clip = true, .min_update = 1e-7, .epsilon = 1e-7, .learning_rate = 0.1},
      {.eta = 0.002, .clip = false, .min_update = 1e-7, .epsilon = 1e-7, .learning_rate = 0.1},
      {.eta = 1.0, .clip = true, .min_update = 1e-7, .epsilon = 1e-7, .learning_rate = 0.1},
      {.eta = 0.002, .clip = true, .min_update = 1e-7, .epsilon = 1e-7, .learning_rate = 0.0},
      {.eta = 0.002, .clip = false, .min_update = 0.5, .epsilon = 1e-7, .learning_rate = 0.1},
      // A huge ratio (zero gradients, tiny epsilon): saturated to the f32 range.
      {.eta = 1.0, .clip = false, .min_update = 1e-7, .epsilon = 1e-300, .learning_rate = 0.1},
  };
  int which = 0;
  for (const LarcOptions& o : options) {
    SCOPED_TRACE(::testing::Message() << "options " << which++);
    const Inputs in = inputs();
    std::vector<float> want = in.grads;
    const std::vector<FlatSlice> s = slices();
    cpu().larc(in.values.data(), want.data(), s.data(), static_cast<std::int64_t>(s.size()), o);
    std::vector<float> first;
    for (const std::uint64_t seed : kSeeds) {
      std::vector<float> got = in.grads;
      larc(in.values, got, s, o, seed);
      EXPECT_TRUE(close(got, want, 0.0F, 2.5e-7F));
      if (first.empty()) {
        first = got;
      } else {
        EXPECT_TRUE(bit_equal(got, first));
      }
    }
    // Outside the slices: untouched.
    std::vector<float> got = in.grads;
    larc(in.values, got, s, o, kSeeds[0]);
    for (const std::int64_t i : {2, 3, 41, 49, 5360, 5399, 5464, 5499, 5540, 5599}) {
      EXPECT_EQ(got[static_cast<std::size_t>(i)], in.grads[static_cast<std::size_t>(i)]);
    }
  }
}

// Non-finite gradients: clip mode leaves the slice alone (a NaN denominator is
// not > 0), scale mode multiplies it by NaN, as on the CPU.
TEST(KernelLarc, NonFiniteGradients) {
  for (const bool clip : {true, false}) {
    Inputs in = inputs();
    in.grads[100] = NAN;
    in.grads[5070] = INFINITY;
    const LarcOptions o{.eta = 0.002, .clip = clip, .learning_rate = 0.1};
    const std::vector<FlatSlice> s = slices();
    std::vector<float> want = in.grads, got = in.grads;
    cpu().larc(in.values.data(), want.data(), s.data(), static_cast<std::int64_t>(s.size()), o);
    larc(in.values, got, s, o, kSeeds[0]);
    EXPECT_TRUE(close(got, want, 0.0F, 2.5e-7F));
  }
}

TEST(KernelLarc, ChunkTable) {
  const std::vector<FlatSlice> s = {{0, 0}, {0, kLarcChunk}, {kLarcChunk, kLarcChunk + 1}, {0, 0}};
  std::vector<std::int64_t> starts(5);
  EXPECT_EQ(larc_chunk_starts(s.data(), 4, starts.data()), 3);
  EXPECT_EQ(starts, (std::vector<std::int64_t>{0, 0, 1, 3, 3}));
  for (std::int64_t j = 0; j < 3; ++j) {
    EXPECT_EQ(larc_slice_of(starts.data(), 4, j), j == 0 ? 1 : 2);
  }
}

}  // namespace
}  // namespace rig::kernels::test
