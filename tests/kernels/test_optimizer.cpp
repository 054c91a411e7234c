#include "cuda/kernels/optimizer.hpp"

#include <gtest/gtest.h>

#include <cmath>

#include "kernel_test_util.hpp"

namespace rig::kernels::test {
namespace {

constexpr std::int64_t kSizes[] = {1, 7, 33, 1000, 5000};

// Adam's element math (rig/math/optimizer.hpp) in a plain host loop, compiled
// like the kernel without contracted multiply-adds (-ffp-contract=off).
struct HostMath {
  static float sqrt(float x) { return std::sqrt(x); }
  static float max(float a, float b) { return a > b ? a : b; }
};
void host_adam(std::int64_t n, float* p, const float* g, float* m, float* v, float* vmax,
               const AdamUpdate& a) {
  for (std::int64_t i = 0; i < n; ++i) {
    math::adam_step<HostMath>(p[i], g[i], m[i], v[i], vmax != nullptr ? vmax + i : nullptr, a);
  }
}

// The kernel equals the shared element math bit for bit, and so does
// cpu_backend()'s adam_update, whose SIMD clones are compiled without
// contracting multiply-adds (core/CMakeLists.txt), as the GPU's are.
TEST(KernelOptimizer, AdamIsBitEqualToSharedMathAndCpu) {
  for (const std::int64_t n : kSizes) {
    for (const bool amsgrad : {false, true}) {
      for (const bool adamw : {false, true}) {
        SCOPED_TRACE(::testing::Message()
                     << "n " << n << " amsgrad " << amsgrad << " adamw " << adamw);
        const auto seed = static_cast<std::uint32_t>(n);
        std::vector<float> p = uniform(n, -1.0F, 1.0F, seed);
        std::vector<float> m = uniform(n, -0.1F, 0.1F, seed + 1);
        std::vector<float> v = uniform(n, 0.0F, 0.01F, seed + 2);
        std::vector<float> vmax = uniform(n, 0.0F, 0.01F, seed + 3);
        std::vector<float> cp = p, cm = m, cv = v, cvmax = vmax;
        std::vector<float> hp = p, hm = m, hv = v, hvmax = vmax;
        AdamUpdate a;
        a.step_size = 1e-3F;
        a.inv_bc2_sqrt = 1.0F / std::sqrt(1.0F - 0.999F * 0.999F);
        if (adamw) {
          a.shrink = 1.0F - 1e-3F * 0.01F;
        } else {
          a.coupled_decay = 0.01F;
        }
        for (int step = 0; step < 3; ++step) {
          const std::vector<float> grad =
              uniform(n, -2.0F, 2.0F, seed + 10 + static_cast<std::uint32_t>(step));
          cpu().adam_update(n, cp.data(), grad.data(), cm.data(), cv.data(),
                            amsgrad ? cvmax.data() : nullptr, a);
          host_adam(n, hp.data(), grad.data(), hm.data(), hv.data(),
                    amsgrad ? hvmax.data() : nullptr, a);
          run(AdamUpdateKernel{n, p.data(), grad.data(), m.data(), v.data(),
                               amsgrad ? vmax.data() : nullptr, a});
        }
        EXPECT_TRUE(bit_equal(p, hp));
        EXPECT_TRUE(bit_equal(m, hm));
        EXPECT_TRUE(bit_equal(v, hv));
        EXPECT_TRUE(bit_equal(vmax, hvmax));
        EXPECT_TRUE(bit_equal(p, cp));
        EXPECT_TRUE(bit_equal(m, cm));
        EXPECT_TRUE(bit_equal(v, cv));
        EXPECT_TRUE(bit_equal(vmax, cvmax));
      }
    }
  }
}

struct SgdCase {
  bool momentum, nesterov;
  float weight_decay;
};

TEST(KernelOptimizer, SgdIsBitEqualToCpu) {
  for (const std::int64_t n : kSizes) {
    for (const SgdCase c : {SgdCase{false, false, 0.0F}, SgdCase{false, false, 1e-4F},
                            SgdCase{true, false, 1e-4F}, SgdCase{true, true, 0.0F}}) {
      SCOPED_TRACE(::testing::Message()
                   << "n " << n << " momentum " << c.momentum << " nesterov " << c.nesterov);
      const auto seed = static_cast<std::uint32_t>(n + 77);
      std::vector<float> p = uniform(n, -1.0F, 1.0F, seed);
      std::vector<float> buffer = uniform(n, -1.0F, 1.0F, seed + 1);
      std::vector<float> cp = p, cbuffer = buffer;
      SgdUpdate a;
      a.learning_rate = 0.1F;
      a.weight_decay = c.weight_decay;
      a.momentum = c.momentum ? 0.9F : 0.0F;
      a.nesterov = c.nesterov;
      for (int step = 0; step < 3; ++step) {
        a.first = step == 0;
        const std::vector<float> grad =
            uniform(n, -2.0F, 2.0F, seed + 10 + static_cast<std::uint32_t>(step));
        float* b = c.momentum ? buffer.data() : nullptr;
        float* cb = c.momentum ? cbuffer.data() : nullptr;
        cpu().sgd_update(n, cp.data(), grad.data(), cb, a);
        run(SgdUpdateKernel{n, p.data(), grad.data(), b, a});
      }
      EXPECT_TRUE(bit_equal(p, cp));
      EXPECT_TRUE(bit_equal(buffer, cbuffer));
    }
  }
}

// A grid smaller than the buffer: the grid-stride loop covers the rest.
TEST(KernelOptimizer, GridStrideCoversEveryElement) {
  const std::int64_t n = 1000;
  std::vector<float> p = uniform(n, -1.0F, 1.0F, 5), cp = p;
  const std::vector<float> grad = uniform(n, -1.0F, 1.0F, 6);
  SgdUpdate a;
  a.learning_rate = 0.5F;
  cpu().sgd_update(n, cp.data(), grad.data(), nullptr, a);
  simt::emulate(simt::LaunchShape{{2, 1, 1}, {64, 1, 1}, 0},
                SgdUpdateKernel{n, p.data(), grad.data(), nullptr, a});
  EXPECT_TRUE(bit_equal(p, cp));
}

}  // namespace
}  // namespace rig::kernels::test
