#include "cuda/kernels/novograd.hpp"

#include <gtest/gtest.h>

#include <vector>

#include "kernel_test_util.hpp"

namespace rig::kernels::test {
namespace {

// Slices of very different sizes, one empty, one of a single element.
const std::vector<FlatSlice> kSlices = {{0, 1}, {1, 0}, {1, 700}, {701, 33}, {734, 5000}};
constexpr std::int64_t kElements = 5734;

NovogradUpdate novograd_args(float weight_decay) {
  NovogradUpdate a;
  a.learning_rate = 0.01F;
  a.beta1 = 0.95F;
  a.beta2 = 0.98F;
  a.c2 = 0.02F;
  a.epsilon = 1e-8F;
  a.weight_decay = weight_decay;
  a.avg = 0.05F;
  return a;
}

TEST(KernelNovograd, ThreeStepsMatchCpu) {
  for (const float weight_decay : {0.0F, 0.001F}) {
    for (const std::uint64_t seed : kSeeds) {
      SCOPED_TRACE(::testing::Message() << "wd " << weight_decay << " seed " << seed);
      const NovogradUpdate a = novograd_args(weight_decay);
      std::vector<float> p = uniform(kElements, -1.0F, 1.0F, 1);
      std::vector<float> m = uniform(kElements, -0.1F, 0.1F, 2);
      std::vector<float> ema(kSlices.size(), 0.0F);  // the first step takes the moment as is
      std::vector<float> cp = p, cm = m, cema = ema;
      for (int step = 0; step < 3; ++step) {
        const std::vector<float> g =
            uniform(kElements, -2.0F, 2.0F, 10 + static_cast<std::uint32_t>(step));
        cpu().novograd_update(cp.data(), g.data(), cm.data(), cema.data(), kSlices.data(),
                              static_cast<std::int64_t>(kSlices.size()), a);
        run(NovogradUpdateKernel{p.data(), g.data(), m.data(), ema.data(), kSlices.data(),
                                 static_cast<std::int64_t>(kSlices.size()), a},
            seed);
      }
      // The moments are f64 sums in another order rounded to f32.
      EXPECT_TRUE(close(ema, cema, 0.0F, 1e-6F));
      EXPECT_TRUE(close(p, cp, 1e-7F, 1e-5F));
      EXPECT_TRUE(close(m, cm, 1e-7F, 1e-5F));
    }
  }
}

TEST(KernelNovograd, PlanIsOneBlockPerSlice) {
  const NovogradUpdateKernel k{.count = 5};
  EXPECT_EQ(k.plan(h100()).grid.x, 5U);
  EXPECT_EQ(k.plan(h100()).block.x, kBlockThreads);
}

}  // namespace
}  // namespace rig::kernels::test
