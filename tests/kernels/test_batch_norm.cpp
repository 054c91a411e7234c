#include "cuda/kernels/batch_norm.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string>

#include "kernel_test_util.hpp"
#include "rig/half.hpp"

namespace rig::kernels::test {
namespace {

// c = 1; [N, C] data (inner 1); n * inner below one chunk, not a multiple of
// the block, and over several chunks (kBatchNormChunk = 4096) whose
// boundaries fall inside images.
constexpr backend::BatchNormShape kShapes[] = {
    {1, 1, 1},  {2, 3, 5},  {4, 1, 1000}, {5, 7, 1},    {37, 3, 1},
    {2, 5, 49}, {3, 4, 33}, {3, 2, 4097}, {1, 1, 9000}, {600, 2, 13},
};

// Channels last (inner 1, the row-tiled partial reductions): c below, at and
// above the warp and not a multiple of 32, n below a chunk, exactly one, and
// over several with a partial last one (kBatchNormChunk = 4096 rows).
constexpr backend::BatchNormShape kChannelsLast[] = {
    {1, 3, 1},     {100, 1, 1},  {9000, 1, 1},           {2 * 4096 + 17, 3, 1}, {50, 32, 1},
    {4096, 64, 1}, {3, 1000, 1}, {2 * 4096 + 17, 33, 1}, {4096 + 100, 200, 1},  {300, 200, 1},
};

std::string describe(const backend::BatchNormShape& s) {
  return (::testing::Message() << "[" << s.n << ", " << s.c << ", " << s.inner << "]").GetString();
}

std::size_t elements(const backend::BatchNormShape& s) {
  return static_cast<std::size_t>(s.n * s.c * s.inner);
}

float max_abs(const std::vector<float>& v) {
  float m = 0.0F;
  for (const float f : v) m = std::max(m, std::fabs(f));
  return m;
}

// v rounded to bf16, as bits and as the f32 values they hold.
struct Bf16 {
  std::vector<std::uint16_t> bits;
  std::vector<float> values;

  explicit Bf16(const std::vector<float>& v) : bits(v.size()), values(v.size()) {
    for (std::size_t i = 0; i < v.size(); ++i) {
      bits[i] = float_to_bfloat16_bits(v[i]);
      values[i] = bfloat16_bits_to_float(bits[i]);
    }
  }
  // The kernels take 16-bit tensors through their float* fields.
  const float* data() const { return reinterpret_cast<const float*>(bits.data()); }
};

// Runs the two kernels of batch_norm_stats.
void stats(const backend::BatchNormShape& s, const float* x, float* mean, float* var,
           std::uint64_t emu_seed, ElementType type = ElementType::f32) {
  const std::int64_t parts = s.c * batch_norm_chunks(s.n, s.inner);
  std::vector<float> scratch(static_cast<std::size_t>(batch_norm_stats_scratch(s.n, s.c, s.inner)),
                             -7.0F);
  BatchNormStatsPartial partial{x, s.n, s.c, s.inner, scratch.data(), scratch.data() + parts};
  partial.type = type;
  launch_partial(partial, [&](const auto& k) { run(k, emu_seed); });
  run(BatchNormStatsFinish{scratch.data(), scratch.data() + parts, s.n, s.c, s.inner, mean, var},
      emu_seed);
}

// Mean 0 and mean 40 (two-pass matters) of `type` x (the CPU on the rounded
// values): mean within 1e-6 max|x|, variance within 1e-5 relative, the same
// bits under both emulator seeds.
void expect_stats_match_cpu(const backend::BatchNormShape& s, ElementType type,
                            std::uint32_t seed) {
  for (const float offset : {0.0F, 40.0F}) {
    SCOPED_TRACE(describe(s) + " offset " + std::to_string(offset) +
                 (type == ElementType::bf16 ? " bf16" : " f32"));
    const std::vector<float> raw =
        uniform(static_cast<std::int64_t>(elements(s)), offset - 1.5F, offset + 2.5F, seed);
    const Bf16 half(raw);
    const std::vector<float>& x = type == ElementType::bf16 ? half.values : raw;
    const float* xk = type == ElementType::bf16 ? half.data() : raw.data();
    const auto c = static_cast<std::size_t>(s.c);
    std::vector<float> want_mean(c), want_var(c);
    cpu().batch_norm_stats(s, x.data(), want_mean.data(), want_var.data());
    std::vector<float> first;
    for (const std::uint64_t emu_seed : kSeeds) {
      std::vector<float> mean(c, 7.0F), var(c, 7.0F);
      stats(s, xk, mean.data(), var.data(), emu_seed, type);
      EXPECT_TRUE(close(mean, want_mean, 1e-6F * max_abs(x), 0.0F));
      EXPECT_TRUE(close(var, want_var, 0.0F, 1e-5F));
      std::vector<float> both = mean;
      both.insert(both.end(), var.begin(), var.end());
      if (first.empty()) {
        first = both;
      } else {
        EXPECT_TRUE(bit_equal(both, first));
      }
    }
  }
}

TEST(KernelBatchNorm, StatsMatchCpu) {
  for (const backend::BatchNormShape& s : kShapes) {
    expect_stats_match_cpu(s, ElementType::f32,
                           static_cast<std::uint32_t>(s.n * 131 + s.c * 17 + s.inner));
  }
}

// The channels-last path (inner 1), f32 and bf16 x.
TEST(KernelBatchNorm, ChannelsLastStatsMatchCpu) {
  for (const backend::BatchNormShape& s : kChannelsLast) {
    for (const ElementType type : {ElementType::f32, ElementType::bf16}) {
      expect_stats_match_cpu(s, type, static_cast<std::uint32_t>(s.n * 131 + s.c * 17 + 5));
    }
  }
}

// Channels last with the first 8 rows of every chunk far out (+1000): for c
// >= 32 every thread's first row, which it shifts its sums by. The same
// tolerances.
TEST(KernelBatchNorm, ChannelsLastStatsWithOutlyingShifts) {
  for (const backend::BatchNormShape& s :
       {backend::BatchNormShape{2 * 4096 + 17, 33, 1}, backend::BatchNormShape{300, 5, 1}}) {
    SCOPED_TRACE(describe(s));
    const auto c = static_cast<std::size_t>(s.c);
    std::vector<float> x = uniform(static_cast<std::int64_t>(elements(s)), -1.5F, 2.5F, 31);
    for (std::int64_t i = 0; i < s.n; ++i) {
      if (i % kBatchNormChunk < 8) {
        for (std::size_t ch = 0; ch < c; ++ch) x[static_cast<std::size_t>(i) * c + ch] += 1000.0F;
      }
    }
    std::vector<float> mean(c, 7.0F), var(c, 7.0F), want_mean(c), want_var(c);
    cpu().batch_norm_stats(s, x.data(), want_mean.data(), want_var.data());
    stats(s, x.data(), mean.data(), var.data(), kSeeds[0]);
    EXPECT_TRUE(close(mean, want_mean, 1e-6F * max_abs(x), 0.0F));
    EXPECT_TRUE(close(var, want_var, 0.0F, 1e-5F));
  }
}

// Channels last, every third channel constant (a different value each, some
// far from 0) among random ones: those give their value and a variance of
// exactly 0, in f32 and in bf16.
TEST(KernelBatchNorm, ChannelsLastStatsOfConstantChannelsAreExact) {
  for (const backend::BatchNormShape& s :
       {backend::BatchNormShape{2 * 4096 + 17, 33, 1}, backend::BatchNormShape{300, 5, 1}}) {
    for (const ElementType type : {ElementType::f32, ElementType::bf16}) {
      SCOPED_TRACE(describe(s) + (type == ElementType::bf16 ? " bf16" : " f32"));
      const auto c = static_cast<std::size_t>(s.c);
      std::vector<float> x = uniform(static_cast<std::int64_t>(elements(s)), -1.0F, 3.0F, 11);
      const std::vector<float> value = uniform(s.c, -300.0F, 300.0F, 12);
      for (std::size_t ch = 0; ch < c; ch += 3) {
        for (std::size_t i = 0; i < static_cast<std::size_t>(s.n); ++i) x[i * c + ch] = value[ch];
      }
      const Bf16 half(x);
      const std::vector<float>& xv = type == ElementType::bf16 ? half.values : x;
      std::vector<float> mean(c, 7.0F), var(c, 7.0F);
      stats(s, type == ElementType::bf16 ? half.data() : x.data(), mean.data(), var.data(),
            kSeeds[0], type);
      for (std::size_t ch = 0; ch < c; ch += 3) {
        EXPECT_TRUE(
            bit_equal(std::vector<float>{mean[ch], var[ch]}, std::vector<float>{xv[ch], 0.0F}))
            << "channel " << ch;
      }
    }
  }
}

// The partial reductions' outputs are the same bits when the blocks come in
// another order and the rows of the launch are split over grid.y (the launch
// planned for a device with a small grid).
TEST(KernelBatchNorm, PartialsDoNotDependOnTheGrid) {
  for (const backend::BatchNormShape& s :
       {backend::BatchNormShape{2 * 4096 + 17, 33, 1}, backend::BatchNormShape{300, 200, 1},
        backend::BatchNormShape{9000, 1, 1}, backend::BatchNormShape{3, 2, 4097}}) {
    SCOPED_TRACE(describe(s));
    const std::int64_t parts = s.c * batch_norm_chunks(s.n, s.inner);
    const auto n = static_cast<std::int64_t>(elements(s));
    const std::vector<float> x = uniform(n, 1.0F, 4.0F, 21);
    const std::vector<float> dy = uniform(n, -1.0F, 1.0F, 22);
    const std::vector<float> mean = uniform(s.c, 2.0F, 3.0F, 23);
    // Each kernel as planned, or with a third of its blocks in x and the
    // rest over grid.y.
    auto partials = [&](bool split) {
      std::vector<float> out(static_cast<std::size_t>(4 * parts), -7.0F);
      const BatchNormStatsPartial st{x.data(), s.n, s.c, s.inner, out.data(), out.data() + parts};
      const BatchNormGradPartial gr{x.data(),
                                    dy.data(),
                                    mean.data(),
                                    s.n,
                                    s.c,
                                    s.inner,
                                    out.data() + 2 * parts,
                                    out.data() + 3 * parts};
      const auto launch = [&](const auto& kernel) {
        if (!split) {
          run(kernel);
          return;
        }
        simt::LaunchShape shape = kernel.plan(h100());
        shape.grid = {(shape.grid.x + 2) / 3, 3, 1};
        simt::emulate(shape, kernel, simt::EmulatorOptions{.seed = 3});
      };
      launch_partial(st, launch);
      launch_partial(gr, launch);
      return out;
    };
    EXPECT_TRUE(bit_equal(partials(true), partials(false)));
  }
}

// A constant channel: variance exactly 0 (no negative rounding).
TEST(KernelBatchNorm, StatsOfConstantChannelAreExact) {
  const backend::BatchNormShape s{3, 2, 3000};
  std::vector<float> x(elements(s), 0.1F);
  std::vector<float> mean(2, 7.0F), var(2, 7.0F), want_mean(2), want_var(2);
  cpu().batch_norm_stats(s, x.data(), want_mean.data(), want_var.data());
  stats(s, x.data(), mean.data(), var.data(), kSeeds[0]);
  // The CPU's float lanes are off by about 2e-6 here (and its variance is not 0).
  EXPECT_TRUE(close(mean, want_mean, 0.0F, 1e-5F));
  EXPECT_TRUE(bit_equal(mean, std::vector<float>{0.1F, 0.1F}));
  EXPECT_TRUE(bit_equal(var, std::vector<float>{0.0F, 0.0F}));
}

struct PrepareCase {
  bool training, running, gamma, beta;
};

TEST(KernelBatchNorm, PrepareMatchesCpuBits) {
  for (const std::int64_t c : {1, 7, 300}) {
    for (const PrepareCase pc :
         {PrepareCase{true, true, true, true}, PrepareCase{true, false, false, false},
          PrepareCase{true, true, false, true}, PrepareCase{false, true, true, false},
          PrepareCase{false, true, false, false}}) {
      SCOPED_TRACE(::testing::Message()
                   << "c " << c << " training " << pc.training << " running " << pc.running
                   << " gamma " << pc.gamma << " beta " << pc.beta);
      const auto cn = static_cast<std::size_t>(c);
      const auto seed = static_cast<std::uint32_t>(c);
      const std::vector<float> mean0 = uniform(c, -1.0F, 1.0F, seed);
      const std::vector<float> var = uniform(c, 0.0F, 3.0F, seed + 1);
      const std::vector<float> rm0 = uniform(c, -1.0F, 1.0F, seed + 2);
      const std::vector<float> rv0 = uniform(c, 0.1F, 2.0F, seed + 3);
      const std::vector<float> gamma = uniform(c, 0.5F, 1.5F, seed + 4);
      const std::vector<float> beta = uniform(c, -0.5F, 0.5F, seed + 5);

      struct Out {
        std::vector<float> mean, rm, rv, invstd, scale, shift;
      };
      auto make = [&] {
        return Out{mean0,
                   rm0,
                   rv0,
                   std::vector<float>(cn, 7.0F),
                   std::vector<float>(cn, 7.0F),
                   std::vector<float>(cn, 7.0F)};
      };
      Out want = make();
      backend::BatchNormPrepare args;
      args.c = c;
      args.training = pc.training;
      args.momentum = 0.1F;
      args.eps = 1e-5F;
      args.unbias = 1.25F;
      args.mean = want.mean.data();
      args.var = pc.training ? var.data() : nullptr;
      args.running_mean = pc.running ? want.rm.data() : nullptr;
      args.running_var = pc.running ? want.rv.data() : nullptr;
      args.gamma = pc.gamma ? gamma.data() : nullptr;
      args.beta = pc.beta ? beta.data() : nullptr;
      args.invstd = want.invstd.data();
      args.scale = want.scale.data();
      args.shift = want.shift.data();
      cpu().batch_norm_prepare(args);

      Out got = make();
      run(BatchNormPrepareChannels{
          c, args.training, args.momentum, args.eps, args.unbias, got.mean.data(), args.var,
          pc.running ? got.rm.data() : nullptr, pc.running ? got.rv.data() : nullptr,
          static_cast<const float*>(args.gamma), static_cast<const float*>(args.beta),
          got.invstd.data(), got.scale.data(), got.shift.data()});
      EXPECT_TRUE(bit_equal(got.mean, want.mean));
      EXPECT_TRUE(bit_equal(got.rm, want.rm));
      EXPECT_TRUE(bit_equal(got.rv, want.rv));
      EXPECT_TRUE(bit_equal(got.invstd, want.invstd));
      EXPECT_TRUE(bit_equal(got.scale, want.scale));
      EXPECT_TRUE(bit_equal(got.shift, want.shift));
    }
  }
}

TEST(KernelBatchNorm, ApplyMatchesCpu) {
  for (const backend::BatchNormShape& s : kShapes) {
    SCOPED_TRACE(describe(s));
    const auto seed = static_cast<std::uint32_t>(s.n * 7 + s.c * 3 + s.inner);
    const std::vector<float> x = uniform(static_cast<std::int64_t>(elements(s)), -2.0F, 2.0F, seed);
    const std::vector<float> scale = uniform(s.c, 0.5F, 2.0F, seed + 1);
    const std::vector<float> shift = uniform(s.c, -1.0F, 1.0F, seed + 2);
    std::vector<float> cpu_y(elements(s)), got(elements(s), 7.0F);
    cpu().batch_norm_apply(s, x.data(), scale.data(), shift.data(), cpu_y.data());
    // The kernel fuses x * scale + shift; so do the CPU's AVX2 / AVX-512
    // clones, not its baseline one: bits against fmaf, an ulp against the CPU.
    std::vector<float> want(elements(s));
    for (std::size_t t = 0; t < want.size(); ++t) {
      const auto ch = static_cast<std::size_t>((static_cast<std::int64_t>(t) / s.inner) % s.c);
      want[t] = std::fma(x[t], scale[ch], shift[ch]);
    }
    EXPECT_TRUE(close(want, cpu_y, 1e-6F, 0.0F));
    run(BatchNormApply{x.data(), scale.data(), shift.data(), got.data(), s.n, s.c, s.inner});
    EXPECT_TRUE(bit_equal(got, want));
    // One small block: the grid-stride loop's channel tracking over many steps.
    std::vector<float> strided(elements(s), 7.0F);
    simt::emulate(
        simt::LaunchShape{{2, 1, 1}, {32, 1, 1}, 0},
        BatchNormApply{x.data(), scale.data(), shift.data(), strided.data(), s.n, s.c, s.inner},
        simt::EmulatorOptions{.seed = 1});
    EXPECT_TRUE(bit_equal(strided, want));
  }
}

struct Outputs {
  bool dx, dgamma, dbeta;
};

// Runs the kernel sequence of batch_norm_backward.
void backward(const backend::BatchNormShape& s, const float* x, const float* dy, const float* mean,
              const float* invstd, const float* gamma, bool batch_stats, float* dx, float* dgamma,
              float* dbeta, std::uint64_t emu_seed, ElementType type = ElementType::f32,
              batch_norm_detail::ReluMask relu = {}, float* masked_dy = nullptr) {
  const std::int64_t parts = s.c * batch_norm_chunks(s.n, s.inner);
  std::vector<float> scratch(
      static_cast<std::size_t>(batch_norm_backward_scratch(s.n, s.c, s.inner)), -7.0F);
  float* coef = scratch.data();
  float* part = scratch.data() + 3 * s.c;
  const bool sums = dgamma != nullptr || dbeta != nullptr || (dx != nullptr && batch_stats);
  if (sums) {
    BatchNormGradPartial k{x, dy, mean, s.n, s.c, s.inner, part, part + parts};
    k.type = type;
    k.relu = relu;
    k.masked_dy = masked_dy;
    launch_partial(k, [&](const auto& kernel) { run(kernel, emu_seed); });
  }
  run(BatchNormGradFinish{part, part + parts, sums, s.n, s.c, s.inner, mean, invstd, gamma,
                          batch_stats, dx != nullptr, dgamma, dbeta, coef},
      emu_seed);
  if (dx != nullptr) {
    BatchNormBackwardDx k{x, dy, coef, dx, s.n, s.c, s.inner};
    k.type = type;
    k.relu = relu;
    if (masked_dy != nullptr) {  // as the back end: dx reads the stored gradient
      k.dy = masked_dy;
      k.relu = {};
    }
    run(k, emu_seed);
  }
}

// The per-channel magnitudes the backward's tolerances come from: the
// largest channel's sum |dy| and sum |dy (x - mean)| invstd.
struct Magnitudes {
  double l1_g = 0.0, l1_gx = 0.0;
};
Magnitudes magnitudes(const backend::BatchNormShape& s, const std::vector<float>& x,
                      const std::vector<float>& dy, const std::vector<float>& mean,
                      const std::vector<float>& invstd) {
  Magnitudes m;
  for (std::int64_t ch = 0; ch < s.c; ++ch) {
    double a = 0.0, b = 0.0;
    for (std::int64_t i = 0; i < s.n; ++i) {
      for (std::int64_t r = 0; r < s.inner; ++r) {
        const auto at = static_cast<std::size_t>((i * s.c + ch) * s.inner + r);
        const auto chs = static_cast<std::size_t>(ch);
        a += std::fabs(dy[at]);
        b += std::fabs(dy[at] * (x[at] - mean[chs]));
      }
    }
    m.l1_g = std::max(m.l1_g, a);
    m.l1_gx = std::max(m.l1_gx, b * invstd[static_cast<std::size_t>(ch)]);
  }
  return m;
}

// The CPU's statistics and invstd of x (gamma may be null).
void cpu_stats(const backend::BatchNormShape& s, const std::vector<float>& x, const float* gamma,
               std::vector<float>& mean, std::vector<float>& invstd) {
  const auto c = static_cast<std::size_t>(s.c);
  std::vector<float> var(c), scale(c), shift(c);
  mean.assign(c, 0.0F);
  invstd.assign(c, 0.0F);
  cpu().batch_norm_stats(s, x.data(), mean.data(), var.data());
  backend::BatchNormPrepare args;
  args.c = s.c;
  args.mean = mean.data();
  args.var = var.data();
  args.gamma = gamma;
  args.invstd = invstd.data();
  args.scale = scale.data();
  args.shift = shift.data();
  cpu().batch_norm_prepare(args);
}

// dgamma / dbeta within 1e-6 of the largest channel's sum of |terms|; dx with
// batch statistics within 1e-5 max|gamma invstd dy| (+1e-5 relative), without
// them the same bits.
TEST(KernelBatchNorm, BackwardMatchesCpu) {
  for (const backend::BatchNormShape& s : kShapes) {
    for (const bool batch_stats : {true, false}) {
      for (const bool with_gamma : {true, false}) {
        for (const Outputs o : {Outputs{true, true, true}, Outputs{true, false, false},
                                Outputs{false, true, true}, Outputs{false, false, true}}) {
          SCOPED_TRACE(::testing::Message()
                       << describe(s) << " batch_stats " << batch_stats << " gamma " << with_gamma
                       << " dx " << o.dx << " dgamma " << o.dgamma << " dbeta " << o.dbeta);
          const auto seed = static_cast<std::uint32_t>(s.n * 31 + s.c * 7 + s.inner);
          const auto n = elements(s);
          const auto c = static_cast<std::size_t>(s.c);
          const std::vector<float> x = uniform(static_cast<std::int64_t>(n), 1.0F, 4.0F, seed);
          const std::vector<float> dy =
              uniform(static_cast<std::int64_t>(n), -1.0F, 1.0F, seed + 1);
          const std::vector<float> gamma = uniform(s.c, 0.5F, 1.5F, seed + 2);
          const float* gp = with_gamma ? gamma.data() : nullptr;
          // The CPU's statistics and invstd, shared by both sides.
          std::vector<float> mean(c), var(c), invstd(c), scale(c), shift(c);
          cpu().batch_norm_stats(s, x.data(), mean.data(), var.data());
          backend::BatchNormPrepare args;
          args.c = s.c;
          args.mean = mean.data();
          args.var = var.data();
          args.gamma = gp;
          args.invstd = invstd.data();
          args.scale = scale.data();
          args.shift = shift.data();
          cpu().batch_norm_prepare(args);

          std::vector<float> want_dx(n, 7.0F), want_dgamma(c, 7.0F), want_dbeta(c, 7.0F);
          cpu().batch_norm_backward(s, x.data(), dy.data(), mean.data(), invstd.data(), gp,
                                    batch_stats, o.dx ? want_dx.data() : nullptr,
                                    o.dgamma ? want_dgamma.data() : nullptr,
                                    o.dbeta ? want_dbeta.data() : nullptr);

          // Tolerances from the magnitudes of the summed terms.
          double l1_g = 0.0, l1_gx = 0.0;
          for (std::size_t ch = 0; ch < c; ++ch) {
            double a = 0.0, b = 0.0;
            for (std::int64_t i = 0; i < s.n; ++i) {
              for (std::int64_t r = 0; r < s.inner; ++r) {
                const auto at = static_cast<std::size_t>(
                    (i * s.c + static_cast<std::int64_t>(ch)) * s.inner + r);
                a += std::fabs(dy[at]);
                b += std::fabs(dy[at] * (x[at] - mean[ch]));
              }
            }
            l1_g = std::max(l1_g, a);
            l1_gx = std::max(l1_gx, b * invstd[ch]);
          }
          float max_a = 0.0F;
          for (std::size_t ch = 0; ch < c; ++ch) {
            max_a = std::max(max_a, (with_gamma ? gamma[ch] : 1.0F) * invstd[ch]);
          }

          std::vector<float> first;
          for (const std::uint64_t emu_seed : kSeeds) {
            std::vector<float> dx(n, 7.0F), dgamma(c, 7.0F), dbeta(c, 7.0F);
            backward(s, x.data(), dy.data(), mean.data(), invstd.data(), gp, batch_stats,
                     o.dx ? dx.data() : nullptr, o.dgamma ? dgamma.data() : nullptr,
                     o.dbeta ? dbeta.data() : nullptr, emu_seed);
            EXPECT_TRUE(close(dgamma, want_dgamma, static_cast<float>(1e-6 * l1_gx), 0.0F));
            EXPECT_TRUE(close(dbeta, want_dbeta, static_cast<float>(1e-6 * l1_g), 0.0F));
            if (batch_stats) {
              EXPECT_TRUE(close(dx, want_dx, 1e-5F * max_a * max_abs(dy), 1e-5F));
            } else {
              EXPECT_TRUE(bit_equal(dx, want_dx));
            }
            std::vector<float> all = dx;
            all.insert(all.end(), dgamma.begin(), dgamma.end());
            all.insert(all.end(), dbeta.begin(), dbeta.end());
            if (first.empty()) {
              first = all;
            } else {
              EXPECT_TRUE(bit_equal(all, first));
            }
          }
        }
      }
    }
  }
}

// Channels last, with batch statistics and gamma: dgamma and dbeta (f32 and
// bf16 x and dy, the CPU on the rounded values) and dx (f32) within
// BackwardMatchesCpu's tolerances, the same bits under both seeds.
TEST(KernelBatchNorm, ChannelsLastBackwardMatchesCpu) {
  for (const backend::BatchNormShape& s : kChannelsLast) {
    for (const ElementType type : {ElementType::f32, ElementType::bf16}) {
      const bool f32 = type == ElementType::f32;
      SCOPED_TRACE(describe(s) + (f32 ? " f32" : " bf16"));
      const auto seed = static_cast<std::uint32_t>(s.n * 31 + s.c * 7 + 3);
      const auto n = elements(s);
      const auto c = static_cast<std::size_t>(s.c);
      const Bf16 x16(uniform(static_cast<std::int64_t>(n), 1.0F, 4.0F, seed));
      const Bf16 dy16(uniform(static_cast<std::int64_t>(n), -1.0F, 1.0F, seed + 1));
      // bf16 values either way: f32 runs them as f32.
      const std::vector<float>& x = x16.values;
      const std::vector<float>& dy = dy16.values;
      const std::vector<float> gamma = uniform(s.c, 0.5F, 1.5F, seed + 2);
      std::vector<float> mean, invstd;
      cpu_stats(s, x, gamma.data(), mean, invstd);
      std::vector<float> want_dx(n, 7.0F), want_dgamma(c, 7.0F), want_dbeta(c, 7.0F);
      cpu().batch_norm_backward(s, x.data(), dy.data(), mean.data(), invstd.data(), gamma.data(),
                                true, want_dx.data(), want_dgamma.data(), want_dbeta.data());
      const Magnitudes m = magnitudes(s, x, dy, mean, invstd);
      float max_a = 0.0F;
      for (std::size_t ch = 0; ch < c; ++ch) max_a = std::max(max_a, gamma[ch] * invstd[ch]);

      std::vector<float> first;
      for (const std::uint64_t emu_seed : kSeeds) {
        std::vector<float> dx(n, 7.0F), dgamma(c, 7.0F), dbeta(c, 7.0F);
        backward(s, f32 ? x.data() : x16.data(), f32 ? dy.data() : dy16.data(), mean.data(),
                 invstd.data(), gamma.data(), true, f32 ? dx.data() : nullptr, dgamma.data(),
                 dbeta.data(), emu_seed, type);
        EXPECT_TRUE(close(dgamma, want_dgamma, static_cast<float>(1e-6 * m.l1_gx), 0.0F));
        EXPECT_TRUE(close(dbeta, want_dbeta, static_cast<float>(1e-6 * m.l1_g), 0.0F));
        if (f32) {
          EXPECT_TRUE(close(dx, want_dx, 1e-5F * max_a * max_abs(dy), 1e-5F));
        }
        std::vector<float> all = dx;
        all.insert(all.end(), dgamma.begin(), dgamma.end());
        all.insert(all.end(), dbeta.begin(), dbeta.end());
        if (first.empty()) {
          first = all;
        } else {
          EXPECT_TRUE(bit_equal(all, first));
        }
      }
    }
  }
}

// The relu fold (its mask from relu's output, about half of it 0, or from x
// with a scale and shift): the bits of the backward on dy masked by y > 0,
// channels last and not, f32 and bf16; the masked dy, where stored, is that
// masked dy.
TEST(KernelBatchNorm, ReluFoldIsTheMaskedBackward) {
  for (const backend::BatchNormShape& s :
       {backend::BatchNormShape{2 * 4096 + 17, 33, 1}, backend::BatchNormShape{300, 200, 1},
        backend::BatchNormShape{37, 3, 1}, backend::BatchNormShape{3, 4, 33}}) {
    for (const ElementType type : {ElementType::f32, ElementType::bf16}) {
      const bool f32 = type == ElementType::f32;
      SCOPED_TRACE(describe(s) + (f32 ? " f32" : " bf16"));
      const auto n = elements(s);
      const auto c = static_cast<std::size_t>(s.c);
      const auto seed = static_cast<std::uint32_t>(s.n * 13 + s.c);
      const Bf16 x(uniform(static_cast<std::int64_t>(n), 1.0F, 4.0F, seed));
      const Bf16 dy(uniform(static_cast<std::int64_t>(n), -1.0F, 1.0F, seed + 1));
      std::vector<float> y = uniform(static_cast<std::int64_t>(n), -1.0F, 1.0F, seed + 2);
      for (float& v : y) v = std::max(v, 0.0F);
      const Bf16 relu_y(y);
      std::vector<float> masked = dy.values;
      for (std::size_t i = 0; i < n; ++i) {
        if (!(relu_y.values[i] > 0.0F)) masked[i] = 0.0F;
      }
      const Bf16 masked16(masked);
      const std::vector<float> gamma = uniform(s.c, 0.5F, 1.5F, seed + 3);
      std::vector<float> mean, invstd;
      cpu_stats(s, x.values, gamma.data(), mean, invstd);
      auto outputs = [&](const float* g, batch_norm_detail::ReluMask relu,
                         float* masked_dy = nullptr) {
        std::vector<float> dx(n, 7.0F), dgamma(c, 7.0F), dbeta(c, 7.0F);
        backward(s, f32 ? x.values.data() : x.data(), g, mean.data(), invstd.data(), gamma.data(),
                 true, dx.data(), dgamma.data(), dbeta.data(), kSeeds[0], type, relu, masked_dy);
        if (!f32) dx.resize((n + 1) / 2);  // the floats holding the bf16 dx
        dx.insert(dx.end(), dgamma.begin(), dgamma.end());
        dx.insert(dx.end(), dbeta.begin(), dbeta.end());
        return dx;
      };
      const float* g = f32 ? dy.values.data() : dy.data();
      const batch_norm_detail::ReluMask from_y{f32 ? relu_y.values.data() : relu_y.data()};
      const std::vector<float> unfolded = outputs(f32 ? masked.data() : masked16.data(), {});
      EXPECT_TRUE(bit_equal(outputs(g, from_y), unfolded)) << "mask from y";
      std::vector<float> stored(n, 7.0F);
      EXPECT_TRUE(bit_equal(outputs(g, from_y, stored.data()), unfolded)) << "masked dy stored";
      if (f32) {
        EXPECT_TRUE(bit_equal(stored, masked)) << "the stored masked dy";
      } else {
        std::vector<std::uint16_t> stored_bits(n);
        std::memcpy(stored_bits.data(), stored.data(), n * sizeof(std::uint16_t));
        EXPECT_EQ(stored_bits, masked16.bits) << "the stored masked dy";
      }

      // The mask from x: y as BatchNormApply stores it, rounded_to(type,
      // fmaf(x, scale, shift)) > 0; every 5th x where that is about 0.
      const std::vector<float> scale = uniform(s.c, 0.5F, 1.5F, seed + 4);
      const std::vector<float> shift = uniform(s.c, -4.0F, -1.0F, seed + 5);
      std::vector<float> xv = x.values;
      for (std::size_t i = 0; i < n; i += 5) {
        const std::size_t ch = (i / static_cast<std::size_t>(s.inner)) % c;
        xv[i] = -shift[ch] / scale[ch];
      }
      const Bf16 x_near(xv);
      const std::vector<float>& xs = f32 ? xv : x_near.values;
      std::vector<float> masked_x = dy.values;
      std::size_t kept = 0;
      for (std::size_t i = 0; i < n; ++i) {
        const std::size_t ch = (i / static_cast<std::size_t>(s.inner)) % c;
        const float y_i = rounded_to(type, std::fma(xs[i], scale[ch], shift[ch]));
        if (!(y_i > 0.0F)) masked_x[i] = 0.0F;
        kept += y_i > 0.0F ? 1 : 0;
      }
      EXPECT_GT(kept, 0U);
      EXPECT_LT(kept, n);
      const Bf16 masked_x16(masked_x);
      auto outputs_x = [&](const float* g_x, batch_norm_detail::ReluMask relu) {
        std::vector<float> dx(n, 7.0F), dgamma(c, 7.0F), dbeta(c, 7.0F);
        backward(s, f32 ? xv.data() : x_near.data(), g_x, mean.data(), invstd.data(), gamma.data(),
                 true, dx.data(), dgamma.data(), dbeta.data(), kSeeds[0], type, relu);
        if (!f32) dx.resize((n + 1) / 2);
        dx.insert(dx.end(), dgamma.begin(), dgamma.end());
        dx.insert(dx.end(), dbeta.begin(), dbeta.end());
        return dx;
      };
      EXPECT_TRUE(bit_equal(outputs_x(g, {nullptr, scale.data(), shift.data()}),
                            outputs_x(f32 ? masked_x.data() : masked_x16.data(), {})))
          << "mask from x";
    }
  }
}

}  // namespace
}  // namespace rig::kernels::test
