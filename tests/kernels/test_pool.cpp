#include "cuda/kernels/pool.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>

#include "kernel_test_util.hpp"
#include "rig/half.hpp"

namespace rig::kernels::test {
namespace {

struct Case {
  std::int64_t planes, h, w, kernel_h, kernel_w, stride_h, stride_w, pad_h, pad_w;
};

// Padding, stride > kernel, windows reaching over the border, a kernel as
// large as the image, 1x1 images and odd sizes; PyTorch's output sizes
// (floor), padding at most half the kernel.
constexpr Case kCases[] = {
    {3, 7, 9, 3, 3, 2, 2, 1, 1},    // ResNet's stem pool, odd sizes
    {2, 8, 8, 2, 2, 2, 2, 0, 0},    // non-overlapping
    {1, 11, 10, 2, 3, 4, 5, 0, 1},  // stride > kernel, skipped pixels
    {5, 5, 6, 5, 6, 1, 1, 2, 3},    // kernel of the whole image, padded all round
    {4, 1, 1, 1, 1, 1, 1, 0, 0},    // 1x1
    {2, 13, 6, 3, 1, 3, 1, 1, 0},   // 1-wide kernel, padding on one axis
    {6, 9, 7, 4, 4, 3, 2, 2, 2},    // even kernel, last windows cut by the border
    {37, 3, 5, 3, 3, 1, 1, 1, 1},   // many planes, every window padded
};

backend::Pool2dShape shape_of(const Case& k) {
  backend::Pool2dShape s;
  s.planes = k.planes;
  s.h = k.h;
  s.w = k.w;
  s.kernel_h = k.kernel_h;
  s.kernel_w = k.kernel_w;
  s.stride_h = k.stride_h;
  s.stride_w = k.stride_w;
  s.pad_h = k.pad_h;
  s.pad_w = k.pad_w;
  s.out_h = (k.h + 2 * k.pad_h - k.kernel_h) / k.stride_h + 1;
  s.out_w = (k.w + 2 * k.pad_w - k.kernel_w) / k.stride_w + 1;
  return s;
}

PoolGeometry geometry_of(const backend::Pool2dShape& s) {
  return PoolGeometry{s.planes,   s.h,        s.w,        s.out_h, s.out_w, s.kernel_h,
                      s.kernel_w, s.stride_h, s.stride_w, s.pad_h, s.pad_w, s.channels_last,
                      s.channels};
}

// Few distinct values (ties), some NaNs and some -inf.
std::vector<float> max_pool_input(std::int64_t n, std::uint32_t seed) {
  std::vector<float> x = uniform(n, -3.0F, 3.0F, seed);
  std::mt19937 gen(seed + 99);
  for (float& v : x) {
    v = std::round(v);
    const auto roll = gen() % 32;
    if (roll == 0) v = std::numeric_limits<float>::quiet_NaN();
    if (roll == 1) v = -std::numeric_limits<float>::infinity();
  }
  return x;
}

// The CPU's avg_pool2d_backward (core/cpu/pool.cpp: per output row, per
// window row, per kernel column, per output column) with the product fused.
std::vector<float> avg_backward_fused(const backend::Pool2dShape& s, const std::vector<float>& dy) {
  std::vector<float> dx(static_cast<std::size_t>(s.planes * s.h * s.w), 0.0F);
  const float inv_area = 1.0F / static_cast<float>(s.kernel_h * s.kernel_w);
  for (std::int64_t p = 0; p < s.planes; ++p) {
    for (std::int64_t oy = 0; oy < s.out_h; ++oy) {
      for (std::int64_t ky = 0; ky < s.kernel_h; ++ky) {
        const std::int64_t r = oy * s.stride_h - s.pad_h + ky;
        if (r < 0 || r >= s.h) continue;
        for (std::int64_t kx = 0; kx < s.kernel_w; ++kx) {
          for (std::int64_t ox = 0; ox < s.out_w; ++ox) {
            const std::int64_t col = ox * s.stride_w - s.pad_w + kx;
            if (col < 0 || col >= s.w) continue;
            float& d = dx[static_cast<std::size_t>((p * s.h + r) * s.w + col)];
            d = std::fma(dy[static_cast<std::size_t>((p * s.out_h + oy) * s.out_w + ox)], inv_area,
                         d);
          }
        }
      }
    }
  }
  return dx;
}

std::string describe(const Case& k) {
  return (::testing::Message() << k.planes << "x" << k.h << "x" << k.w << " kernel " << k.kernel_h
                               << "x" << k.kernel_w << " stride " << k.stride_h << "x" << k.stride_w
                               << " pad " << k.pad_h << "x" << k.pad_w)
      .GetString();
}

TEST(KernelPool, MaxPoolForwardAndBackwardMatchCpuBits) {
  for (const Case& k : kCases) {
    SCOPED_TRACE(describe(k));
    const backend::Pool2dShape s = shape_of(k);
    const PoolGeometry geo = geometry_of(s);
    const auto in = static_cast<std::size_t>(s.planes * s.h * s.w);
    const auto out = static_cast<std::size_t>(s.planes * s.out_h * s.out_w);
    const auto seed = static_cast<std::uint32_t>(k.h * 131 + k.w * 7 + k.kernel_h);
    const std::vector<float> x = max_pool_input(static_cast<std::int64_t>(in), seed);
    const std::vector<float> dy = uniform(static_cast<std::int64_t>(out), -1.0F, 1.0F, seed + 1);

    std::vector<float> want_y(out);
    std::vector<std::int32_t> want_index(out);
    cpu().max_pool2d_forward(s, x.data(), want_y.data(), want_index.data());
    std::vector<float> want_dx(in);
    cpu().max_pool2d_backward(s, want_index.data(), dy.data(), want_dx.data());

    for (const std::uint64_t emu_seed : kSeeds) {
      std::vector<float> y(out, 7.0F);
      std::vector<std::int32_t> index(out, -7);
      run(MaxPool2dForward{geo, x.data(), y.data(), index.data()}, emu_seed);
      EXPECT_TRUE(bit_equal(y, want_y));
      EXPECT_TRUE(bit_equal(index, want_index));
      std::vector<float> y_only(out, 7.0F);  // no index kept
      run(MaxPool2dForward{geo, x.data(), y_only.data(), nullptr}, emu_seed);
      EXPECT_TRUE(bit_equal(y_only, want_y));

      std::vector<float> dx(in, 7.0F);
      run(MaxPool2dBackward{geo, want_index.data(), dy.data(), dx.data()}, emu_seed);
      EXPECT_TRUE(bit_equal(dx, want_dx));
    }
  }
}

// Windows of -inf only (their first pixel), ties (the first) and several
// NaNs in a window (the last), padded windows included.
TEST(KernelPool, MaxPoolTieAndNanRulesMatchCpu) {
  const backend::Pool2dShape s = shape_of(Case{3, 4, 5, 3, 3, 2, 2, 1, 1});
  const PoolGeometry geo = geometry_of(s);
  const float inf = std::numeric_limits<float>::infinity();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  std::vector<float> x(static_cast<std::size_t>(s.planes * s.h * s.w), -inf);  // plane 0
  for (std::size_t i = 20; i < 40; ++i) x[i] = 2.0F;                           // plane 1: ties
  for (std::size_t i = 40; i < 60; ++i) x[i] = static_cast<float>(i % 3);      // plane 2
  x[41] = nan;
  x[47] = -nan;
  x[58] = nan;
  const auto out = static_cast<std::size_t>(s.planes * s.out_h * s.out_w);
  std::vector<float> want_y(out), y(out, 7.0F);
  std::vector<std::int32_t> want_index(out), index(out, -7);
  cpu().max_pool2d_forward(s, x.data(), want_y.data(), want_index.data());
  run(MaxPool2dForward{geo, x.data(), y.data(), index.data()});
  EXPECT_TRUE(bit_equal(y, want_y));
  EXPECT_TRUE(bit_equal(index, want_index));
}

TEST(KernelPool, AvgPoolForwardAndBackwardMatchCpu) {
  for (const Case& k : kCases) {
    SCOPED_TRACE(describe(k));
    const backend::Pool2dShape s = shape_of(k);
    const PoolGeometry geo = geometry_of(s);
    const auto in = static_cast<std::size_t>(s.planes * s.h * s.w);
    const auto out = static_cast<std::size_t>(s.planes * s.out_h * s.out_w);
    const auto seed = static_cast<std::uint32_t>(k.h * 17 + k.w * 5 + k.stride_w);
    const std::vector<float> x = uniform(static_cast<std::int64_t>(in), -2.0F, 3.0F, seed);
    const std::vector<float> dy = uniform(static_cast<std::int64_t>(out), -1.0F, 1.0F, seed + 1);

    std::vector<float> want_y(out), cpu_dx(in);
    cpu().avg_pool2d_forward(s, x.data(), want_y.data());
    cpu().avg_pool2d_backward(s, dy.data(), cpu_dx.data());
    // Backward fuses dy * (1 / area) into the sum, as the CPU's AVX2 /
    // AVX-512 clones do and its baseline clone does not: bits against the
    // CPU's scatter order with fma, an ulp a term against the CPU.
    const std::vector<float> want_dx = avg_backward_fused(s, dy);
    EXPECT_TRUE(close(want_dx, cpu_dx, 1e-6F, 1e-6F));

    for (const std::uint64_t emu_seed : kSeeds) {
      std::vector<float> y(out, 7.0F), dx(in, 7.0F);
      run(AvgPool2dForward{geo, x.data(), y.data()}, emu_seed);
      run(AvgPool2dBackward{geo, dy.data(), dx.data()}, emu_seed);
      EXPECT_TRUE(bit_equal(y, want_y));
      EXPECT_TRUE(bit_equal(dx, want_dx));
    }
  }
}

TEST(KernelPool, GlobalAvgPoolMatchesCpuBits) {
  struct Dims {
    std::int64_t planes, size;
  };
  // Sizes below, at and past multiples of 16; odd plane counts leave the
  // last warp's second half idle.
  for (const Dims d : {Dims{1, 1}, Dims{3, 15}, Dims{5, 16}, Dims{7, 49}, Dims{2, 17},
                       Dims{4, 1000}, Dims{33, 64}, Dims{130, 9}}) {
    SCOPED_TRACE(::testing::Message() << d.planes << " planes of " << d.size);
    const auto n = static_cast<std::size_t>(d.planes * d.size);
    const auto seed = static_cast<std::uint32_t>(d.planes * 31 + d.size);
    const std::vector<float> x = uniform(d.planes * d.size, -1.0F, 4.0F, seed);
    const std::vector<float> dy = uniform(d.planes, -1.0F, 1.0F, seed + 1);
    std::vector<float> want_y(static_cast<std::size_t>(d.planes)), want_dx(n);
    cpu().global_avg_pool_forward(d.planes, d.size, 1, x.data(), want_y.data());
    cpu().global_avg_pool_backward(d.planes, d.size, 1, dy.data(), want_dx.data());
    for (const std::uint64_t emu_seed : kSeeds) {
      std::vector<float> y(static_cast<std::size_t>(d.planes), 7.0F), dx(n, 7.0F);
      run(GlobalAvgPoolForward{x.data(), y.data(), d.planes, d.size}, emu_seed);
      run(GlobalAvgPoolBackward{dy.data(), dx.data(), d.planes, d.size}, emu_seed);
      EXPECT_TRUE(bit_equal(y, want_y));
      EXPECT_TRUE(bit_equal(dx, want_dx));
    }
  }
}

// More outputs than one grid-stride pass: the loop continues past the grid.
TEST(KernelPool, GridStrideCoversEveryElement) {
  const backend::Pool2dShape s = shape_of(Case{3, 7, 9, 3, 3, 2, 2, 1, 1});
  const PoolGeometry geo = geometry_of(s);
  const auto in = static_cast<std::size_t>(s.planes * s.h * s.w);
  const auto out = static_cast<std::size_t>(s.planes * s.out_h * s.out_w);
  const std::vector<float> x = uniform(static_cast<std::int64_t>(in), -1.0F, 1.0F, 5);
  std::vector<float> want(out), got(out, 7.0F);
  cpu().avg_pool2d_forward(s, x.data(), want.data());
  simt::emulate(simt::LaunchShape{{1, 1, 1}, {32, 1, 1}, 0},
                AvgPool2dForward{geo, x.data(), got.data()}, simt::EmulatorOptions{.seed = 2});
  EXPECT_TRUE(bit_equal(got, want));

  // Global pooling: one warp, two planes a pass, an odd count of planes.
  const std::int64_t planes = 7, size = 37;
  const std::vector<float> g = uniform(planes * size, -1.0F, 1.0F, 6);
  std::vector<float> want_mean(planes), got_mean(planes, 7.0F);
  cpu().global_avg_pool_forward(planes, size, 1, g.data(), want_mean.data());
  simt::emulate(simt::LaunchShape{{1, 1, 1}, {32, 1, 1}, 0},
                GlobalAvgPoolForward{g.data(), got_mean.data(), planes, size},
                simt::EmulatorOptions{.seed = 3});
  EXPECT_TRUE(bit_equal(got_mean, want_mean));
}

// ---- Channels last (NHWC) ------------------------------------------------------------

// [n, c, pixels] (NCHW planes) -> [n, pixels, c] (NHWC).
template <class T>
std::vector<T> to_nhwc(const std::vector<T>& v, std::int64_t n, std::int64_t c) {
  const std::int64_t pixels = static_cast<std::int64_t>(v.size()) / (n * c);
  std::vector<T> out(v.size());
  for (std::int64_t i = 0; i < n; ++i) {
    for (std::int64_t k = 0; k < c; ++k) {
      for (std::int64_t q = 0; q < pixels; ++q) {
        out[static_cast<std::size_t>((i * pixels + q) * c + k)] =
            v[static_cast<std::size_t>((i * c + k) * pixels + q)];
      }
    }
  }
  return out;
}

std::vector<std::uint16_t> bf16_bits(const std::vector<float>& v) {
  std::vector<std::uint16_t> out(v.size());
  for (std::size_t i = 0; i < v.size(); ++i) out[i] = float_to_bfloat16_bits(v[i]);
  return out;
}

// v rounded to bf16 (its values, in f32).
std::vector<float> bf16_values(const std::vector<float>& v) {
  std::vector<float> out(v.size());
  for (std::size_t i = 0; i < v.size(); ++i) {
    out[i] = bfloat16_bits_to_float(float_to_bfloat16_bits(v[i]));
  }
  return out;
}

// Case k with k.planes images of `channels` channels each, channels last.
backend::Pool2dShape nhwc_shape_of(const Case& k, std::int64_t channels) {
  backend::Pool2dShape s = shape_of(k);
  s.planes = k.planes * channels;
  s.channels_last = true;
  s.channels = channels;
  return s;
}

// The same planes as one NCHW batch.
backend::Pool2dShape nchw_shape_of(const Case& k, std::int64_t channels) {
  backend::Pool2dShape s = shape_of(k);
  s.planes = k.planes * channels;
  return s;
}

// Channel counts: one channel, fewer than a warp, more than a warp and more
// than the CPU's 64-channel blocks, none a multiple of 32; 72 is one of 8,
// which max pooling takes in packs (aligned vectors: packed() is true).
constexpr std::int64_t kChannels[] = {5, 37, 72, 1};

// Each case with two channel counts (every count meets four cases).
template <class F>
void for_each_nhwc_case(F f) {
  for (std::size_t i = 0; i < std::size(kCases); ++i) {
    for (const std::size_t j : {i % 4, (i + 1) % 4}) {
      const Case& k = kCases[i];
      SCOPED_TRACE(::testing::Message() << describe(k) << ", " << kChannels[j] << " channels last");
      f(k, kChannels[j]);
    }
  }
}

// The CPU's NHWC results are its NCHW results transposed, bit for bit; the
// kernels give those bits on f32 and on bf16 storage (y exactly its input's,
// dx summed in f32 and rounded once).
TEST(KernelPool, ChannelsLastMaxPoolMatchesCpuAndNchwBits) {
  for_each_nhwc_case([](const Case& k, std::int64_t c) {
    const backend::Pool2dShape s = nhwc_shape_of(k, c), s_nchw = nchw_shape_of(k, c);
    const PoolGeometry geo = geometry_of(s);
    const auto in = static_cast<std::size_t>(s.planes * s.h * s.w);
    const auto out = static_cast<std::size_t>(s.planes * s.out_h * s.out_w);
    const auto seed = static_cast<std::uint32_t>(k.h * 131 + k.w * 7 + k.kernel_h + c);
    // Integers, -inf and NaN: exact in bf16, so one input serves both types.
    const std::vector<float> x = max_pool_input(static_cast<std::int64_t>(in), seed);
    const std::vector<float> dy =
        bf16_values(uniform(static_cast<std::int64_t>(out), -1.0F, 1.0F, seed + 1));

    std::vector<float> nchw_y(out), nchw_dx(in);
    std::vector<std::int32_t> nchw_index(out);
    cpu().max_pool2d_forward(s_nchw, x.data(), nchw_y.data(), nchw_index.data());
    cpu().max_pool2d_backward(s_nchw, nchw_index.data(), dy.data(), nchw_dx.data());

    const std::vector<float> xt = to_nhwc(x, k.planes, c), dyt = to_nhwc(dy, k.planes, c);
    std::vector<float> want_y(out, 7.0F), want_dx(in, 7.0F);
    std::vector<std::int32_t> want_index(out, -7);
    cpu().max_pool2d_forward(s, xt.data(), want_y.data(), want_index.data());
    cpu().max_pool2d_backward(s, want_index.data(), dyt.data(), want_dx.data());
    EXPECT_TRUE(bit_equal(want_y, to_nhwc(nchw_y, k.planes, c))) << "cpu y";
    EXPECT_TRUE(bit_equal(want_index, to_nhwc(nchw_index, k.planes, c))) << "cpu index";
    EXPECT_TRUE(bit_equal(want_dx, to_nhwc(nchw_dx, k.planes, c))) << "cpu dx";
    std::vector<float> y_only(out, 7.0F);
    cpu().max_pool2d_forward(s, xt.data(), y_only.data(), nullptr);
    EXPECT_TRUE(bit_equal(y_only, want_y)) << "cpu y without index";

    for (const std::uint64_t emu_seed : kSeeds) {
      std::vector<float> y(out, 7.0F), dx(in, 7.0F), y_alone(out, 7.0F);
      std::vector<std::int32_t> index(out, -7);
      const MaxPool2dForward forward{geo, xt.data(), y.data(), index.data()};
      const MaxPool2dBackward backward{geo, want_index.data(), dyt.data(), dx.data()};
      EXPECT_EQ(forward.packed(), c % kPack == 0);
      EXPECT_EQ(backward.packed(), c % kPack == 0);
      run(forward, emu_seed);
      run(MaxPool2dForward{geo, xt.data(), y_alone.data(), nullptr}, emu_seed);
      run(backward, emu_seed);
      EXPECT_TRUE(bit_equal(y, want_y)) << "f32 y";
      EXPECT_TRUE(bit_equal(y_alone, want_y)) << "f32 y without index";
      EXPECT_TRUE(bit_equal(index, want_index)) << "f32 index";
      EXPECT_TRUE(bit_equal(dx, want_dx)) << "f32 dx";
    }

    const std::vector<std::uint16_t> x16 = bf16_bits(xt), dy16 = bf16_bits(dyt);
    std::vector<std::uint16_t> y16(out, 7), dx16(in, 7);
    std::vector<std::int32_t> index16(out, -7);
    MaxPool2dForward forward{geo, reinterpret_cast<const float*>(x16.data()),
                             reinterpret_cast<float*>(y16.data()), index16.data()};
    forward.type = ElementType::bf16;
    run(forward);
    MaxPool2dBackward backward{geo, index16.data(), reinterpret_cast<const float*>(dy16.data()),
                               reinterpret_cast<float*>(dx16.data())};
    backward.type = ElementType::bf16;
    run(backward);
    EXPECT_TRUE(bit_equal(y16, bf16_bits(want_y))) << "bf16 y";
    EXPECT_TRUE(bit_equal(index16, want_index)) << "bf16 index";
    EXPECT_TRUE(bit_equal(dx16, bf16_bits(want_dx))) << "bf16 dx";
  });
}

TEST(KernelPool, ChannelsLastAvgPoolMatchesCpuAndNchwBits) {
  for_each_nhwc_case([](const Case& k, std::int64_t c) {
    const backend::Pool2dShape s = nhwc_shape_of(k, c), s_nchw = nchw_shape_of(k, c);
    const PoolGeometry geo = geometry_of(s);
    const auto in = static_cast<std::size_t>(s.planes * s.h * s.w);
    const auto out = static_cast<std::size_t>(s.planes * s.out_h * s.out_w);
    const auto seed = static_cast<std::uint32_t>(k.h * 17 + k.w * 5 + k.stride_w + c);
    const std::vector<float> x = uniform(static_cast<std::int64_t>(in), -2.0F, 3.0F, seed);
    const std::vector<float> dy = uniform(static_cast<std::int64_t>(out), -1.0F, 1.0F, seed + 1);

    std::vector<float> nchw_y(out), nchw_dx(in);
    cpu().avg_pool2d_forward(s_nchw, x.data(), nchw_y.data());
    cpu().avg_pool2d_backward(s_nchw, dy.data(), nchw_dx.data());

    const std::vector<float> xt = to_nhwc(x, k.planes, c), dyt = to_nhwc(dy, k.planes, c);
    std::vector<float> want_y(out, 7.0F), cpu_dx(in, 7.0F);
    cpu().avg_pool2d_forward(s, xt.data(), want_y.data());
    cpu().avg_pool2d_backward(s, dyt.data(), cpu_dx.data());
    EXPECT_TRUE(bit_equal(want_y, to_nhwc(nchw_y, k.planes, c))) << "cpu y";
    EXPECT_TRUE(bit_equal(cpu_dx, to_nhwc(nchw_dx, k.planes, c))) << "cpu dx";
    // The kernel fuses dy * (1 / area) into its sum (see
    // AvgPool2dForwardAndBackwardMatchCpu): bits against the fused NCHW order.
    const std::vector<float> want_dx = to_nhwc(avg_backward_fused(s_nchw, dy), k.planes, c);

    for (const std::uint64_t emu_seed : kSeeds) {
      std::vector<float> y(out, 7.0F), dx(in, 7.0F);
      run(AvgPool2dForward{geo, xt.data(), y.data()}, emu_seed);
      run(AvgPool2dBackward{geo, dyt.data(), dx.data()}, emu_seed);
      EXPECT_TRUE(bit_equal(y, want_y)) << "y";
      EXPECT_TRUE(bit_equal(dx, want_dx)) << "dx";
    }
  });
}

TEST(KernelPool, ChannelsLastGlobalAvgPoolMatchesCpuAndNchwBits) {
  struct Dims {
    std::int64_t images, channels, size;
  };
  // Sizes below, at and past multiples of 16; channel counts below and past a
  // warp and the CPU's 64-channel blocks.
  for (const Dims d : {Dims{1, 1, 1}, Dims{2, 5, 15}, Dims{3, 37, 16}, Dims{2, 70, 49},
                       Dims{1, 33, 17}, Dims{4, 64, 7}, Dims{2, 3, 1000}, Dims{5, 130, 9}}) {
    SCOPED_TRACE(::testing::Message() << d.images << " images of " << d.size << " pixels, "
                                      << d.channels << " channels");
    const std::int64_t planes = d.images * d.channels;
    const auto n = static_cast<std::size_t>(planes * d.size);
    const auto seed = static_cast<std::uint32_t>(planes * 31 + d.size);
    const std::vector<float> x = bf16_values(uniform(planes * d.size, -1.0F, 4.0F, seed));
    const std::vector<float> dy = bf16_values(uniform(planes, -1.0F, 1.0F, seed + 1));
    std::vector<float> nchw_y(static_cast<std::size_t>(planes)), nchw_dx(n);
    cpu().global_avg_pool_forward(planes, d.size, 1, x.data(), nchw_y.data());
    cpu().global_avg_pool_backward(planes, d.size, 1, dy.data(), nchw_dx.data());

    const std::vector<float> xt = to_nhwc(x, d.images, d.channels);
    std::vector<float> want_y(static_cast<std::size_t>(planes), 7.0F), want_dx(n, 7.0F);
    cpu().global_avg_pool_forward(planes, d.size, d.channels, xt.data(), want_y.data());
    cpu().global_avg_pool_backward(planes, d.size, d.channels, dy.data(), want_dx.data());
    EXPECT_TRUE(bit_equal(want_y, nchw_y)) << "cpu y";
    EXPECT_TRUE(bit_equal(want_dx, to_nhwc(nchw_dx, d.images, d.channels))) << "cpu dx";

    for (const std::uint64_t emu_seed : kSeeds) {
      std::vector<float> y(static_cast<std::size_t>(planes), 7.0F), dx(n, 7.0F);
      run(GlobalAvgPoolForward{xt.data(), y.data(), planes, d.size, ElementType::f32, d.channels},
          emu_seed);
      run(GlobalAvgPoolBackward{dy.data(), dx.data(), planes, d.size, ElementType::f32, d.channels},
          emu_seed);
      EXPECT_TRUE(bit_equal(y, want_y)) << "f32 y";
      EXPECT_TRUE(bit_equal(dx, want_dx)) << "f32 dx";
    }

    const std::vector<std::uint16_t> x16 = bf16_bits(xt), dy16 = bf16_bits(dy);
    std::vector<std::uint16_t> y16(static_cast<std::size_t>(planes), 7), dx16(n, 7);
    run(GlobalAvgPoolForward{reinterpret_cast<const float*>(x16.data()),
                             reinterpret_cast<float*>(y16.data()), planes, d.size,
                             ElementType::bf16, d.channels});
    run(GlobalAvgPoolBackward{reinterpret_cast<const float*>(dy16.data()),
                              reinterpret_cast<float*>(dx16.data()), planes, d.size,
                              ElementType::bf16, d.channels});
    EXPECT_TRUE(bit_equal(y16, bf16_bits(want_y))) << "bf16 y";
    EXPECT_TRUE(bit_equal(dx16, bf16_bits(want_dx))) << "bf16 dx";
  }
}

// Channels last past one grid-stride pass: one warp for every element.
TEST(KernelPool, ChannelsLastGridStrideCoversEveryElement) {
  const Case k{2, 7, 9, 3, 3, 2, 2, 1, 1};
  const backend::Pool2dShape s = nhwc_shape_of(k, 37);
  const PoolGeometry geo = geometry_of(s);
  const auto in = static_cast<std::size_t>(s.planes * s.h * s.w);
  const auto out = static_cast<std::size_t>(s.planes * s.out_h * s.out_w);
  const std::vector<float> x = uniform(static_cast<std::int64_t>(in), -1.0F, 1.0F, 7);
  const simt::LaunchShape warp{{1, 1, 1}, {32, 1, 1}, 0};
  std::vector<float> want(out), got(out, 7.0F);
  std::vector<std::int32_t> want_index(out), got_index(out, -7);
  cpu().max_pool2d_forward(s, x.data(), want.data(), want_index.data());
  simt::emulate(warp, MaxPool2dForward{geo, x.data(), got.data(), got_index.data()},
                simt::EmulatorOptions{.seed = 2});
  EXPECT_TRUE(bit_equal(got, want));
  EXPECT_TRUE(bit_equal(got_index, want_index));

  const std::int64_t images = 3, channels = 45, size = 37, planes = images * channels;
  const std::vector<float> g = uniform(planes * size, -1.0F, 1.0F, 8);
  std::vector<float> want_mean(planes), got_mean(planes, 7.0F);
  cpu().global_avg_pool_forward(planes, size, channels, g.data(), want_mean.data());
  simt::emulate(
      warp,
      GlobalAvgPoolForward{g.data(), got_mean.data(), planes, size, ElementType::f32, channels},
      simt::EmulatorOptions{.seed = 3});
  EXPECT_TRUE(bit_equal(got_mean, want_mean));
}

}  // namespace
}  // namespace rig::kernels::test
