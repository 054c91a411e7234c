// The ops on 16-bit storage through the CUDA back end (on the SIMT-emulated
// device, RIG_CUDA_EMULATOR=1): where the back end reads and writes bf16 as
// it is (Backend::reads_16bit_storage, gemm_writes_bf16), the ops skip their
// f32 copies; their results and gradients must still be, bit for bit, those
// of f32 tensors holding the same values, rounded to the inputs' dtypes.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <map>
#include <random>
#include <vector>

#include "backend/backend.hpp"
#include "bf16_values.hpp"
#include "rig/autograd.hpp"
#include "rig/half.hpp"
#include "rig/ops.hpp"
#include "rig/parameter_store.hpp"
#include "rig/tensor.hpp"

namespace {

using rig::DType;
using rig::Tensor;
using rig::test::leaf;

Tensor random(const rig::Shape& shape, std::uint32_t seed, float lo = -1.0F, float hi = 1.0F) {
  return rig::test::bf16_exact_uniform(shape, seed, lo, hi);
}

// The emulated device as cuda:0 (each ctest test is its own process).
rig::Device emulated_cuda() {
  setenv("RIG_CUDA_EMULATOR", "1", 1);
  return rig::Device::cuda(0);
}

// got (16-bit) equals want (f32) rounded to got's dtype, bit for bit.
bool same(const Tensor& got, const Tensor& want) {
  return got.to_host().to(DType::f32).to_vector() ==
         want.to_host().to(got.dtype()).to(DType::f32).to_vector();
}

TEST(Emulated16BitOps, LinearWritesDxAndDwInBf16WithTheBitsOfItsFloat32Copies) {
  const rig::Device dev = emulated_cuda();
  const Tensor x = random({3, 17, 40}, 1), w = random({50, 40}, 2), b = random({50}, 3);
  const Tensor up = random({3, 17, 50}, 4).to(dev).to(DType::bf16);
  const rig::ops::MatmulPrecisionScope bf16(rig::MatmulPrecision::bf16);
  for (const auto activation : {rig::ops::Activation::none, rig::ops::Activation::relu}) {
    for (const bool with_bias : {false, true}) {
      SCOPED_TRACE(::testing::Message()
                   << "activation " << static_cast<int>(activation) << " bias " << with_bias);
      Tensor x16 = leaf(x, DType::bf16, dev), w16 = leaf(w, DType::bf16, dev);
      Tensor b16 = with_bias ? leaf(b, DType::bf16, dev) : Tensor();
      const Tensor y16 = rig::ops::linear(x16, w16, b16, activation);
      rig::ops::sum(rig::ops::mul(y16, up)).backward();
      Tensor x32 = leaf(x, DType::f32, dev), w32 = leaf(w, DType::f32, dev);
      Tensor b32 = with_bias ? leaf(b, DType::f32, dev) : Tensor();
      const Tensor y32 = rig::ops::linear(x32, w32, b32, activation);
      rig::ops::sum(rig::ops::mul(y32.to(DType::bf16), up)).backward();
      EXPECT_EQ(y16.dtype(), DType::bf16);
      EXPECT_EQ(x16.grad().dtype(), DType::bf16);
      EXPECT_TRUE(same(y16.detach(), y32.detach())) << "y";
      EXPECT_TRUE(same(x16.grad(), x32.grad())) << "dx";
      EXPECT_TRUE(same(w16.grad(), w32.grad())) << "dW";
      if (with_bias) {
        EXPECT_TRUE(same(b16.grad(), b32.grad())) << "db";
      }
    }
  }
}

// Multiples of 1/64 in [-1, 1] (exact in bf16 and f16): products and sums
// of them are exact in f32, so only the rounding to 16 bits differs between
// ways of accumulating.
std::vector<float> on_grid(std::size_t n, std::uint32_t seed) {
  std::mt19937 gen(seed);
  std::uniform_int_distribution<int> pick(-64, 64);
  std::vector<float> v(n);
  for (float& x : v) x = static_cast<float>(pick(gen)) / 64.0F;
  return v;
}

float round_to(DType type, float x) {
  return type == DType::bf16 ? rig::bfloat16_bits_to_float(rig::float_to_bfloat16_bits(x))
                             : rig::half_bits_to_float(rig::float_to_half_bits(x));
}

TEST(Emulated16BitOps, LinearAddsIntoTheGradientAlreadyThereRoundingOnce) {
  // x and W each used by two 16-bit linear layers (as q and k share x), x's
  // and W's .grad buffers already holding s. Each product's f32 result is
  // added to the gradient already there and rounded once (the second layer's
  // backward runs first): r(r(s + p2) + p1), not r(r(s + r(p2)) + r(p1)) as
  // a 16-bit result added afterwards gives. bf16 at bf16 precision on the CPU
  // (the sum from the f32 product) and on the CUDA back end (the product's
  // beta 1); f16 at f32 precision on the CUDA back end's f16 products. A
  // non-leaf x used twice: r(r(p2) + p1).
  const std::int64_t rows = 15, in = 40, out = 50;
  const auto host = [](const std::vector<float>& v, const rig::Shape& shape) {
    return Tensor::from_vector(v, shape);
  };
  const std::vector<float> xv = on_grid(rows * in, 31), wv = on_grid(out * in, 32),
                           u1 = on_grid(rows * out, 33), u2 = on_grid(rows * out, 34),
                           sx = on_grid(rows * in, 35), sw = on_grid(out * in, 36);
  // p_x = u W [rows, in] and p_w = u^T x [out, in], exactly.
  const auto dx_of = [&](const std::vector<float>& u) {
    std::vector<float> p(rows * in, 0.0F);
    for (std::int64_t r = 0; r < rows; ++r)
      for (std::int64_t o = 0; o < out; ++o)
        for (std::int64_t i = 0; i < in; ++i) p[r * in + i] += u[r * out + o] * wv[o * in + i];
    return p;
  };
  const auto dw_of = [&](const std::vector<float>& u) {
    std::vector<float> p(out * in, 0.0F);
    for (std::int64_t r = 0; r < rows; ++r)
      for (std::int64_t o = 0; o < out; ++o)
        for (std::int64_t i = 0; i < in; ++i) p[o * in + i] += u[r * out + o] * xv[r * in + i];
    return p;
  };
  const std::vector<float> zero_x(rows * in, 0.0F);
  struct Case {
    DType type;
    rig::MatmulPrecision precision;
    rig::Device dev;
  };
  for (const Case& c : {Case{DType::bf16, rig::MatmulPrecision::bf16, rig::Device::cpu()},
                        Case{DType::bf16, rig::MatmulPrecision::bf16, emulated_cuda()},
                        Case{DType::f16, rig::MatmulPrecision::f32, emulated_cuda()}}) {
    SCOPED_TRACE(::testing::Message() << dtype_name(c.type) << " on " << to_string(c.dev));
    const auto accumulated = [&](const std::vector<float>& s, const std::vector<float>& first,
                                 const std::vector<float>& second) {
      std::vector<float> v(s.size());
      for (std::size_t i = 0; i < v.size(); ++i) {
        v[i] = round_to(c.type, round_to(c.type, s[i] + first[i]) + second[i]);
      }
      return v;
    };
    std::vector<float> rounded_first = dx_of(u1);
    for (float& v : rounded_first) v = round_to(c.type, v);
    const std::vector<float> want_x = accumulated(sx, dx_of(u2), dx_of(u1));
    const std::vector<float> want_w = accumulated(sw, dw_of(u2), dw_of(u1));
    const std::vector<float> want_h = accumulated(zero_x, dx_of(u2), dx_of(u1));
    ASSERT_NE(want_x, accumulated(sx, dx_of(u2), rounded_first))
        << "the data must tell rounding once from rounding twice";

    const rig::ops::MatmulPrecisionScope precision(c.precision);
    const auto on = [&](const std::vector<float>& v, const rig::Shape& shape) {
      return host(v, shape).to(c.dev).to(c.type);
    };
    const Tensor up1 = on(u1, {rows, out}), up2 = on(u2, {rows, out});
    Tensor x = leaf(host(xv, {rows, in}), c.type, c.dev);
    Tensor w = leaf(host(wv, {out, in}), c.type, c.dev);
    Tensor x_grad = on(sx, {rows, in}), w_grad = on(sw, {out, in});
    x.set_grad(x_grad);
    w.set_grad(w_grad);
    const auto loss = [&](const Tensor& input) {
      return rig::ops::add(rig::ops::sum(rig::ops::mul(rig::ops::linear(input, w, {}), up1)),
                           rig::ops::sum(rig::ops::mul(rig::ops::linear(input, w, {}), up2)));
    };
    loss(x).backward();
    EXPECT_EQ(x_grad.to_host().to(DType::f32).to_vector(), want_x) << "x's .grad";
    EXPECT_EQ(w_grad.to_host().to(DType::f32).to_vector(), want_w) << "W's .grad";

    Tensor x2 = leaf(host(xv, {rows, in}), c.type, c.dev);
    loss(rig::ops::mul_scalar(x2, 1.0F)).backward();
    EXPECT_EQ(x2.grad().to_host().to(DType::f32).to_vector(), want_h) << "a non-leaf's";
  }
}

TEST(Emulated16BitOps, LinearWithReluAndDropoutRoundsOnceAndKeepsTheBf16Output) {
  // bias + relu + output dropout + rounding in one pass (bias_activation_16),
  // relu's backward from the kept bf16 y: the f32 layer's bits throughout.
  const rig::Device dev = emulated_cuda();
  const Tensor x = random({4, 9, 40}, 11), w = random({64, 40}, 12), b = random({64}, 13);
  const Tensor up = random({4, 9, 64}, 14).to(dev).to(DType::bf16);
  const rig::ops::MatmulPrecisionScope bf16(rig::MatmulPrecision::bf16);
  const rig::RandomKey key{3, 8, 0, 21};
  // Unscaled: the bias and relu in the product's epilogue (bf16 out), the
  // mask one pass over it (exact after the rounding), and the next layer's
  // products scale by 1 / (1 - p) (their alpha): still the f32 layers' bits.
  const Tensor v = random({24, 64}, 15), c = random({24}, 16);
  const Tensor up2 = random({4, 9, 24}, 17).to(dev).to(DType::bf16);
  for (const float p : {0.0F, 0.4F}) {
    for (const bool scaled : {true, false}) {
      SCOPED_TRACE(::testing::Message() << "p " << p << " scaled " << scaled);
      rig::ops::OutputDropout dropout{p, key};
      dropout.scaled = scaled;
      const float keep = scaled || p == 0.0F ? 1.0F : 1.0F / (1.0F - p);
      Tensor x16 = leaf(x, DType::bf16, dev), w16 = leaf(w, DType::bf16, dev);
      Tensor b16 = leaf(b, DType::bf16, dev);
      const Tensor y16 = rig::ops::linear(x16, w16, b16, rig::ops::Activation::relu, dropout);
      rig::ops::sum(rig::ops::mul(y16, up)).backward();
      Tensor x32 = leaf(x, DType::f32, dev), w32 = leaf(w, DType::f32, dev);
      Tensor b32 = leaf(b, DType::f32, dev);
      const Tensor y32 = rig::ops::linear(x32, w32, b32, rig::ops::Activation::relu, dropout);
      rig::ops::sum(rig::ops::mul(y32.to(DType::bf16), up)).backward();
      EXPECT_EQ(y16.dtype(), DType::bf16);
      EXPECT_TRUE(same(y16.detach(), y32.detach())) << "y";
      EXPECT_TRUE(same(x16.grad(), x32.grad())) << "dx";
      EXPECT_TRUE(same(w16.grad(), w32.grad())) << "dW";
      EXPECT_TRUE(same(b16.grad(), b32.grad())) << "db";
      // The next layer, reading the kept outputs with input_scale.
      const Tensor kept_values = y16.detach().to_host().to(DType::f32);
      Tensor h16 = leaf(kept_values, DType::bf16, dev), v16 = leaf(v, DType::bf16, dev);
      Tensor c16 = leaf(c, DType::bf16, dev);
      const Tensor z16 = rig::ops::linear(h16, v16, c16, rig::ops::Activation::none, {}, keep);
      rig::ops::sum(rig::ops::mul(z16, up2)).backward();
      Tensor h32 = leaf(kept_values, DType::f32, dev), v32 = leaf(v, DType::f32, dev);
      Tensor c32 = leaf(c, DType::f32, dev);
      const Tensor z32 = rig::ops::linear(h32, v32, c32, rig::ops::Activation::none, {}, keep);
      rig::ops::sum(rig::ops::mul(z32.to(DType::bf16), up2)).backward();
      EXPECT_TRUE(same(z16.detach(), z32.detach())) << "the next layer's output";
      EXPECT_TRUE(same(h16.grad(), h32.grad())) << "the next layer's dx";
      EXPECT_TRUE(same(v16.grad(), v32.grad())) << "the next layer's dW";
      // Dropout dropped some of the positive outputs, and the same ones.
      const std::vector<float> kept = y16.to_host().to(DType::f32).to_vector();
      const auto zeros = std::count(kept.begin(), kept.end(), 0.0F);
      EXPECT_GT(zeros, p > 0.0F ? 9 * 64 * 4 / 2 + 50 : 100);
    }
  }
}

TEST(Emulated16BitOps, ReluFeedForwardWithMasksHasTheBitsOfItsTwoLinearLayers) {
  // relu_feed_forward on a back end whose products take relu masks: one op
  // that keeps a bit per hidden element and applies relu's derivative in the
  // output layer's dx product (DRELU), b1's gradient from the dW1 product
  // (BGRADA). y, dx, dW1, dW2 and db2 have the bits of the two linear
  // layers; db1 is the same sum in another order. bf16 and f16 layers, with
  // and without the unscaled dropout, and gradients added into .grad.
  const rig::Device dev = emulated_cuda();
  ASSERT_TRUE(rig::backend::backend_for(dev).gemm_relu_masks(DType::bf16));
  const Tensor x = random({2, 9, 24}, 31), w1 = random({32, 24}, 32), b1 = random({32}, 33),
               w2 = random({12, 32}, 34), b2 = random({12}, 35);
  const rig::RandomKey key{4, 9, 0, 22};
  for (const DType type : {DType::bf16, DType::f16}) {
    const rig::ops::MatmulPrecisionScope precision(type == DType::bf16 ? rig::MatmulPrecision::bf16
                                                                       : rig::MatmulPrecision::f32);
    const Tensor up = random({2, 9, 12}, 36).to(dev).to(type);
    for (const float p : {0.0F, 0.3F}) {
      for (const int passes : {1, 2}) {
        SCOPED_TRACE(::testing::Message()
                     << rig::dtype_name(type) << " p " << p << " passes " << passes);
        const rig::ops::OutputDropout dropout{p, key, false};
        const float keep = p > 0.0F ? 1.0F / (1.0F - p) : 1.0F;
        Tensor xf = leaf(x, type, dev), w1f = leaf(w1, type, dev), b1f = leaf(b1, type, dev),
               w2f = leaf(w2, type, dev), b2f = leaf(b2, type, dev);
        Tensor xc = leaf(x, type, dev), w1c = leaf(w1, type, dev), b1c = leaf(b1, type, dev),
               w2c = leaf(w2, type, dev), b2c = leaf(b2, type, dev);
        Tensor yf, yc;
        for (int pass = 0; pass < passes; ++pass) {  // a second pass adds into .grad
          yf = rig::ops::relu_feed_forward(xf, w1f, b1f, w2f, b2f, dropout, keep);
          EXPECT_EQ(yf.impl()->grad_fn->op, "relu_feed_forward");
          rig::ops::sum(rig::ops::mul(yf, up)).backward();
          yc = rig::ops::linear(rig::ops::linear(xc, w1c, b1c, rig::ops::Activation::relu, dropout),
                                w2c, b2c, rig::ops::Activation::none, {}, keep);
          rig::ops::sum(rig::ops::mul(yc, up)).backward();
        }
        const auto values = [](const Tensor& t) { return t.to_host().to(DType::f32).to_vector(); };
        EXPECT_EQ(yf.dtype(), type);
        EXPECT_EQ(values(yf.detach()), values(yc.detach())) << "y";
        EXPECT_EQ(values(xf.grad()), values(xc.grad())) << "dx";
        EXPECT_EQ(values(w1f.grad()), values(w1c.grad())) << "dW1";
        EXPECT_EQ(values(w2f.grad()), values(w2c.grad())) << "dW2";
        EXPECT_EQ(values(b2f.grad()), values(b2c.grad())) << "db2";
        const std::vector<float> got = values(b1f.grad()), want = values(b1c.grad());
        ASSERT_EQ(got.size(), want.size());
        for (std::size_t i = 0; i < got.size(); ++i) {
          EXPECT_NEAR(got[i], want[i], 1e-2F * (1.0F + std::fabs(want[i]))) << "db1 " << i;
        }
      }
    }
  }
  // Without gradients, and on f32 layers, it is the two linear layers themselves.
  const Tensor x32 = leaf(x, DType::f32, dev);
  const Tensor y32 =
      rig::ops::relu_feed_forward(x32, leaf(w1, DType::f32, dev), leaf(b1, DType::f32, dev),
                                  leaf(w2, DType::f32, dev), leaf(b2, DType::f32, dev), {}, 1.0F);
  EXPECT_EQ(y32.impl()->grad_fn->op, "linear");
}

TEST(Emulated16BitOps, Float16LinearMultipliesF16AsItIs) {
  // f16 x and W at f32 precision go to the f16 products (the tensor cores on
  // a GPU): y, dx and dW are written in f16 by the products, with the f32
  // layer's bits where dz is exact in f16 (no dropout scale); with output
  // dropout dz is rounded to f16 first (as autocast's), so dx and dW may
  // differ from the f32 layer's in their last bit.
  const rig::Device dev = emulated_cuda();
  const Tensor x = random({3, 11, 40}, 21), w = random({48, 40}, 22), b = random({48}, 23);
  const Tensor up = random({3, 11, 48}, 24).to(dev).to(DType::f16);
  const rig::RandomKey key{9, 2, 0, 5};
  // A bias and relu are the product's epilogue (y stored in f16 once) where
  // any dropout is unscaled (its mask a pass over the f16 y); a scaled
  // dropout takes the f32 product and one pass.
  struct Case {
    rig::ops::Activation activation;
    bool with_bias;
    float p;
    bool scaled = true;
  };
  for (const Case& c :
       {Case{rig::ops::Activation::none, false, 0.0F}, Case{rig::ops::Activation::none, true, 0.0F},
        Case{rig::ops::Activation::relu, true, 0.0F}, Case{rig::ops::Activation::relu, false, 0.0F},
        Case{rig::ops::Activation::relu, true, 0.3F},
        Case{rig::ops::Activation::relu, true, 0.3F, false},
        Case{rig::ops::Activation::gelu, true, 0.0F}}) {
    SCOPED_TRACE(::testing::Message() << "activation " << static_cast<int>(c.activation) << " bias "
                                      << c.with_bias << " p " << c.p << " scaled " << c.scaled);
    rig::ops::OutputDropout dropout{c.p, key};
    dropout.scaled = c.scaled;
    Tensor x16 = leaf(x, DType::f16, dev), w16 = leaf(w, DType::f16, dev);
    Tensor b16 = c.with_bias ? leaf(b, DType::f16, dev) : Tensor();
    const Tensor y16 = rig::ops::linear(x16, w16, b16, c.activation, dropout);
    rig::ops::sum(rig::ops::mul(y16, up)).backward();
    Tensor x32 = leaf(x, DType::f32, dev), w32 = leaf(w, DType::f32, dev);
    Tensor b32 = c.with_bias ? leaf(b, DType::f32, dev) : Tensor();
    const Tensor y32 = rig::ops::linear(x32, w32, b32, c.activation, dropout);
    rig::ops::sum(rig::ops::mul(y32.to(DType::f16), up)).backward();
    EXPECT_EQ(y16.dtype(), DType::f16);
    EXPECT_EQ(x16.grad().dtype(), DType::f16);
    EXPECT_EQ(w16.grad().dtype(), DType::f16);
    EXPECT_TRUE(same(y16.detach(), y32.detach())) << "y";
    if ((c.p == 0.0F || !c.scaled) && c.activation != rig::ops::Activation::gelu) {
      EXPECT_TRUE(same(x16.grad(), x32.grad())) << "dx";
      EXPECT_TRUE(same(w16.grad(), w32.grad())) << "dW";
    } else {  // dz rounded to f16: within f16's rounding of the f32 layer's
      const auto near = [](const Tensor& got, const Tensor& want) {
        const std::vector<float> g = got.to_host().to(DType::f32).to_vector();
        const std::vector<float> v = want.to_host().to_vector();
        for (std::size_t i = 0; i < g.size(); ++i) {
          if (std::fabs(g[i] - v[i]) > 4e-3F * (1.0F + std::fabs(v[i]))) return false;
        }
        return true;
      };
      EXPECT_TRUE(near(x16.grad(), x32.grad())) << "dx";
      EXPECT_TRUE(near(w16.grad(), w32.grad())) << "dW";
    }
    if (c.with_bias) {
      EXPECT_TRUE(same(b16.grad(), b32.grad())) << "db";
    }
  }
}

TEST(Emulated16BitOps, AddAndMulWithBroadcastingHaveTheBitsOfTheirFloat32Copies) {
  const rig::Device dev = emulated_cuda();
  // A residual add [4, 6, 8] + [4, 6, 8] and a padding mask [4, 6, 1].
  const Tensor a = random({4, 6, 8}, 11), b = random({4, 6, 8}, 12), m = random({4, 6, 1}, 13);
  for (const DType type : {DType::bf16, DType::f16}) {
    SCOPED_TRACE(rig::dtype_name(type));
    const Tensor up = random({4, 6, 8}, 14).to(dev).to(type);
    Tensor a16 = leaf(a, type, dev), b16 = leaf(b, type, dev), m16 = leaf(m, type, dev);
    const Tensor y16 = rig::ops::mul(rig::ops::add(a16, b16), m16);
    rig::ops::sum(rig::ops::mul(y16, up)).backward();
    Tensor a32 = leaf(a.to(type).to(DType::f32), DType::f32, dev);
    Tensor b32 = leaf(b.to(type).to(DType::f32), DType::f32, dev);
    Tensor m32 = leaf(m.to(type).to(DType::f32), DType::f32, dev);
    // The f32 path rounds each op's result, as the 16-bit path stores it.
    const Tensor s32 = rig::ops::add(a32, b32).to(type).to(DType::f32);
    const Tensor y32 = rig::ops::mul(s32, m32).to(type);
    rig::ops::sum(rig::ops::mul(y32, up)).backward();
    EXPECT_EQ(y16.dtype(), type);
    EXPECT_TRUE(same(y16.detach(), y32.detach())) << "y";
    EXPECT_TRUE(same(a16.grad(), a32.grad())) << "da";
    EXPECT_TRUE(same(b16.grad(), b32.grad())) << "db";
    EXPECT_TRUE(same(m16.grad(), m32.grad())) << "dm (summed over the broadcast axis)";
  }
}

TEST(Emulated16BitOps, UnaryOpsHaveTheBitsOfTheirFloat32Copies) {
  const rig::Device dev = emulated_cuda();
  const Tensor x = random({5, 33}, 31, -3.0F, 3.0F);
  using Op = Tensor (*)(const Tensor&);
  const std::pair<const char*, Op> ops[] = {
      {"relu", &rig::ops::relu},
      {"gelu", [](const Tensor& t) { return rig::ops::gelu(t); }},
      {"neg", &rig::ops::neg},
      {"exp (through f32)", &rig::ops::exp}};
  for (const DType type : {DType::bf16, DType::f16}) {
    for (const auto& [name, op] : ops) {
      SCOPED_TRACE(::testing::Message() << rig::dtype_name(type) << " " << name);
      const Tensor up = random({5, 33}, 32).to(dev).to(type);
      Tensor x16 = leaf(x, type, dev);
      const Tensor y16 = op(x16);
      rig::ops::sum(rig::ops::mul(y16, up)).backward();
      Tensor x32 = leaf(x.to(type).to(DType::f32), DType::f32, dev);
      const Tensor y32 = op(x32).to(type);
      rig::ops::sum(rig::ops::mul(y32, up)).backward();
      EXPECT_EQ(y16.dtype(), type);
      EXPECT_TRUE(same(y16.detach(), y32.detach())) << "y";
      EXPECT_TRUE(same(x16.grad(), x32.grad())) << "dx";
    }
  }
}

TEST(Emulated16BitOps, LayerNormHasTheBitsOfItsFloat32Copy) {
  const rig::Device dev = emulated_cuda();
  const Tensor x = random({70, 24}, 21, -3.0F, 3.0F), gamma = random({24}, 22, 0.5F, 1.5F),
               beta = random({24}, 23);
  // gamma and beta in f32, or in x's type (a 16-bit model's own: read as
  // they are, their gradients the f32 ones rounded once).
  for (const DType type : {DType::bf16, DType::f16}) {
    for (const DType param_type : {DType::f32, type}) {
      SCOPED_TRACE(::testing::Message()
                   << rig::dtype_name(type) << " parameters " << rig::dtype_name(param_type));
      const Tensor up = random({70, 24}, 24).to(dev).to(type);
      Tensor x16 = leaf(x, type, dev), g16 = leaf(gamma, param_type, dev),
             b16 = leaf(beta, param_type, dev);
      const Tensor y16 = rig::ops::layer_norm(x16, g16, b16, 1e-6F);
      rig::ops::sum(rig::ops::mul(y16, up)).backward();
      Tensor x32 = leaf(x.to(type).to(DType::f32), DType::f32, dev);
      Tensor g32 = leaf(gamma, DType::f32, dev), b32 = leaf(beta, DType::f32, dev);
      const Tensor y32 = rig::ops::layer_norm(x32, g32, b32, 1e-6F).to(type);
      rig::ops::sum(rig::ops::mul(y32, up)).backward();
      EXPECT_EQ(y16.dtype(), type);
      EXPECT_EQ(g16.grad().dtype(), param_type);
      EXPECT_TRUE(same(y16.detach(), y32.detach())) << "y";
      EXPECT_TRUE(same(x16.grad(), x32.grad())) << "dx";
      EXPECT_TRUE(same(g16.grad(), g32.grad())) << "dgamma";
      EXPECT_TRUE(same(b16.grad(), b32.grad())) << "dbeta";
    }
  }
}

TEST(Emulated16BitOps, BatchNormHasTheBitsOfItsFloat32Copy) {
  const rig::Device dev = emulated_cuda();
  // [N, C, H, W] with more than one chunk of values per channel.
  const Tensor x = random({6, 3, 30, 30}, 41, -2.0F, 4.0F);
  const Tensor gamma = random({3}, 42, 0.5F, 1.5F), beta = random({3}, 43);
  // gamma and beta f32, or a 16-bit model's own (read as they are, their
  // gradients written rounded: no casts around the op).
  for (const DType type : {DType::bf16, DType::f16}) {
    for (const auto& [training, param_type] :
         {std::pair{true, DType::f32}, std::pair{false, DType::f32}, std::pair{true, type},
          std::pair{false, type}}) {
      SCOPED_TRACE(::testing::Message() << rig::dtype_name(type) << " training " << training
                                        << " parameters " << rig::dtype_name(param_type));
      const Tensor up = random({6, 3, 30, 30}, 44).to(dev).to(type);
      const auto stats = [&] {
        return std::pair{random({3}, 45).to(dev), random({3}, 46, 0.5F, 2.0F).to(dev)};
      };
      auto [mean16, var16] = stats();
      auto [mean32, var32] = stats();
      Tensor x16 = leaf(x, type, dev), g16 = leaf(gamma, param_type, dev),
             b16 = leaf(beta, param_type, dev);
      const Tensor y16 = rig::ops::batch_norm(x16, g16, b16, mean16, var16, training, 0.1F, 1e-5F);
      rig::ops::sum(rig::ops::mul(y16, up)).backward();
      Tensor x32 = leaf(x.to(type).to(DType::f32), DType::f32, dev);
      Tensor g32 = leaf(gamma, DType::f32, dev), b32 = leaf(beta, DType::f32, dev);
      const Tensor y32 =
          rig::ops::batch_norm(x32, g32, b32, mean32, var32, training, 0.1F, 1e-5F).to(type);
      rig::ops::sum(rig::ops::mul(y32, up)).backward();
      EXPECT_EQ(y16.dtype(), type);
      EXPECT_TRUE(same(y16.detach(), y32.detach())) << "y";
      EXPECT_TRUE(same(x16.grad(), x32.grad())) << "dx";
      EXPECT_EQ(g16.grad().dtype(), param_type);
      EXPECT_TRUE(same(g16.grad(), g32.grad())) << "dgamma";
      EXPECT_TRUE(same(b16.grad(), b32.grad())) << "dbeta";
      EXPECT_EQ(mean16.to_host().to_vector(), mean32.to_host().to_vector()) << "running mean";
      EXPECT_EQ(var16.to_host().to_vector(), var32.to_host().to_vector()) << "running var";
    }
  }
}

// Each fused output equals the composed one, bit for bit.
void expect_same_bits(const std::vector<Tensor>& fused, const std::vector<Tensor>& composed) {
  ASSERT_EQ(fused.size(), composed.size());
  for (std::size_t i = 0; i < fused.size(); ++i) {
    EXPECT_EQ(fused[i].to_host().to(DType::f32).to_vector(),
              composed[i].to_host().to(DType::f32).to_vector())
        << "output " << i;
  }
}

TEST(Emulated16BitOps, DropoutAddIsAnAddOfDropoutInOnePass) {
  // ops::dropout_add on the CUDA back end (one DropoutForward with the
  // residual) against add(residual, dropout(x)): the same bits forward and
  // backward, in f32, bf16 and f16; the same mask as dropout's.
  const rig::Device dev = emulated_cuda();
  ASSERT_TRUE(rig::backend::backend_for(dev).fuses_dropout_add());
  const rig::RandomKey key{5, 3, 1, 17};
  const Tensor r = random({3, 7, 40}, 71), x = random({3, 7, 40}, 72), up = random({3, 7, 40}, 73);
  for (const DType type : {DType::f32, DType::bf16, DType::f16}) {
    SCOPED_TRACE(rig::dtype_name(type));
    const auto run = [&](bool fused) {
      Tensor rl = leaf(r, type, dev), xl = leaf(x, type, dev);
      const Tensor y = fused ? rig::ops::dropout_add(rl, xl, 0.3F, key)
                             : rig::ops::add(rl, rig::ops::dropout(xl, 0.3F, key));
      rig::ops::sum(rig::ops::mul(y, up.to(dev).to(type))).backward();
      return std::vector<Tensor>{y.detach(), rl.grad(), xl.grad()};
    };
    const std::vector<Tensor> fused = run(true);
    expect_same_bits(fused, run(false));
  }
}

TEST(Emulated16BitOps, DropoutAddScalesRowsInTheSamePass) {
  // dropout_add with a row scale (a Transformer's padding mask, [B, T, 1])
  // against add(residual, dropout(mul(x, mask))): the same bits forward and
  // backward; rows of 40 and of 37 elements (packs that straddle rows), and
  // a scale that is not 0 or 1 (the product rounds); one DropoutForward and
  // one DropoutBackward, no mul.
  const rig::Device dev = emulated_cuda();
  const rig::RandomKey key{5, 3, 1, 18};
  for (const std::int64_t d : {40, 37}) {
    const Tensor r = random({3, 7, d}, 81), x = random({3, 7, d}, 82), up = random({3, 7, d}, 83);
    std::vector<float> rows(21, 1.0F);
    rows[4] = rows[11] = rows[20] = 0.0F;
    rows[6] = 0.7F;
    const Tensor mask = Tensor::from_vector(rows, {3, 7, 1});
    for (const DType type : {DType::f32, DType::bf16, DType::f16}) {
      SCOPED_TRACE(::testing::Message() << rig::dtype_name(type) << " d " << d);
      const auto run = [&](bool fused) {
        Tensor rl = leaf(r, type, dev), xl = leaf(x, type, dev);
        const Tensor m = mask.to(dev).to(type);
        const Tensor y =
            fused ? rig::ops::dropout_add(rl, xl, 0.3F, key, m)
                  : rig::ops::add(rl, rig::ops::dropout(rig::ops::mul(xl, m), 0.3F, key));
        rig::ops::sum(rig::ops::mul(y, up.to(dev).to(type))).backward();
        return std::vector<Tensor>{y.detach(), rl.grad(), xl.grad()};
      };
      const std::vector<Tensor> fused = run(true);
      expect_same_bits(fused, run(false));
      // The masked rows: the residual as it is, and no gradient for x.
      const std::vector<float> y = fused[0].to_host().to(DType::f32).to_vector();
      const std::vector<float> rr = r.to(type).to(DType::f32).to_vector();
      const std::vector<float> dx = fused[2].to_host().to(DType::f32).to_vector();
      for (std::int64_t j = 0; j < d; ++j) {
        EXPECT_EQ(y[static_cast<std::size_t>(11 * d + j)],
                  rr[static_cast<std::size_t>(11 * d + j)]);
        EXPECT_EQ(dx[static_cast<std::size_t>(11 * d + j)], 0.0F);
      }
    }
  }
}

TEST(Emulated16BitOps, Conv2dAddsItsDxIntoTheGradientAlreadyThereRoundingOnce) {
  // x read by two convolutions (a residual block's first and its shortcut's),
  // x's .grad already holding s: each data gradient is added in f32 to the
  // one already there and rounded once (the second convolution's backward
  // runs first), r(r(s + p2) + p1); on grid values the f32 p1 and p2 are exact.
  const rig::Device dev = emulated_cuda();
  const rig::Shape x_shape{2, 4, 9, 9};
  const auto grid = [](const rig::Shape& shape, std::uint32_t seed) {
    return Tensor::from_vector(on_grid(static_cast<std::size_t>(rig::shape_numel(shape)), seed),
                               shape);
  };
  const Tensor x = grid(x_shape, 61), w1 = grid({6, 4, 3, 3}, 62), w2 = grid({6, 4, 3, 3}, 63);
  const Tensor s = grid(x_shape, 64);
  for (const bool channels_last : {false, true}) {
    rig::ops::Conv2dOptions options;
    options.pad_h = options.pad_w = 1;
    options.channels_last = channels_last;
    const Tensor xl = channels_last ? x.permute({0, 2, 3, 1}).contiguous() : x;
    const Tensor sl = channels_last ? s.permute({0, 2, 3, 1}).contiguous() : s;
    const rig::Shape y_shape = rig::ops::conv2d(xl, w1, Tensor(), options).shape();
    const Tensor u1 = grid(y_shape, 65), u2 = grid(y_shape, 66);
    // The f32 data gradient of one convolution, exactly.
    const auto p = [&](const Tensor& w, const Tensor& u) {
      Tensor x32 = xl.clone().set_requires_grad(true);
      rig::ops::sum(rig::ops::mul(rig::ops::conv2d(x32, w, Tensor(), options), u)).backward();
      return x32.grad().to_vector();
    };
    const std::vector<float> p1 = p(w1, u1), p2 = p(w2, u2), sv = sl.to_vector();
    for (const DType type : {DType::bf16, DType::f16}) {
      SCOPED_TRACE(::testing::Message()
                   << rig::dtype_name(type) << " channels last " << channels_last);
      std::vector<float> want(sv.size()), twice(sv.size());
      for (std::size_t i = 0; i < want.size(); ++i) {
        want[i] = round_to(type, round_to(type, sv[i] + p2[i]) + p1[i]);
        twice[i] =
            round_to(type, round_to(type, sv[i] + round_to(type, p2[i])) + round_to(type, p1[i]));
      }
      ASSERT_NE(want, twice) << "the data must tell rounding once from rounding twice";
      const auto on = [&](const Tensor& t) { return t.to(dev).to(type); };
      Tensor x16 = leaf(xl, type, dev);
      Tensor grad = on(sl);
      x16.set_grad(grad);
      const Tensor loss = rig::ops::add(
          rig::ops::sum(rig::ops::mul(rig::ops::conv2d(x16, on(w1), Tensor(), options), on(u1))),
          rig::ops::sum(rig::ops::mul(rig::ops::conv2d(x16, on(w2), Tensor(), options), on(u2))));
      loss.backward();
      EXPECT_EQ(grad.to_host().to(DType::f32).to_vector(), want);
    }
  }
}

TEST(Emulated16BitOps, ParameterGradientsAreAddedIntoDotGradRoundingOnce) {
  // A 16-bit model's parameters whose .grad already holds s (the flat
  // gradient buffer of a step with several uses, or gradient accumulation):
  // a convolution's dW and batch norm's dgamma and dbeta are added in f32 to
  // what is there and rounded once, r(s + p), by the op itself (no
  // separate add, which gives r(s + r(p))). p is the f32 gradient: exact
  // for the convolution on grid values; for batch norm that of f32
  // parameters through the same kernels.
  const rig::Device dev = emulated_cuda();
  const auto grid = [](const rig::Shape& shape, std::uint32_t seed) {
    return Tensor::from_vector(on_grid(static_cast<std::size_t>(rig::shape_numel(shape)), seed),
                               shape);
  };
  const auto host = [](const Tensor& t) { return t.to_host().to(DType::f32).to_vector(); };
  const auto added = [](DType type, const std::vector<float>& s, const std::vector<float>& p,
                        bool round_p) {
    std::vector<float> v(s.size());
    for (std::size_t i = 0; i < v.size(); ++i) {
      v[i] = round_to(type, s[i] + (round_p ? round_to(type, p[i]) : p[i]));
    }
    return v;
  };
  for (const DType type : {DType::bf16, DType::f16}) {
    // Convolutions: a 3 x 3 in NCHW and a 1 x 1 in NHWC (channels last
    // keeps a larger kernel's weight in a permuted copy, added as before).
    for (const bool channels_last : {false, true}) {
      SCOPED_TRACE(::testing::Message()
                   << rig::dtype_name(type) << " conv, channels last " << channels_last);
      rig::ops::Conv2dOptions options;
      options.channels_last = channels_last;
      const std::int64_t k = channels_last ? 1 : 3;
      options.pad_h = options.pad_w = channels_last ? 0 : 1;
      const Tensor x = channels_last ? grid({2, 9, 9, 4}, 81) : grid({2, 4, 9, 9}, 81);
      const Tensor w = grid({6, 4, k, k}, 82), sw = grid({6, 4, k, k}, 83);
      const Tensor u = grid(rig::ops::conv2d(x, w, Tensor(), options).shape(), 84);
      Tensor w32 = w.clone().set_requires_grad(true);
      rig::ops::sum(rig::ops::mul(rig::ops::conv2d(x, w32, Tensor(), options), u)).backward();
      const std::vector<float> p = w32.grad().to_vector(), sv = sw.to_vector();
      const std::vector<float> want = added(type, sv, p, false);
      ASSERT_NE(want, added(type, sv, p, true))
          << "the data must tell rounding once from rounding twice";
      Tensor w16 = leaf(w, type, dev);
      Tensor grad = sw.to(dev).to(type);
      w16.set_grad(grad);
      const Tensor y = rig::ops::conv2d(x.to(dev).to(type), w16, Tensor(), options);
      rig::ops::sum(rig::ops::mul(y, u.to(dev).to(type))).backward();
      EXPECT_EQ(host(grad), want);
    }
    // Batch norm, with and without its fused relu.
    for (const bool relu : {false, true}) {
      SCOPED_TRACE(::testing::Message() << rig::dtype_name(type) << " batch norm, relu " << relu);
      const std::int64_t c = 16;
      const Tensor x = grid({4, c, 7, 7}, 91), gamma = grid({c}, 92), beta = grid({c}, 93);
      const Tensor u = grid({4, c, 7, 7}, 94), sg = grid({c}, 95), sb = grid({c}, 96);
      const auto run = [&](const Tensor& g, const Tensor& b) {
        const Tensor x16 = x.to(dev).to(type);
        const Tensor y =
            relu ? rig::ops::batch_norm_relu(x16, g, b, Tensor(), Tensor(), true, 0.1F, 1e-5F)
                 : rig::ops::batch_norm(x16, g, b, Tensor(), Tensor(), true, 0.1F, 1e-5F);
        rig::ops::sum(rig::ops::mul(y, u.to(dev).to(type))).backward();
      };
      Tensor g32 = leaf(gamma, DType::f32, dev), b32 = leaf(beta, DType::f32, dev);
      run(g32, b32);
      const std::vector<float> pg = host(g32.grad()), pb = host(b32.grad());
      const std::vector<float> want_g = added(type, sg.to_vector(), pg, false);
      const std::vector<float> want_b = added(type, sb.to_vector(), pb, false);
      ASSERT_NE(want_g, added(type, sg.to_vector(), pg, true))
          << "the data must tell rounding once from rounding twice";
      Tensor g16 = leaf(gamma, type, dev), b16 = leaf(beta, type, dev);
      Tensor g_grad = sg.to(dev).to(type), b_grad = sb.to(dev).to(type);
      g16.set_grad(g_grad);
      b16.set_grad(b_grad);
      run(g16, b16);
      EXPECT_EQ(host(g_grad), want_g) << "gamma's .grad";
      EXPECT_EQ(host(b_grad), want_b) << "beta's .grad";
    }
  }
  // An f32 model's batch norm adds its f32 dgamma and dbeta the same way
  // (one f32 add: an add's bits).
  {
    const std::int64_t c = 16;
    const Tensor x = grid({4, c, 7, 7}, 97), gamma = grid({c}, 98), beta = grid({c}, 99);
    const Tensor u = grid({4, c, 7, 7}, 100), sg = grid({c}, 101);
    const auto run = [&](const Tensor& g, const Tensor& b) {
      const Tensor y = rig::ops::batch_norm(x.to(dev), g, b, Tensor(), Tensor(), true, 0.1F, 1e-5F);
      rig::ops::sum(rig::ops::mul(y, u.to(dev))).backward();
    };
    Tensor g1 = leaf(gamma, DType::f32, dev), b1 = leaf(beta, DType::f32, dev);
    run(g1, b1);
    const std::vector<float> p = host(g1.grad()), s_g = sg.to_vector();
    std::vector<float> want(p.size());
    for (std::size_t i = 0; i < want.size(); ++i) want[i] = s_g[i] + p[i];
    Tensor g2 = leaf(gamma, DType::f32, dev), b2 = leaf(beta, DType::f32, dev);
    Tensor g_grad = sg.to(dev);
    g2.set_grad(g_grad);
    run(g2, b2);
    EXPECT_EQ(host(g_grad), want) << "an f32 gamma's .grad";
    EXPECT_EQ(host(b2.grad()), host(b1.grad())) << "an f32 beta's first gradient";
  }
  // And an f32 convolution its dW (NCHW: the weight is the parameter) and
  // its dx (into the gradient a residual block's input already has).
  {
    rig::ops::Conv2dOptions options;
    options.pad_h = options.pad_w = 1;
    const Tensor x = grid({2, 4, 9, 9}, 102), w = grid({6, 4, 3, 3}, 103);
    const Tensor u = grid({2, 6, 9, 9}, 104), sw = grid({6, 4, 3, 3}, 105);
    const Tensor sx = grid({2, 4, 9, 9}, 106);
    const auto run = [&](Tensor& xl, Tensor& wl) {
      rig::ops::sum(rig::ops::mul(rig::ops::conv2d(xl, wl, Tensor(), options), u.to(dev)))
          .backward();
    };
    Tensor x1 = leaf(x, DType::f32, dev), w1 = leaf(w, DType::f32, dev);
    run(x1, w1);
    const auto sum = [&](const Tensor& s, const Tensor& p) {
      std::vector<float> v = s.to_vector();
      const std::vector<float> pv = host(p);
      for (std::size_t i = 0; i < v.size(); ++i) v[i] += pv[i];
      return v;
    };
    Tensor x2 = leaf(x, DType::f32, dev), w2 = leaf(w, DType::f32, dev);
    Tensor x_grad = sx.to(dev), w_grad = sw.to(dev);
    x2.set_grad(x_grad);
    w2.set_grad(w_grad);
    run(x2, w2);
    EXPECT_EQ(host(w_grad), sum(sw, w1.grad())) << "an f32 weight's .grad";
    EXPECT_EQ(host(x_grad), sum(sx, x1.grad())) << "an f32 input's .grad";
    // A linear layer's products add theirs (beta 1).
    const Tensor lx = grid({5, 8}, 107), lw = grid({6, 8}, 108), lu = grid({5, 6}, 109);
    const Tensor slw = grid({6, 8}, 110), slx = grid({5, 8}, 111);
    const auto run_linear = [&](Tensor& xl, Tensor& wl) {
      rig::ops::sum(
          rig::ops::mul(rig::ops::linear(xl, wl, Tensor(), rig::ops::Activation::none), lu.to(dev)))
          .backward();
    };
    Tensor lx1 = leaf(lx, DType::f32, dev), lw1 = leaf(lw, DType::f32, dev);
    run_linear(lx1, lw1);
    Tensor lx2 = leaf(lx, DType::f32, dev), lw2 = leaf(lw, DType::f32, dev);
    Tensor lx_grad = slx.to(dev), lw_grad = slw.to(dev);
    lx2.set_grad(lx_grad);
    lw2.set_grad(lw_grad);
    run_linear(lx2, lw2);
    EXPECT_EQ(host(lw_grad), sum(slw, lw1.grad())) << "an f32 linear weight's .grad";
    EXPECT_EQ(host(lx_grad), sum(slx, lx1.grad())) << "an f32 linear input's .grad";
    // A layer norm's kernels add dx, dgamma and dbeta.
    const Tensor nx = grid({5, 8}, 112), ng = grid({8}, 113), nb = grid({8}, 114),
                 nu = grid({5, 8}, 115), snx = grid({5, 8}, 116), sng = grid({8}, 117),
                 snb = grid({8}, 118);
    const auto run_norm = [&](Tensor& xl, Tensor& gl, Tensor& bl) {
      rig::ops::sum(rig::ops::mul(rig::ops::layer_norm(xl, gl, bl, 1e-5F), nu.to(dev))).backward();
    };
    Tensor nx1 = leaf(nx, DType::f32, dev), ng1 = leaf(ng, DType::f32, dev),
           nb1 = leaf(nb, DType::f32, dev);
    run_norm(nx1, ng1, nb1);
    Tensor nx2 = leaf(nx, DType::f32, dev), ng2 = leaf(ng, DType::f32, dev),
           nb2 = leaf(nb, DType::f32, dev);
    Tensor nx_grad = snx.to(dev), ng_grad = sng.to(dev), nb_grad = snb.to(dev);
    nx2.set_grad(nx_grad);
    ng2.set_grad(ng_grad);
    nb2.set_grad(nb_grad);
    run_norm(nx2, ng2, nb2);
    EXPECT_EQ(host(nx_grad), sum(snx, nx1.grad())) << "an f32 layer norm input's .grad";
    EXPECT_EQ(host(ng_grad), sum(sng, ng1.grad())) << "an f32 gamma's .grad (layer norm)";
    EXPECT_EQ(host(nb_grad), sum(snb, nb1.grad())) << "an f32 beta's .grad (layer norm)";
  }
}

TEST(Emulated16BitOps, Conv2dHasTheBitsOfItsFloat32Copy) {
  // The emulated device's 16-bit convolutions widen to f32 inside the device
  // and round once, so the bits are those of the f32 path.
  const rig::Device dev = emulated_cuda();
  const Tensor x = random({2, 4, 9, 9}, 51), w = random({6, 4, 3, 3}, 52);
  rig::ops::Conv2dOptions options;
  options.pad_h = options.pad_w = 1;
  options.stride_h = options.stride_w = 2;
  for (const DType type : {DType::bf16, DType::f16}) {
    SCOPED_TRACE(rig::dtype_name(type));
    Tensor x16 = leaf(x, type, dev), w16 = leaf(w, type, dev);
    const Tensor y16 = rig::ops::conv2d(x16, w16, Tensor(), options);
    const Tensor up = random(y16.shape(), 53).to(dev).to(type);
    rig::ops::sum(rig::ops::mul(y16, up)).backward();
    Tensor x32 = leaf(x.to(type).to(DType::f32), DType::f32, dev);
    Tensor w32 = leaf(w.to(type).to(DType::f32), DType::f32, dev);
    const Tensor y32 = rig::ops::conv2d(x32, w32, Tensor(), options).to(type);
    rig::ops::sum(rig::ops::mul(y32, up)).backward();
    EXPECT_EQ(y16.dtype(), type);
    EXPECT_TRUE(same(y16.detach(), y32.detach())) << "y";
    EXPECT_TRUE(same(x16.grad(), x32.grad())) << "dx";
    EXPECT_TRUE(same(w16.grad(), w32.grad())) << "dW";
  }
}

TEST(Emulated16BitOps, MaxPoolHasTheBitsOfItsFloat32Copy) {
  // ResNet's stem pool (3x3, stride 2, padding 1: overlapping windows, so dx
  // sums several gradients) on values with many ties within a window.
  const rig::Device dev = emulated_cuda();
  std::vector<float> tied(2 * 3 * 9 * 9);
  std::mt19937 rng(61);
  for (float& v : tied) v = 0.5F * static_cast<float>(static_cast<int>(rng() % 5) - 2);
  const Tensor x = Tensor::from_vector(tied, {2, 3, 9, 9});
  rig::ops::Pool2dOptions options;
  options.kernel_h = options.kernel_w = 3;
  options.pad_h = options.pad_w = 1;
  options.stride_h = options.stride_w = 2;
  for (const DType type : {DType::bf16, DType::f16}) {
    SCOPED_TRACE(rig::dtype_name(type));
    Tensor x16 = leaf(x, type, dev);
    const Tensor y16 = rig::ops::max_pool2d(x16, options);
    const Tensor up = random(y16.shape(), 62).to(dev).to(type);
    rig::ops::sum(rig::ops::mul(y16, up)).backward();
    Tensor x32 = leaf(x.to(type).to(DType::f32), DType::f32, dev);
    const Tensor y32 = rig::ops::max_pool2d(x32, options).to(type);
    rig::ops::sum(rig::ops::mul(y32, up)).backward();
    EXPECT_EQ(y16.dtype(), type);
    EXPECT_EQ(x16.grad().dtype(), type);
    EXPECT_TRUE(same(y16.detach(), y32.detach())) << "y";
    EXPECT_TRUE(same(x16.grad(), x32.grad())) << "dx";
  }
}

TEST(Emulated16BitOps, GlobalAvgPoolHasTheBitsOfItsFloat32Copy) {
  const rig::Device dev = emulated_cuda();
  // 7 x 7 pixels (ResNet-50's last), and 13 x 1: sums past the lanes' multiple.
  for (const rig::Shape& shape : {rig::Shape{3, 5, 7, 7}, rig::Shape{2, 9, 13, 1}}) {
    const Tensor x = random(shape, 91, -2.0F, 2.0F);
    const Tensor up = random({shape[0], shape[1]}, 92);
    for (const DType type : {DType::bf16, DType::f16}) {
      SCOPED_TRACE(::testing::Message() << rig::dtype_name(type) << " " << rig::to_string(shape));
      Tensor x16 = leaf(x, type, dev);
      const Tensor y16 = rig::ops::global_avg_pool2d(x16);
      rig::ops::sum(rig::ops::mul(y16, up.to(dev).to(type))).backward();
      Tensor x32 = leaf(x.to(type).to(DType::f32), DType::f32, dev);
      const Tensor y32 = rig::ops::global_avg_pool2d(x32);
      rig::ops::sum(rig::ops::mul(y32.to(type), up.to(dev).to(type))).backward();
      EXPECT_EQ(y16.dtype(), type);
      EXPECT_EQ(x16.grad().dtype(), type);
      EXPECT_TRUE(same(y16.detach(), y32.detach())) << "y";
      EXPECT_TRUE(same(x16.grad(), x32.grad())) << "dx";
    }
  }
}

TEST(Emulated16BitOps, ChannelsLastPoolsHaveTheBitsOfTheirFloat32Copies) {
  // ResNet's stem pool and its last global pool on [N, H, W, C] tensors, 37
  // channels (more than a warp, not a multiple of 32), ties within windows.
  const rig::Device dev = emulated_cuda();
  std::vector<float> tied(2 * 9 * 9 * 37);
  std::mt19937 rng(64);
  for (float& v : tied) v = 0.5F * static_cast<float>(static_cast<int>(rng() % 5) - 2);
  const Tensor x = Tensor::from_vector(tied, {2, 9, 9, 37});
  const Tensor g = random({3, 7, 7, 37}, 93, -2.0F, 2.0F);
  rig::ops::Pool2dOptions options;
  options.kernel_h = options.kernel_w = 3;
  options.pad_h = options.pad_w = 1;
  options.stride_h = options.stride_w = 2;
  options.channels_last = true;
  rig::ops::Pool2dOptions nchw = options;
  nchw.channels_last = false;
  for (const DType type : {DType::bf16, DType::f16}) {
    SCOPED_TRACE(rig::dtype_name(type));
    Tensor x16 = leaf(x, type, dev);
    const Tensor y16 = rig::ops::max_pool2d(x16, options);
    EXPECT_EQ(y16.shape(), (rig::Shape{2, 5, 5, 37}));
    const Tensor up = random(y16.shape(), 65).to(dev).to(type);
    rig::ops::sum(rig::ops::mul(y16, up)).backward();
    Tensor x32 = leaf(x.to(type).to(DType::f32), DType::f32, dev);
    const Tensor y32 = rig::ops::max_pool2d(x32, options).to(type);
    rig::ops::sum(rig::ops::mul(y32, up)).backward();
    EXPECT_EQ(y16.dtype(), type);
    EXPECT_EQ(x16.grad().dtype(), type);
    EXPECT_TRUE(same(y16.detach(), y32.detach())) << "max y";
    EXPECT_TRUE(same(x16.grad(), x32.grad())) << "max dx";
    // The NCHW op on the permuted tensor: the same bits.
    const Tensor y_nchw =
        rig::ops::max_pool2d(x16.detach().permute({0, 3, 1, 2}).contiguous(), nchw);
    EXPECT_TRUE(same(y16.detach(), y_nchw.permute({0, 2, 3, 1}).contiguous())) << "max as NCHW";

    Tensor g16 = leaf(g, type, dev);
    const Tensor m16 = rig::ops::global_avg_pool2d(g16, true);
    EXPECT_EQ(m16.shape(), (rig::Shape{3, 37}));
    const Tensor gup = random({3, 37}, 94).to(dev).to(type);
    rig::ops::sum(rig::ops::mul(m16, gup)).backward();
    Tensor g32 = leaf(g.to(type).to(DType::f32), DType::f32, dev);
    const Tensor m32 = rig::ops::global_avg_pool2d(g32, true);
    rig::ops::sum(rig::ops::mul(m32.to(type), gup)).backward();
    EXPECT_EQ(m16.dtype(), type);
    EXPECT_EQ(g16.grad().dtype(), type);
    EXPECT_TRUE(same(m16.detach(), m32.detach())) << "global y";
    EXPECT_TRUE(same(g16.grad(), g32.grad())) << "global dx";
    const Tensor m_nchw =
        rig::ops::global_avg_pool2d(g16.detach().permute({0, 3, 1, 2}).contiguous());
    EXPECT_TRUE(same(m16.detach(), m_nchw)) << "global as NCHW";
  }
}

TEST(Emulated16BitOps, BatchNormReluHasTheBitsOfBatchNormThenRelu) {
  // The CUDA back end fuses the relu into batch norm's apply and backward;
  // every output, gradient and running statistic must keep the two ops' bits.
  const rig::Device dev = emulated_cuda();
  const Tensor x = random({6, 3, 30, 30}, 71, -2.0F, 4.0F);
  const Tensor gamma = random({3}, 72, 0.5F, 1.5F), beta = random({3}, 73);
  for (const DType type : {DType::f32, DType::bf16, DType::f16}) {
    for (const bool training : {true, false}) {
      SCOPED_TRACE(::testing::Message() << rig::dtype_name(type) << " training " << training);
      const Tensor up = random({6, 3, 30, 30}, 74).to(dev).to(type);
      const auto stats = [&] {
        return std::pair{random({3}, 75).to(dev), random({3}, 76, 0.5F, 2.0F).to(dev)};
      };
      auto [mean_f, var_f] = stats();
      auto [mean_u, var_u] = stats();
      // gamma and beta in x's dtype, as a 16-bit model's.
      Tensor xf = leaf(x, type, dev), gf = leaf(gamma, type, dev), bf = leaf(beta, type, dev);
      const Tensor yf = rig::ops::batch_norm_relu(xf, gf, bf, mean_f, var_f, training, 0.1F, 1e-5F);
      rig::ops::sum(rig::ops::mul(yf, up)).backward();
      Tensor xu = leaf(x, type, dev), gu = leaf(gamma, type, dev), bu = leaf(beta, type, dev);
      const Tensor yu =
          rig::ops::relu(rig::ops::batch_norm(xu, gu, bu, mean_u, var_u, training, 0.1F, 1e-5F));
      rig::ops::sum(rig::ops::mul(yu, up)).backward();
      const auto host = [](const Tensor& t) { return t.to_host().to(DType::f32).to_vector(); };
      EXPECT_EQ(yf.dtype(), type);
      EXPECT_EQ(host(yf.detach()), host(yu.detach())) << "y";
      EXPECT_EQ(host(xf.grad()), host(xu.grad())) << "dx";
      EXPECT_EQ(host(gf.grad()), host(gu.grad())) << "dgamma";
      EXPECT_EQ(host(bf.grad()), host(bu.grad())) << "dbeta";
      EXPECT_EQ(host(mean_f), host(mean_u)) << "running mean";
      EXPECT_EQ(host(var_f), host(var_u)) << "running var";
    }
  }
}

TEST(Emulated16BitOps, BatchNormAddReluHasTheBitsOfBatchNormThenAddRelu) {
  // A residual block's end, fused on the CUDA back end: every output,
  // gradient (the residual's too) and running statistic keeps the bits of
  // batch_norm then add_relu; NCHW and channels-last rows, in packs (whose
  // backward reads the relu's mask as bits) and element by element.
  const rig::Device dev = emulated_cuda();
  for (const rig::Shape& shape : {rig::Shape{6, 3, 30, 30}, rig::Shape{300, 37},
                                  rig::Shape{6, 3, 16, 16}, rig::Shape{300, 40}}) {
    const std::int64_t c = shape[1];
    const Tensor x = random(shape, 171, -2.0F, 4.0F), res = random(shape, 172, -1.0F, 1.0F);
    const Tensor gamma = random({c}, 173, 0.5F, 1.5F), beta = random({c}, 174);
    for (const DType type : {DType::f32, DType::bf16, DType::f16}) {
      SCOPED_TRACE(::testing::Message() << rig::dtype_name(type) << " x " << shape.size() << "-d");
      const Tensor up = random(shape, 175).to(dev).to(type);
      const auto stats = [&] {
        return std::pair{random({c}, 176).to(dev), random({c}, 177, 0.5F, 2.0F).to(dev)};
      };
      auto [mean_f, var_f] = stats();
      auto [mean_u, var_u] = stats();
      Tensor xf = leaf(x, type, dev), rf = leaf(res, type, dev), gf = leaf(gamma, type, dev),
             bf = leaf(beta, type, dev);
      const Tensor yf =
          rig::ops::batch_norm_add_relu(xf, rf, gf, bf, mean_f, var_f, true, 0.1F, 1e-5F);
      rig::ops::sum(rig::ops::mul(yf, up)).backward();
      Tensor xu = leaf(x, type, dev), ru = leaf(res, type, dev), gu = leaf(gamma, type, dev),
             bu = leaf(beta, type, dev);
      const Tensor yu = rig::ops::add_relu(
          rig::ops::batch_norm(xu, gu, bu, mean_u, var_u, true, 0.1F, 1e-5F), ru);
      rig::ops::sum(rig::ops::mul(yu, up)).backward();
      const auto host = [](const Tensor& t) { return t.to_host().to(DType::f32).to_vector(); };
      EXPECT_EQ(yf.dtype(), type);
      EXPECT_EQ(host(yf.detach()), host(yu.detach())) << "y";
      EXPECT_EQ(host(xf.grad()), host(xu.grad())) << "dx";
      EXPECT_EQ(host(rf.grad()), host(ru.grad())) << "dresidual";
      EXPECT_EQ(host(gf.grad()), host(gu.grad())) << "dgamma";
      EXPECT_EQ(host(bf.grad()), host(bu.grad())) << "dbeta";
      EXPECT_EQ(host(mean_f), host(mean_u)) << "running mean";
      EXPECT_EQ(host(var_f), host(var_u)) << "running var";
    }
  }
}

TEST(Emulated16BitOps, BatchNormAddBatchNormReluHasTheBitsOfBatchNormThenBatchNormAddRelu) {
  // A residual block's end with a projection shortcut, fused on the CUDA
  // back end (the shortcut's batch norm normalised in the add's pass, both
  // backwards through the one relu mask): every output, gradient and running
  // statistic keeps the bits of batch_norm on the shortcut and then
  // batch_norm_add_relu; NCHW and channels-last rows, in packs (the mask as
  // bits) and element by element; on the CPU it is that composition.
  for (const rig::Device dev : {emulated_cuda(), rig::Device::cpu()}) {
    for (const rig::Shape& shape : {rig::Shape{6, 3, 30, 30}, rig::Shape{300, 37},
                                    rig::Shape{6, 3, 16, 16}, rig::Shape{300, 40}}) {
      const std::int64_t c = shape[1];
      const Tensor x = random(shape, 181, -2.0F, 4.0F), x2 = random(shape, 182, -3.0F, 2.0F);
      const Tensor gamma = random({c}, 183, 0.5F, 1.5F), beta = random({c}, 184);
      const Tensor gamma2 = random({c}, 185, 0.5F, 1.5F), beta2 = random({c}, 186);
      const std::vector<DType> types =
          dev.is_cpu() ? std::vector<DType>{DType::f32}
                       : std::vector<DType>{DType::f32, DType::bf16, DType::f16};
      for (const DType type : types) {
        SCOPED_TRACE(::testing::Message() << rig::to_string(dev) << " " << rig::dtype_name(type)
                                          << " x " << shape.size() << "-d, c " << c);
        const Tensor up = random(shape, 187).to(dev).to(type);
        // The running statistics of both batch norms, one set each run.
        const auto stats = [&](std::uint32_t seed) {
          return std::pair{random({c}, seed).to(dev), random({c}, seed + 1, 0.5F, 2.0F).to(dev)};
        };
        auto [mean_f, var_f] = stats(188);
        auto [mean2_f, var2_f] = stats(190);
        auto [mean_u, var_u] = stats(188);
        auto [mean2_u, var2_u] = stats(190);
        Tensor xf = leaf(x, type, dev), x2f = leaf(x2, type, dev), gf = leaf(gamma, type, dev),
               bf = leaf(beta, type, dev), g2f = leaf(gamma2, type, dev),
               b2f = leaf(beta2, type, dev);
        const Tensor yf = rig::ops::batch_norm_add_batch_norm_relu(
            xf, {gf, bf, mean_f, var_f, 0.1F, 1e-5F}, x2f, {g2f, b2f, mean2_f, var2_f, 0.2F, 1e-3F},
            true);
        rig::ops::sum(rig::ops::mul(yf, up)).backward();
        Tensor xu = leaf(x, type, dev), x2u = leaf(x2, type, dev), gu = leaf(gamma, type, dev),
               bu = leaf(beta, type, dev), g2u = leaf(gamma2, type, dev),
               b2u = leaf(beta2, type, dev);
        const Tensor shortcut =
            rig::ops::batch_norm(x2u, g2u, b2u, mean2_u, var2_u, true, 0.2F, 1e-3F);
        const Tensor yu =
            rig::ops::batch_norm_add_relu(xu, shortcut, gu, bu, mean_u, var_u, true, 0.1F, 1e-5F);
        rig::ops::sum(rig::ops::mul(yu, up)).backward();
        const auto host = [](const Tensor& t) { return t.to_host().to(DType::f32).to_vector(); };
        EXPECT_EQ(yf.dtype(), type);
        EXPECT_EQ(host(yf.detach()), host(yu.detach())) << "y";
        EXPECT_EQ(host(xf.grad()), host(xu.grad())) << "dx";
        EXPECT_EQ(host(x2f.grad()), host(x2u.grad())) << "dx2";
        EXPECT_EQ(host(gf.grad()), host(gu.grad())) << "dgamma";
        EXPECT_EQ(host(bf.grad()), host(bu.grad())) << "dbeta";
        EXPECT_EQ(host(g2f.grad()), host(g2u.grad())) << "dgamma2";
        EXPECT_EQ(host(b2f.grad()), host(b2u.grad())) << "dbeta2";
        EXPECT_EQ(host(mean_f), host(mean_u)) << "running mean";
        EXPECT_EQ(host(var_f), host(var_u)) << "running var";
        EXPECT_EQ(host(mean2_f), host(mean2_u)) << "running mean 2";
        EXPECT_EQ(host(var2_f), host(var2_u)) << "running var 2";
        // Without a backward (no mask kept): the same outputs, in eval mode.
        const rig::NoGradGuard no_grad;
        const Tensor ye = rig::ops::batch_norm_add_batch_norm_relu(
            xf, {gf, bf, mean_f, var_f, 0.1F, 1e-5F}, x2f, {g2f, b2f, mean2_f, var2_f, 0.2F, 1e-3F},
            false);
        const Tensor ue = rig::ops::batch_norm_add_relu(
            xu, rig::ops::batch_norm(x2u, g2u, b2u, mean2_u, var2_u, false, 0.2F, 1e-3F), gu, bu,
            mean_u, var_u, false, 0.1F, 1e-5F);
        EXPECT_EQ(host(ye), host(ue)) << "y in eval mode without grad";
      }
    }
  }
}

TEST(Emulated16BitOps, AddReluHasTheBitsOfAddThenRelu) {
  // A ResNet block's output (same shapes) and a broadcast b, compared as bits
  // (a -0 that relu keeps must stay -0).
  const rig::Device dev = emulated_cuda();
  const Tensor a = random({4, 6, 8}, 81), b_same = random({4, 6, 8}, 82), b_row = random({8}, 83);
  for (const DType type : {DType::f32, DType::bf16, DType::f16}) {
    for (const Tensor& b : {b_same, b_row}) {
      SCOPED_TRACE(::testing::Message() << rig::dtype_name(type) << " b " << b.dim() << "-d");
      const Tensor up = random({4, 6, 8}, 84).to(dev).to(type);
      Tensor af = leaf(a, type, dev), bf = leaf(b, type, dev);
      const Tensor yf = rig::ops::add_relu(af, bf);
      rig::ops::sum(rig::ops::mul(yf, up)).backward();
      Tensor au = leaf(a, type, dev), bu = leaf(b, type, dev);
      const Tensor yu = rig::ops::relu(rig::ops::add(au, bu));
      rig::ops::sum(rig::ops::mul(yu, up)).backward();
      const auto bits = [](const Tensor& t) {
        const std::vector<float> v = t.to_host().to(DType::f32).to_vector();
        std::vector<std::uint32_t> out(v.size());
        std::memcpy(out.data(), v.data(), v.size() * sizeof(float));
        return out;
      };
      EXPECT_EQ(yf.dtype(), type);
      EXPECT_EQ(bits(yf.detach()), bits(yu.detach())) << "y";
      EXPECT_EQ(bits(af.grad()), bits(au.grad())) << "da";
      EXPECT_EQ(bits(bf.grad()), bits(bu.grad())) << "db";
    }
  }
}

// Weights declared one after another (self-attention's q, k and v) and
// multiplied as one (ops::joined_rows, a view of the flat buffer): the
// product adds the joined dW into their .grad in place, each element's f32
// sum rounded once, r(s + p), as the weights' own products would (no
// separate add, which gives r(s + r(p))), and each weight is reported ready
// to the data-parallel reducer once.
TEST(Emulated16BitOps, JoinedWeightsTakeTheirGradientInTheirDotGradRoundingOnce) {
  class Counter final : public rig::autograd::LeafGradListener {
   public:
    void leaf_grad_ready(const rig::TensorImpl& leaf) override { ++ready[&leaf]; }
    std::map<const rig::TensorImpl*, int> ready;
  };
  const rig::Device dev = emulated_cuda();
  const rig::ops::MatmulPrecisionScope bf16(rig::MatmulPrecision::bf16);
  const std::int64_t rows = 12, d = 8;
  const auto grid = [](const rig::Shape& shape, std::uint32_t seed) {
    return Tensor::from_vector(on_grid(static_cast<std::size_t>(rig::shape_numel(shape)), seed),
                               shape);
  };
  rig::ParameterStore store;
  std::vector<Tensor> w;
  for (const char* name : {"q", "k", "v"}) {
    w.push_back(store.declare(name, {d, d}, rig::Initializer::uniform(-1.0F, 1.0F)));
  }
  store.allocate(3, DType::bf16, dev);
  std::vector<Tensor> s;
  for (std::size_t i = 0; i < w.size(); ++i) {
    Tensor values = grid({d, d}, 70 + static_cast<std::uint32_t>(i));
    w[i].detach().copy_from(values);
    s.push_back(grid({d, d}, 80 + static_cast<std::uint32_t>(i)));
    w[i].grad().copy_from(s.back());
  }
  const Tensor x = grid({rows, d}, 90), u = grid({rows, 3 * d}, 91);
  // The f32 dW of each weight: exact on grid values.
  std::vector<std::vector<float>> p;
  for (std::size_t i = 0; i < w.size(); ++i) {
    Tensor w32 = w[i].detach().to_host().to(DType::f32).set_requires_grad(true);
    const Tensor ui =
        u.slice(1, static_cast<std::int64_t>(i) * d, static_cast<std::int64_t>(i + 1) * d);
    rig::ops::sum(rig::ops::mul(rig::ops::linear(x, w32, Tensor()), ui)).backward();
    p.push_back(w32.grad().to_vector());
  }
  Counter counter;
  {
    const rig::autograd::ScopedLeafGradListener listening(counter);
    const Tensor joined = rig::ops::joined_rows({w[0], w[1], w[2]});
    EXPECT_EQ(joined.raw_data(), w[0].raw_data()) << "adjacent weights are viewed, not copied";
    const Tensor y = rig::ops::linear(x.to(dev).to(DType::bf16), joined, Tensor());
    rig::ops::sum(rig::ops::mul(y, u.to(dev).to(DType::bf16))).backward();
  }
  bool told = false;
  for (std::size_t i = 0; i < w.size(); ++i) {
    SCOPED_TRACE(i);
    const std::vector<float> sv = s[i].to_vector();
    std::vector<float> once(sv.size()), twice(sv.size());
    for (std::size_t j = 0; j < sv.size(); ++j) {
      once[j] = round_to(DType::bf16, sv[j] + p[i][j]);
      twice[j] = round_to(DType::bf16, sv[j] + round_to(DType::bf16, p[i][j]));
    }
    told = told || once != twice;
    EXPECT_EQ(w[i].grad().to_host().to(DType::f32).to_vector(), once);
    EXPECT_EQ(counter.ready[w[i].impl()], 1);
  }
  EXPECT_TRUE(told) << "the data must tell rounding once from rounding twice";
}

}  // namespace

// ids [count] drawn from [0, vocab - 2]: the last row is never reached.
Tensor ids_of(std::int64_t count, std::int64_t vocab, std::uint32_t seed) {
  std::vector<std::int64_t> ids(static_cast<std::size_t>(count));
  std::mt19937 rng(seed);
  for (auto& id : ids)
    id = static_cast<std::int64_t>(rng() % static_cast<std::uint32_t>(vocab - 1));
  return Tensor::from_vector(ids, {count});
}

TEST(Emulated16BitOps, EmbeddingAddsIntoA16BitGradientBufferWithTheDensePathsBits) {
  // A mixed-precision parameter's gradient is a 16-bit view of the flat
  // buffer: the embedding adds its rows straight into it (index_add_16)
  // instead of a dense f32 [V, D] gradient cast and added. Two uses in one
  // backward (a shared embedding) and a second backward onto what is there;
  // the reference is a leaf without a buffer, which takes the dense path.
  // 2^20 + 3 ids are past the sorting kernels (the dense fallback).
  const rig::Device dev = emulated_cuda();
  struct Case {
    std::int64_t vocab, dim, count;
    DType type;
  };
  const std::int64_t past_sort = (std::int64_t{1} << 20) + 3;
  for (const Case c : {Case{37, 19, 33, DType::bf16}, Case{37, 19, 33, DType::f16},
                       Case{7, 1, past_sort, DType::bf16}}) {
    const DType type = c.type;
    SCOPED_TRACE(::testing::Message() << rig::dtype_name(type) << " count " << c.count);
    rig::ParameterStore store;
    const Tensor w = store.declare("emb", {c.vocab, c.dim}, rig::Initializer::uniform(-1, 1));
    store.allocate(5, type, dev);
    Tensor reference = leaf(w.detach().to(DType::f32), type, dev);
    const Tensor ids[3] = {ids_of(c.count, c.vocab, 81).to(dev),
                           ids_of(c.count, c.vocab, 82).to(dev),
                           ids_of(c.count, c.vocab, 83).to(dev)};
    Tensor up[3];
    for (std::uint32_t i = 0; i < 3; ++i) {
      up[i] = random({c.count, c.dim}, 84 + i, -2.0F, 2.0F).to(dev).to(type);
    }
    for (const Tensor& weight : {w, reference}) {
      const Tensor both =
          rig::ops::add(rig::ops::sum(rig::ops::mul(rig::ops::embedding(weight, ids[0]), up[0])),
                        rig::ops::sum(rig::ops::mul(rig::ops::embedding(weight, ids[1]), up[1])));
      both.backward();
      rig::ops::sum(rig::ops::mul(rig::ops::embedding(weight, ids[2]), up[2])).backward();
    }
    const Tensor got = w.grad(), want = reference.grad();
    EXPECT_EQ(got.dtype(), type);
    EXPECT_EQ(want.dtype(), type);
    const std::vector<float> g = got.to_host().to(DType::f32).to_vector();
    EXPECT_EQ(g, want.to_host().to(DType::f32).to_vector());
    // The row no id reaches (the last) stays zero; the others do not.
    EXPECT_EQ(g.back(), 0.0F);
    EXPECT_TRUE(std::any_of(g.begin(), g.end(), [](float v) { return v != 0.0F; }));
  }
}
