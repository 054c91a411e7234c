#include "cuda/kernels/optimizer.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <type_traits>
#include <vector>

#include "kernel_test_util.hpp"
#include "rig/half.hpp"

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
                            amsgrad ? cvmax.data() : nullptr, a, {});
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
        cpu().sgd_update(n, cp.data(), grad.data(), cb, a, {});
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
  cpu().sgd_update(n, cp.data(), grad.data(), nullptr, a, {});
  simt::emulate(simt::LaunchShape{{2, 1, 1}, {64, 1, 1}, 0},
                SgdUpdateKernel{n, p.data(), grad.data(), nullptr, a});
  EXPECT_TRUE(bit_equal(p, cp));
}

}  // namespace
// ---- Mixed precision folded into the update ---------------------------------------------

// 16-bit gradients (the values of uniform(-lo, hi) rounded, times a loss
// scale of 1024), the f32 masters unscale() would write from them, and the
// 16-bit rounding of a value.
struct Sixteen {
  DType dtype;
  std::uint16_t round(float x) const {
    return dtype == DType::f16 ? float_to_half_bits(x) : float_to_bfloat16_bits(x);
  }
  float widen(std::uint16_t b) const {
    return dtype == DType::f16 ? half_bits_to_float(b) : bfloat16_bits_to_float(b);
  }
  ElementType element() const { return dtype == DType::f16 ? ElementType::f16 : ElementType::bf16; }
};

std::vector<std::uint16_t> scaled_gradients(const Sixteen& t, std::int64_t n, std::uint32_t seed) {
  std::vector<std::uint16_t> g16;
  for (const float g : uniform(n, -2.0F, 2.0F, seed)) g16.push_back(t.round(g * 1024.0F));
  return g16;
}

std::vector<float> unscaled(const Sixteen& t, const std::vector<std::uint16_t>& g16, float scale) {
  std::vector<float> master;
  for (const std::uint16_t b : g16) master.push_back(t.widen(b) * scale);
  return master;
}

std::vector<std::uint16_t> rounded(const Sixteen& t, const std::vector<float>& values) {
  std::vector<std::uint16_t> out;
  for (const float v : values) out.push_back(t.round(v));
  return out;
}

// The update reads 16-bit gradients unscaled as it reads them and writes the
// new values rounded to 16 bits: bit for bit the f32 update of the unscaled
// masters followed by the cast, on the CPU and in the kernel, packed and
// element by element (the buffers one element past an aligned start), at a
// power-of-two scale and one whose products round.
TEST(KernelOptimizer, AdamAndSgdFoldUnscaleAndPublish) {
  for (const DType dtype : {DType::bf16, DType::f16}) {
    const Sixteen t{dtype};
    for (const std::int64_t n : {1, 7, 1003, 5000}) {
      for (const std::int64_t shift : {0, 1}) {
        for (const float scale : {1.0F / 1024.0F, 1.0F / 3000.0F}) {
          SCOPED_TRACE(::testing::Message() << dtype_name(dtype) << " n " << n << " shift " << shift
                                            << " scale " << scale);
          const auto seed = static_cast<std::uint32_t>(n + shift);
          std::vector<std::uint16_t> g16 = scaled_gradients(t, n + shift, seed);
          const std::vector<float> master = unscaled(t, g16, scale);
          const std::vector<float> p0 = uniform(n + shift, -1.0F, 1.0F, seed + 1);
          const std::vector<float> m0 = uniform(n + shift, -0.1F, 0.1F, seed + 2);
          const std::vector<float> v0 = uniform(n + shift, 0.0F, 0.01F, seed + 3);
          AdamUpdate a;
          a.step_size = 1e-3F;
          a.inv_bc2_sqrt = 1.0F / std::sqrt(1.0F - 0.999F * 0.999F);
          a.coupled_decay = 0.01F;
          // The reference: the f32 update of the masters, then the cast.
          std::vector<float> rp = p0, rm = m0, rv = v0, rx = v0;
          cpu().adam_update(n + shift, rp.data(), master.data(), rm.data(), rv.data(), rx.data(), a,
                            {});
          const std::vector<std::uint16_t> published = rounded(t, rp);
          // The CPU back end, folded.
          std::vector<float> cp = p0, cm = m0, cv = v0, cx = v0;
          std::vector<std::uint16_t> cpub(static_cast<std::size_t>(n + shift));
          cpu().adam_update(n, cp.data() + shift, GradientSource{g16.data() + shift, dtype, scale},
                            cm.data() + shift, cv.data() + shift, cx.data() + shift, a,
                            PublishedValues{cpub.data() + shift, dtype});
          // The kernel, folded.
          std::vector<float> kp = p0, km = m0, kv = v0, kx = v0;
          std::vector<std::uint16_t> kpub(static_cast<std::size_t>(n + shift));
          AdamUpdateKernel k{n,
                             kp.data() + shift,
                             g16.data() + shift,
                             km.data() + shift,
                             kv.data() + shift,
                             kx.data() + shift,
                             a};
          k.io = {t.element(), scale, kpub.data() + shift, t.element()};
          EXPECT_EQ(k.packed(), shift == 0);
          run(k);
          // The reference ran over the shifted-off element too: compare from `shift`.
          const auto tail = [&](const auto& v) {
            return std::vector<typename std::decay_t<decltype(v)>::value_type>(v.begin() + shift,
                                                                               v.end());
          };
          for (const auto* got : {&cp, &kp}) EXPECT_TRUE(bit_equal(tail(*got), tail(rp))) << "p";
          for (const auto* got : {&cm, &km}) EXPECT_TRUE(bit_equal(tail(*got), tail(rm))) << "m";
          for (const auto* got : {&cv, &kv}) EXPECT_TRUE(bit_equal(tail(*got), tail(rv))) << "v";
          for (const auto* got : {&cx, &kx}) EXPECT_TRUE(bit_equal(tail(*got), tail(rx))) << "vmax";
          EXPECT_EQ(tail(cpub), tail(published)) << "cpu publish";
          EXPECT_EQ(tail(kpub), tail(published)) << "kernel publish";

          // lr 0.1, weight decay 1e-4, Nesterov momentum 0.9 on a buffer already there
          const SgdUpdate s{0.1F, 1e-4F, 0.9F, true, false};
          std::vector<float> sp = p0, sb = m0;
          cpu().sgd_update(n + shift, sp.data(), master.data(), sb.data(), s, {});
          const std::vector<std::uint16_t> sgd_published = rounded(t, sp);
          std::vector<float> csp = p0, csb = m0, ksp = p0, ksb = m0;
          std::vector<std::uint16_t> cspub(static_cast<std::size_t>(n + shift)), kspub = cspub;
          cpu().sgd_update(n, csp.data() + shift, GradientSource{g16.data() + shift, dtype, scale},
                           csb.data() + shift, s, PublishedValues{cspub.data() + shift, dtype});
          SgdUpdateKernel sk{n, ksp.data() + shift, g16.data() + shift, ksb.data() + shift, s};
          sk.io = {t.element(), scale, kspub.data() + shift, t.element()};
          run(sk);
          for (const auto* got : {&csp, &ksp})
            EXPECT_TRUE(bit_equal(tail(*got), tail(sp))) << "sgd p";
          for (const auto* got : {&csb, &ksb}) {
            EXPECT_TRUE(bit_equal(tail(*got), tail(sb))) << "sgd buffer";
          }
          EXPECT_EQ(tail(cspub), tail(sgd_published)) << "cpu sgd publish";
          EXPECT_EQ(tail(kspub), tail(sgd_published)) << "kernel sgd publish";
        }
      }
    }
  }
}

// An f32 source at scale 1 is the plain update: nothing widened, nothing
// multiplied that could change a bit, and no publish without a target.
TEST(KernelOptimizer, PlainF32SourceIsTheUpdateAsBefore) {
  const std::int64_t n = 1000;
  const std::vector<float> g = uniform(n, -2.0F, 2.0F, 41), p0 = uniform(n, -1.0F, 1.0F, 42);
  SgdUpdate s;
  s.learning_rate = 0.1F;
  std::vector<float> want = p0, got = p0;
  for (std::int64_t i = 0; i < n; ++i) math::sgd_step(want[i], g[i], nullptr, s);
  run(SgdUpdateKernel{n, got.data(), g.data(), nullptr, s});
  EXPECT_TRUE(bit_equal(got, want));
}

}  // namespace rig::kernels::test
