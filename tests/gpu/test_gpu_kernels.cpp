// The kernels of core/cuda/kernels on a real GPU (through librig_cuda's
// rig::cuda::run) against the CPU back end on the same inputs: the tolerances
// of the emulator's tests (tests/kernels) where exp and log are involved,
// bit equality for the families that share their element math with the CPU
// (optimizer updates, unscale, dropout). Odd shapes throughout.
#include <gtest/gtest.h>

#include <cstdint>
#include <utility>
#include <vector>

#include "cuda/runtime/device_properties.cuh"
#include "cuda/runtime/kernel_runs.cuh"
#include "device_array.hpp"
#include "gpu_test.hpp"
#include "kernel_test_util.hpp"
#include "rig/half.hpp"

namespace {

using namespace rig::kernels;
using rig::kernels::test::bit_equal;
using rig::kernels::test::close;
using rig::kernels::test::cpu;
using rig::kernels::test::row_plan;
using rig::kernels::test::uniform;
using rig_gpu_test::DeviceArray;

class GpuKernels : public rig_gpu_test::GpuTest {};

constexpr std::int64_t kShapes[][2] = {{1, 1},     {3, 33},   {37, 257},
                                       {64, 1000}, {5, 4099}, {300, 512}};

std::vector<std::uint8_t> some_mask(std::size_t n, std::uint32_t seed) {
  std::vector<std::uint8_t> mask(n);
  for (std::size_t i = 0; i < n; ++i) mask[i] = ((i * 2654435761U + seed) >> 7) % 3 != 0;
  return mask;
}

TEST_F(GpuKernels, SoftmaxMatchesCpu) {
  for (const auto& [rows, cols] : kShapes) {
    for (const bool log : {false, true}) {
      SCOPED_TRACE(::testing::Message() << rows << "x" << cols << " log " << log);
      const auto n = static_cast<std::size_t>(rows * cols);
      const std::vector<float> x = uniform(rows * cols, -8.0F, 8.0F, 3);
      const std::vector<float> g = uniform(rows * cols, -1.0F, 1.0F, 4);
      const std::vector<std::uint8_t> mask = some_mask(n, 5);
      std::vector<float> want_y(n), want_dx(n);
      cpu().softmax_forward(row_plan(rows, cols), x.data(), mask.data(), want_y.data(), log);
      cpu().softmax_backward(want_y.data(), g.data(), want_dx.data(), rows, cols, log);

      const DeviceArray<float> dx_in(x), dg(g), dy_cpu(want_y);
      const DeviceArray<std::uint8_t> dmask(mask);
      DeviceArray<float> dy(n), ddx(n);
      rig::cuda::run(SoftmaxForward{dx_in.data(), dmask.data(), dy.data(), rows, cols, log},
                     nullptr);
      rig::cuda::run(SoftmaxBackward{dy_cpu.data(), dg.data(), ddx.data(), rows, cols, log},
                     nullptr);
      EXPECT_TRUE(close(dy.to_host(), want_y, log ? 2e-5F : 1e-7F, log ? 2e-6F : 2e-5F));
      EXPECT_TRUE(close(ddx.to_host(), want_dx, 1e-6F, 1e-5F));
    }
  }
}

TEST_F(GpuKernels, LayerNormMatchesCpu) {
  for (const auto& [rows, d] : kShapes) {
    SCOPED_TRACE(::testing::Message() << rows << "x" << d);
    const auto n = static_cast<std::size_t>(rows * d);
    const std::vector<float> x = uniform(rows * d, -3.0F, 5.0F, 6);
    const std::vector<float> g = uniform(rows * d, -1.0F, 1.0F, 7);
    const std::vector<float> gamma = uniform(d, 0.5F, 1.5F, 8);
    const std::vector<float> beta = uniform(d, -0.5F, 0.5F, 9);
    std::vector<float> y(n), mean(rows), rstd(rows), dx(n), dgamma(d), dbeta(d);
    cpu().layer_norm_forward(x.data(), gamma.data(), beta.data(), y.data(), mean.data(),
                             rstd.data(), rows, d, 1e-5F);
    std::vector<float> scratch(static_cast<std::size_t>(cpu().layer_norm_scratch_size(rows, d)));
    cpu().layer_norm_backward(x.data(), gamma.data(), mean.data(), rstd.data(), g.data(), dx.data(),
                              dgamma.data(), dbeta.data(), rows, d, scratch.data());

    const DeviceArray<float> gx(x), gg(g), ggamma(gamma), gbeta(beta);
    DeviceArray<float> gy(n), gmean(rows), grstd(rows), gdx(n), gdgamma(d), gdbeta(d);
    rig::cuda::run(LayerNormForward{gx.data(), ggamma.data(), gbeta.data(), gy.data(), gmean.data(),
                                    grstd.data(), rows, d, 1e-5F},
                   nullptr);
    rig::cuda::run(LayerNormBackwardDx{gx.data(), ggamma.data(), gmean.data(), grstd.data(),
                                       gg.data(), gdx.data(), rows, d},
                   nullptr);
    DeviceArray<float> partials(static_cast<std::size_t>(layer_norm_params_scratch(rows, d)) + 1);
    run_layer_norm_params([](const auto& k) { rig::cuda::run(k, nullptr); },
                          LayerNormBackwardParams{.x = gx.data(),
                                                  .mean = gmean.data(),
                                                  .rstd = grstd.data(),
                                                  .g = gg.data(),
                                                  .rows = rows,
                                                  .d = d},
                          gdgamma.data(), gdbeta.data(), partials.data());
    EXPECT_TRUE(close(gy.to_host(), y, 1e-5F, 1e-5F));
    EXPECT_TRUE(close(gmean.to_host(), mean, 1e-6F, 1e-5F));
    EXPECT_TRUE(close(grstd.to_host(), rstd, 1e-6F, 1e-5F));
    EXPECT_TRUE(close(gdx.to_host(), dx, 1e-5F, 1e-4F));
    EXPECT_TRUE(close(gdgamma.to_host(), dgamma, 1e-4F, 1e-4F));
    EXPECT_TRUE(close(gdbeta.to_host(), dbeta, 1e-4F, 1e-4F));
  }
}

TEST_F(GpuKernels, CrossEntropyWritesTheGradientInPlace) {
  for (const auto& [rows, c] : kShapes) {
    SCOPED_TRACE(::testing::Message() << rows << "x" << c);
    const auto n = static_cast<std::size_t>(rows * c);
    const std::vector<float> x = uniform(rows * c, -6.0F, 6.0F, 10);
    std::vector<std::int64_t> labels(static_cast<std::size_t>(rows));
    for (std::int64_t r = 0; r < rows; ++r) labels[static_cast<std::size_t>(r)] = (r * 7919) % c;
    const std::vector<float> row_scale = uniform(rows, 0.0F, 2.0F, 11);
    const rig::math::SmoothedTargets q = rig::math::torch_smoothing(0.1F, c);
    const float factor = 0.75F;
    std::vector<float> loss(rows), lse(rows), dx(n);
    cpu().cross_entropy_forward(x.data(), labels.data(), rows, c, q.on, q.off, loss.data(),
                                lse.data());
    cpu().cross_entropy_backward(x.data(), labels.data(), lse.data(), row_scale.data(), 0.5F,
                                 &factor, rows, c, q.on, q.off, dx.data());

    DeviceArray<float> gx(x);
    const DeviceArray<std::int64_t> glabels(labels);
    const DeviceArray<float> gscale(row_scale), gfactor(std::vector<float>{factor});
    DeviceArray<float> gloss(rows), glse(rows);
    rig::cuda::run(
        CrossEntropyForward{gx.data(), glabels.data(), gloss.data(), glse.data(), rows, c, q},
        nullptr);
    rig::cuda::run(CrossEntropyBackward{gx.data(), glabels.data(), glse.data(), gscale.data(),
                                        gfactor.data(), 0.5F, gx.data(), rows, c, q},
                   nullptr);
    EXPECT_TRUE(close(gloss.to_host(), loss, 2e-5F, 2e-6F));
    EXPECT_TRUE(close(glse.to_host(), lse, 2e-5F, 2e-6F));
    EXPECT_TRUE(close(gx.to_host(), dx, 1e-7F, 2e-5F));  // in place over the logits
  }
}

TEST_F(GpuKernels, OptimizerUpdatesAreBitEqualToCpu) {
  for (const std::int64_t n : {1, 31, 4099, 1 << 20}) {
    SCOPED_TRACE(n);
    const std::vector<float> p0 = uniform(n, -1.0F, 1.0F, 12);
    const std::vector<float> grad = uniform(n, -0.1F, 0.1F, 13);
    const std::vector<float> m0 = uniform(n, -0.01F, 0.01F, 14);
    const std::vector<float> v0 = uniform(n, 0.0F, 0.001F, 15);
    rig::AdamUpdate a;
    a.step_size = 1e-3F;
    a.inv_bc2_sqrt = 1.2F;
    a.coupled_decay = 0.01F;
    a.shrink = 0.999F;
    for (const bool amsgrad : {false, true}) {
      std::vector<float> p = p0, m = m0, v = v0, vmax = v0;
      cpu().adam_update(n, p.data(), grad.data(), m.data(), v.data(),
                        amsgrad ? vmax.data() : nullptr, a, {});
      DeviceArray<float> gp(p0), gm(m0), gv(v0), gvmax(v0);
      const DeviceArray<float> gg(grad);
      rig::cuda::run(AdamUpdateKernel{n, gp.data(), gg.data(), gm.data(), gv.data(),
                                      amsgrad ? gvmax.data() : nullptr, a},
                     nullptr);
      EXPECT_TRUE(bit_equal(gp.to_host(), p));
      EXPECT_TRUE(bit_equal(gm.to_host(), m));
      EXPECT_TRUE(bit_equal(gv.to_host(), v));
      if (amsgrad) {
        EXPECT_TRUE(bit_equal(gvmax.to_host(), vmax));
      }
    }
    rig::SgdUpdate s;
    s.learning_rate = 0.1F;
    s.weight_decay = 1e-4F;
    s.momentum = 0.9F;
    s.nesterov = true;
    s.first = false;
    std::vector<float> p = p0, buffer = m0;
    cpu().sgd_update(n, p.data(), grad.data(), buffer.data(), s, {});
    DeviceArray<float> gp(p0), gbuffer(m0);
    const DeviceArray<float> gg(grad);
    rig::cuda::run(SgdUpdateKernel{n, gp.data(), gg.data(), gbuffer.data(), s}, nullptr);
    EXPECT_TRUE(bit_equal(gp.to_host(), p));
    EXPECT_TRUE(bit_equal(gbuffer.to_host(), buffer));
  }
}

// Mixed precision folded into the update: bf16 gradients read times the
// unscale, the new values also written in bf16, as the CPU's folded update.
TEST_F(GpuKernels, FoldedMixedPrecisionUpdatesAreBitEqualToCpu) {
  for (const std::int64_t n : {31, 4099, 1 << 20}) {
    SCOPED_TRACE(n);
    const std::vector<float> p0 = uniform(n, -1.0F, 1.0F, 32);
    const std::vector<float> m0 = uniform(n, -0.01F, 0.01F, 34);
    const std::vector<float> v0 = uniform(n, 0.0F, 0.001F, 35);
    std::vector<std::uint16_t> g16;
    for (const float g : uniform(n, -100.0F, 100.0F, 33)) {
      g16.push_back(rig::float_to_bfloat16_bits(g));
    }
    const float unscale = 1.0F / 3000.0F;
    const rig::GradientSource source{g16.data(), rig::DType::bf16, unscale};
    const rig::kernels::UpdateOperands io{ElementType::bf16, unscale, nullptr, ElementType::bf16};
    rig::AdamUpdate a;
    a.step_size = 1e-3F;
    a.inv_bc2_sqrt = 1.2F;
    a.coupled_decay = 0.01F;
    std::vector<float> p = p0, m = m0, v = v0;
    std::vector<std::uint16_t> published(static_cast<std::size_t>(n));
    cpu().adam_update(n, p.data(), source, m.data(), v.data(), nullptr, a,
                      {published.data(), rig::DType::bf16});
    DeviceArray<float> gp(p0), gm(m0), gv(v0);
    const DeviceArray<std::uint16_t> gg(g16);
    DeviceArray<std::uint16_t> gpub(static_cast<std::size_t>(n));
    AdamUpdateKernel adam{n, gp.data(), gg.data(), gm.data(), gv.data(), nullptr, a, io};
    adam.io.publish = gpub.data();
    rig::cuda::run(adam, nullptr);
    EXPECT_TRUE(bit_equal(gp.to_host(), p));
    EXPECT_TRUE(bit_equal(gm.to_host(), m));
    EXPECT_TRUE(bit_equal(gv.to_host(), v));
    EXPECT_EQ(gpub.to_host(), published);

    rig::SgdUpdate s;
    s.learning_rate = 0.1F;
    s.momentum = 0.9F;
    s.first = false;
    std::vector<float> sp = p0, buffer = m0;
    cpu().sgd_update(n, sp.data(), source, buffer.data(), s, {published.data(), rig::DType::bf16});
    DeviceArray<float> gsp(p0), gbuffer(m0);
    SgdUpdateKernel sgd{n, gsp.data(), gg.data(), gbuffer.data(), s, io};
    sgd.io.publish = gpub.data();
    rig::cuda::run(sgd, nullptr);
    EXPECT_TRUE(bit_equal(gsp.to_host(), sp));
    EXPECT_TRUE(bit_equal(gbuffer.to_host(), buffer));
    EXPECT_EQ(gpub.to_host(), published);
  }
}

TEST_F(GpuKernels, NovogradMatchesCpu) {
  const std::vector<rig::FlatSlice> slices = {{0, 1}, {1, 0}, {1, 70000}, {70001, 33}, {70034, 3}};
  const std::int64_t n = 70037;
  rig::NovogradUpdate a;
  a.learning_rate = 0.01F;
  a.weight_decay = 0.001F;
  a.avg = 0.05F;
  std::vector<float> p = uniform(n, -1.0F, 1.0F, 20), m = uniform(n, -0.1F, 0.1F, 21);
  std::vector<float> ema(slices.size(), 0.0F);
  DeviceArray<float> gp(p), gm(m), gema(ema);
  DeviceArray<std::uint8_t> gslices(slices.size() * sizeof(rig::FlatSlice));
  RIG_CUDA_CHECK(cudaMemcpy(gslices.data(), slices.data(), gslices.size(), cudaMemcpyHostToDevice));
  const auto count = static_cast<std::int64_t>(slices.size());
  for (int step = 0; step < 3; ++step) {
    const std::vector<float> g = uniform(n, -2.0F, 2.0F, 22 + static_cast<std::uint32_t>(step));
    cpu().novograd_update(p.data(), g.data(), m.data(), ema.data(), slices.data(), count, a);
    const DeviceArray<float> gg(g);
    rig::cuda::run(
        NovogradUpdateKernel{gp.data(), gg.data(), gm.data(), gema.data(),
                             reinterpret_cast<const rig::FlatSlice*>(gslices.data()), count, a},
        nullptr);
    RIG_CUDA_CHECK(cudaDeviceSynchronize());  // g lives until here
  }
  // The slices' f64 sums run in another order than the CPU's and are rounded to f32.
  EXPECT_TRUE(close(gema.to_host(), ema, 0.0F, 1e-6F));
  EXPECT_TRUE(close(gp.to_host(), p, 1e-7F, 1e-5F));
  EXPECT_TRUE(close(gm.to_host(), m, 1e-7F, 1e-5F));
}

TEST_F(GpuKernels, UnscaleAndOverflowCheckMatchCpu) {
  for (const std::int64_t n : {1, 257, 1 << 20}) {
    for (const bool overflow : {false, true}) {
      SCOPED_TRACE(::testing::Message() << n << " overflow " << overflow);
      std::vector<float> g = uniform(n, -4.0F, 4.0F, 16);
      if (overflow) g[static_cast<std::size_t>(n / 2)] = INFINITY;
      std::vector<float> want(static_cast<std::size_t>(n));
      float want_amax = 0.0F;
      cpu().unscale(n, rig::DType::f32, g.data(), want.data(), 0.125F, &want_amax);

      const DeviceArray<float> gsrc(g);
      DeviceArray<float> gmaster(static_cast<std::size_t>(n)), gamax(1);
      UnscalePartials partials{n, ElementType::f32, gsrc.data(), gmaster.data(), 0.125F};
      const std::uint32_t blocks = partials.plan(rig::cuda::current_device_properties()).grid.x;
      DeviceArray<std::uint32_t> bits(blocks);
      DeviceArray<double> sums(blocks), total(1);
      partials.partial_amax_bits = bits.data();
      partials.partial_sum_squares = sums.data();
      rig::cuda::run(partials, nullptr);
      rig::cuda::run(UnscaleFinish{bits.data(), sums.data(), blocks, gamax.data(), total.data()},
                     nullptr);
      EXPECT_TRUE(bit_equal(gmaster.to_host(), want));
      EXPECT_TRUE(bit_equal(gamax.to_host(), std::vector<float>{want_amax}));
    }
  }
}

TEST_F(GpuKernels, DropoutMasksAreBitEqualToCpu) {
  const rig::RandomKey key{1234, 56, 3, rig::purpose_id("gpu.dropout")};
  for (const std::int64_t n : {1, 33, 100003}) {
    SCOPED_TRACE(n);
    const float p = 0.3F, scale = 1.0F / 0.7F;
    const std::vector<float> x = uniform(n, -1.0F, 1.0F, 17);
    const auto words = static_cast<std::size_t>((n + 31) / 32);
    std::vector<float> y(static_cast<std::size_t>(n)), dx(static_cast<std::size_t>(n));
    std::vector<std::uint32_t> mask(words);
    cpu().dropout_forward(key, p, scale, rig::DType::f32, x.data(), y.data(), n, mask.data());
    cpu().dropout_backward(mask.data(), scale, rig::DType::f32, x.data(), dx.data(), n);

    const DeviceArray<float> gx(x);
    DeviceArray<float> gy(static_cast<std::size_t>(n)), gdx(static_cast<std::size_t>(n));
    DeviceArray<std::uint32_t> gmask(words);
    const auto stream = rig::math::PhiloxStream::of(key.seed, key.step, key.rank, key.purpose);
    rig::cuda::run(DropoutForward{stream, rig::math::dropout_threshold(p), scale, ElementType::f32,
                                  gx.data(), gy.data(), gmask.data(), n},
                   nullptr);
    rig::cuda::run(DropoutBackward{gmask.data(), scale, ElementType::f32, gx.data(), gdx.data(), n},
                   nullptr);
    EXPECT_TRUE(bit_equal(gmask.to_host(), mask));
    EXPECT_TRUE(bit_equal(gy.to_host(), y));
    EXPECT_TRUE(bit_equal(gdx.to_host(), dx));
  }
}

// Mixed precision: softmax, layer norm and the fused cross-entropy reading
// and writing f16 / bf16 tensors (math in f32), against the CPU back end's
// f32 result on the same rounded inputs: one ulp of the type apart at most.
TEST_F(GpuKernels, HalfTypesReadAndWriteTheirTensors) {
  const std::int64_t rows = 37, cols = 1000;
  const auto n = static_cast<std::size_t>(rows * cols);
  for (const auto& [type, ulp] :
       {std::pair{ElementType::f16, 1e-3F}, std::pair{ElementType::bf16, 8e-3F}}) {
    SCOPED_TRACE(type == ElementType::f16 ? "f16" : "bf16");
    const auto to16 = [type = type](float v) {
      return type == ElementType::f16 ? rig::float_to_half_bits(v) : rig::float_to_bfloat16_bits(v);
    };
    const auto from16 = [type = type](std::uint16_t b) {
      return type == ElementType::f16 ? rig::half_bits_to_float(b) : rig::bfloat16_bits_to_float(b);
    };
    std::vector<float> x = uniform(rows * cols, -6.0F, 6.0F, 30);
    std::vector<std::uint16_t> x16(n);
    for (std::size_t i = 0; i < n; ++i) {
      x16[i] = to16(x[i]);
      x[i] = from16(x16[i]);  // the CPU sees the rounded inputs
    }
    const auto rounded = [&](const std::vector<float>& v) {
      std::vector<float> out(v.size());
      for (std::size_t i = 0; i < v.size(); ++i) out[i] = from16(to16(v[i]));
      return out;
    };
    const auto widen = [&](const std::vector<std::uint16_t>& v) {
      std::vector<float> out(v.size());
      for (std::size_t i = 0; i < v.size(); ++i) out[i] = from16(v[i]);
      return out;
    };
    const DeviceArray<std::uint16_t> gx(x16);
    auto* gxf = reinterpret_cast<float*>(gx.data());  // 16-bit values behind the float* fields

    std::vector<float> y(n);
    cpu().softmax_forward(row_plan(rows, cols), x.data(), nullptr, y.data(), false);
    DeviceArray<std::uint16_t> gy(n);
    rig::cuda::run(SoftmaxForward{.x = gxf,
                                  .y = reinterpret_cast<float*>(gy.data()),
                                  .rows = rows,
                                  .cols = cols,
                                  .type = type},
                   nullptr);
    EXPECT_TRUE(close(widen(gy.to_host()), rounded(y), 1e-7F, ulp));

    std::vector<float> ln(n), mean(rows), rstd(rows);
    cpu().layer_norm_forward(x.data(), nullptr, nullptr, ln.data(), mean.data(), rstd.data(), rows,
                             cols, 1e-5F);
    DeviceArray<std::uint16_t> gln(n);
    DeviceArray<float> gmean(rows), grstd(rows);
    rig::cuda::run(LayerNormForward{.x = gxf,
                                    .y = reinterpret_cast<float*>(gln.data()),
                                    .mean = gmean.data(),
                                    .rstd = grstd.data(),
                                    .rows = rows,
                                    .d = cols,
                                    .eps = 1e-5F,
                                    .type = type},
                   nullptr);
    EXPECT_TRUE(close(widen(gln.to_host()), rounded(ln), 1e-4F, ulp));

    std::vector<std::int64_t> labels(static_cast<std::size_t>(rows));
    for (std::int64_t r = 0; r < rows; ++r) labels[static_cast<std::size_t>(r)] = (r * 31) % cols;
    const rig::math::SmoothedTargets q = rig::math::torch_smoothing(0.1F, cols);
    std::vector<float> loss(rows), lse(rows), dx(n);
    cpu().cross_entropy_forward(x.data(), labels.data(), rows, cols, q.on, q.off, loss.data(),
                                lse.data());
    cpu().cross_entropy_backward(x.data(), labels.data(), lse.data(), nullptr, 1.0F, nullptr, rows,
                                 cols, q.on, q.off, dx.data());
    DeviceArray<std::uint16_t> glogits(x16);  // the gradient replaces the logits
    const DeviceArray<std::int64_t> glabels(labels);
    DeviceArray<float> gloss(rows), glse(rows);
    auto* logits = reinterpret_cast<float*>(glogits.data());
    rig::cuda::run(CrossEntropyForward{.x = logits,
                                       .labels = glabels.data(),
                                       .loss = gloss.data(),
                                       .lse = glse.data(),
                                       .rows = rows,
                                       .c = cols,
                                       .targets = q,
                                       .type = type},
                   nullptr);
    rig::cuda::run(CrossEntropyBackward{.x = logits,
                                        .labels = glabels.data(),
                                        .lse = glse.data(),
                                        .dx = logits,
                                        .rows = rows,
                                        .c = cols,
                                        .targets = q,
                                        .type = type},
                   nullptr);
    EXPECT_TRUE(close(gloss.to_host(), loss, 2e-5F, 2e-6F));
    EXPECT_TRUE(close(widen(glogits.to_host()), rounded(dx), 1e-7F, ulp));
  }
}

}  // namespace
