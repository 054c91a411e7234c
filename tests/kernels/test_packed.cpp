// Packed access (cuda/kernels/packed.hpp): the packs round-trip as the
// per-element loads and stores do, and every kernel with a packed path gives
// the bits of its per-element path. Each kernel runs twice on the same
// values: once from 16-byte aligned buffers (the packed path), once from
// buffers one element past that (the per-element path, which the CPU
// comparisons of the kernels' own tests pin down).
#include "cuda/kernels/packed.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>

#include "cuda/kernels/batch_norm.hpp"
#include "cuda/kernels/checks.hpp"
#include "cuda/kernels/cross_entropy.hpp"
#include "cuda/kernels/dropout.hpp"
#include "cuda/kernels/elementwise.hpp"
#include "cuda/kernels/layer_norm.hpp"
#include "cuda/kernels/optimizer.hpp"
#include "cuda/kernels/pool.hpp"
#include "cuda/kernels/unscale.hpp"
#include "kernel_test_util.hpp"
#include "rig/half.hpp"

namespace rig::kernels::test {
namespace {

constexpr ElementType kTypes[] = {ElementType::f32, ElementType::f16, ElementType::bf16};

const char* name(ElementType type) {
  return type == ElementType::f32 ? "f32" : type == ElementType::f16 ? "f16" : "bf16";
}

// n elements of `type` holding `values` (rounded), 64-byte aligned or, when
// `shifted`, one element past that.
class Buffer {
 public:
  Buffer(const std::vector<float>& values, ElementType type, bool shifted)
      : type_(type), n_(values.size()), bytes_(n_ * element_size() + 128) {
    const auto base = reinterpret_cast<std::uintptr_t>(bytes_.data());
    start_ = static_cast<std::size_t>((64 - base % 64) % 64) + (shifted ? element_size() : 0);
    for (std::size_t i = 0; i < n_; ++i)
      store_element(data(), type, static_cast<std::int64_t>(i), values[i]);
  }
  void* data() { return bytes_.data() + start_; }
  float* floats() { return static_cast<float*>(data()); }  // the kernels' float* fields
  std::vector<std::uint8_t> contents() const {
    return {bytes_.begin() + static_cast<std::ptrdiff_t>(start_),
            bytes_.begin() + static_cast<std::ptrdiff_t>(start_ + n_ * element_size())};
  }

 private:
  std::size_t element_size() const { return type_ == ElementType::f32 ? 4 : 2; }
  ElementType type_;
  std::size_t n_;
  std::vector<std::uint8_t> bytes_;
  std::size_t start_ = 0;
};

template <int N>
void expect_round_trip(ElementType type) {
  SCOPED_TRACE(::testing::Message() << name(type) << " packs of " << N);
  std::vector<float> values = uniform(3 * N, -3.0F, 3.0F, 5);
  values[1] = -0.0F;
  values[2] = 1.0F + 1.0F / 512.0F;  // a tie for bf16: rounded to even
  Buffer in(values, type, false), out(std::vector<float>(3 * N, 0.0F), type, false);
  for (std::int64_t k = 0; k < 3; ++k) {
    const Pack<N> p = load_pack<N>(in.data(), type, k);
    for (int e = 0; e < N; ++e) {
      EXPECT_EQ(math::float_bits(p.v[e]),
                math::float_bits(load_element(in.data(), type, k * N + e)));
    }
    Pack<N> q = p;
    for (float& v : q.v) v *= 1.001F;  // not representable: rounded at the store
    store_pack<N>(out.data(), type, k, q);
    for (int e = 0; e < N; ++e) {
      std::vector<std::uint8_t> one(4);
      store_element(one.data(), type, 0, q.v[e]);
      const std::vector<std::uint8_t> got = out.contents();
      const std::size_t size = type == ElementType::f32 ? 4 : 2;
      EXPECT_EQ(0, std::memcmp(got.data() + (k * N + e) * size, one.data(), size))
          << "element " << k * N + e;
    }
  }
}

TEST(KernelPacked, PacksRoundTripAsElementsDo) {
  for (const ElementType type : kTypes) {
    expect_round_trip<4>(type);
    expect_round_trip<8>(type);
  }
  // Alignment is of the pack's bytes: 8 bf16 need 16, 4 bf16 need 8.
  alignas(16) std::uint16_t a[16] = {};
  EXPECT_TRUE(pack_aligned<8>(a, ElementType::bf16));
  EXPECT_FALSE(pack_aligned<8>(a + 4, ElementType::bf16));
  EXPECT_TRUE(pack_aligned<4>(a + 4, ElementType::bf16));
  EXPECT_FALSE(pack_aligned<4>(a + 1, ElementType::bf16));
  EXPECT_TRUE(pack_aligned<8>(nullptr, ElementType::f32));
  // 8 f32 are two 16-byte words: 16-byte aligned is enough.
  alignas(16) float f[12] = {};
  EXPECT_TRUE(pack_aligned<8>(f + 4, ElementType::f32));
  EXPECT_FALSE(pack_aligned<8>(f + 2, ElementType::f32));
}

constexpr backend::BatchNormShape kPackedShapes[] = {{37, 24, 1}, {3, 5, 16}, {2, 64, 1}};

TEST(KernelPacked, BatchNormApplyPacksAsItsElements) {
  for (const backend::BatchNormShape& s : kPackedShapes) {
    for (const ElementType type : kTypes) {
      for (const bool residual_relu : {false, true}) {
        SCOPED_TRACE(::testing::Message() << "[" << s.n << ", " << s.c << ", " << s.inner << "] "
                                          << name(type) << " residual+relu " << residual_relu);
        const std::int64_t n = s.n * s.c * s.inner;
        const std::vector<float> x = uniform(n, -2.0F, 2.0F, 1);
        const std::vector<float> r = uniform(n, -1.0F, 1.0F, 2);
        const std::vector<float> scale = uniform(s.c, 0.5F, 2.0F, 3);
        const std::vector<float> shift = uniform(s.c, -1.0F, 1.0F, 4);
        std::vector<std::vector<std::uint8_t>> outputs;
        for (const bool shifted : {false, true}) {
          Buffer xb(x, type, shifted), rb(r, type, shifted);
          Buffer yb(std::vector<float>(static_cast<std::size_t>(n), 7.0F), type, shifted);
          BatchNormApply k{xb.floats(), scale.data(), shift.data(), yb.floats(),
                           s.n,         s.c,          s.inner,      type};
          if (residual_relu) {
            k.relu = true;
            k.residual = rb.floats();
          }
          EXPECT_EQ(k.packed(), !shifted);
          run(k);
          outputs.push_back(yb.contents());
        }
        EXPECT_TRUE(bit_equal(outputs[0], outputs[1]));
      }
    }
  }
}

TEST(KernelPacked, BatchNormBackwardDxPacksAsItsElements) {
  enum class Relu { none, from_y, from_x };
  for (const backend::BatchNormShape& s : kPackedShapes) {
    for (const ElementType type : kTypes) {
      for (const Relu relu : {Relu::none, Relu::from_y, Relu::from_x}) {
        SCOPED_TRACE(::testing::Message() << "[" << s.n << ", " << s.c << ", " << s.inner << "] "
                                          << name(type) << " relu " << static_cast<int>(relu));
        const std::int64_t n = s.n * s.c * s.inner;
        const std::vector<float> x = uniform(n, -2.0F, 2.0F, 11);
        const std::vector<float> dy = uniform(n, -1.0F, 1.0F, 12);
        const std::vector<float> y = uniform(n, -1.0F, 1.0F, 13);
        const std::vector<float> coef = uniform(3 * s.c, -1.0F, 1.0F, 14);
        const std::vector<float> scale = uniform(s.c, 0.5F, 2.0F, 15);
        const std::vector<float> shift = uniform(s.c, -1.0F, 1.0F, 16);
        std::vector<std::vector<std::uint8_t>> outputs;
        for (const bool shifted : {false, true}) {
          Buffer xb(x, type, shifted), gb(dy, type, shifted), yb(y, type, shifted);
          Buffer dxb(std::vector<float>(static_cast<std::size_t>(n), 7.0F), type, shifted);
          BatchNormBackwardDx k{xb.floats(), gb.floats(), coef.data(), dxb.floats(),
                                s.n,         s.c,         s.inner,     type};
          if (relu == Relu::from_y) k.relu.y = yb.floats();
          if (relu == Relu::from_x) k.relu = {nullptr, scale.data(), shift.data()};
          EXPECT_EQ(k.packed(), !shifted);
          run(k);
          outputs.push_back(dxb.contents());
        }
        EXPECT_TRUE(bit_equal(outputs[0], outputs[1]));
      }
    }
  }
}

// The channels-last partial reductions: packs of 8 channels a thread sum in
// another order than one channel a thread (more row lanes), so the partial
// sums agree within rounding; relu's masked dy, stored exactly, agrees bit
// for bit. Shapes: c below a tile (32 channels), at it, above it and not a
// multiple of it, with a partial last chunk of rows.
TEST(KernelPacked, BatchNormPartialsPackChannels) {
  constexpr backend::BatchNormShape kShapes[] = {
      {300, 8, 1}, {4096 + 77, 32, 1}, {1000, 200, 1}, {50, 64, 1}};
  for (const backend::BatchNormShape& s : kShapes) {
    for (const ElementType type : {ElementType::f32, ElementType::bf16}) {
      SCOPED_TRACE(::testing::Message() << "[" << s.n << ", " << s.c << ", 1] " << name(type));
      const std::int64_t n = s.n * s.c;
      const std::int64_t parts = s.c * batch_norm_chunks(s.n, 1);
      const std::vector<float> x = uniform(n, 1.0F, 4.0F, 61);
      const std::vector<float> dy = uniform(n, -1.0F, 1.0F, 62);
      const std::vector<float> y = uniform(n, -1.0F, 1.0F, 63);
      const std::vector<float> mean = uniform(s.c, 2.0F, 3.0F, 64);
      std::vector<std::vector<float>> sums;
      std::vector<std::vector<std::uint8_t>> masked;
      for (const bool shifted : {false, true}) {
        Buffer xb(x, type, shifted), gb(dy, type, shifted), yb(y, type, shifted);
        Buffer mb(std::vector<float>(x.size(), 7.0F), type, shifted);
        std::vector<float> out(static_cast<std::size_t>(4 * parts), -7.0F);
        BatchNormStatsPartial st{xb.floats(), s.n, s.c, 1, out.data(), out.data() + parts, type};
        BatchNormGradPartial gr{xb.floats(),
                                gb.floats(),
                                mean.data(),
                                s.n,
                                s.c,
                                1,
                                out.data() + 2 * parts,
                                out.data() + 3 * parts,
                                type};
        gr.relu.y = yb.floats();
        gr.masked_dy = mb.floats();
        EXPECT_EQ(st.packed(), !shifted);
        EXPECT_EQ(gr.packed(), !shifted);
        launch_partial(st, [](const auto& k) { run(k); });
        launch_partial(gr, [](const auto& k) { run(k); });
        sums.push_back(out);
        masked.push_back(mb.contents());
      }
      // Means within 1e-6 relative, m2s within 1e-5 relative; the sums of
      // dy and dy (x - mean), terms of at most 2 in magnitude, within 4e-7
      // per row of the chunk (both orders' rounding).
      const std::int64_t chunks = batch_norm_chunks(s.n, 1);
      for (std::int64_t i = 0; i < 4 * parts; ++i) {
        const auto at = static_cast<std::size_t>(i);
        const float a = sums[0][at], b = sums[1][at];
        const std::int64_t chunk = i % parts % chunks;
        const auto rows = static_cast<float>(
            std::min<std::int64_t>(kBatchNormChunk, s.n - chunk * kBatchNormChunk));
        const float tol = i < parts       ? 1e-6F * std::fabs(b)
                          : i < 2 * parts ? 1e-5F * std::fabs(b)
                                          : 4e-7F * rows;
        EXPECT_NEAR(a, b, tol) << "partial " << i;
      }
      EXPECT_TRUE(bit_equal(masked[0], masked[1]));
    }
  }
}

// Layer norm's rows (a warp per row, lanes over chunks of 8) and parameter
// gradients (a thread per row block and 8 columns): the same bits from packs.
TEST(KernelPacked, LayerNormPacksAsItsElements) {
  const std::int64_t rows = 70, d = 48;  // two row blocks of the gradients
  const std::vector<float> x = uniform(rows * d, 2.0F, 6.0F, 71);
  const std::vector<float> g = uniform(rows * d, -1.0F, 1.0F, 72);
  const std::vector<float> gamma = uniform(d, 0.5F, 1.5F, 73);
  const std::vector<float> beta = uniform(d, -0.5F, 0.5F, 74);
  const std::vector<float> old = uniform(rows * d, -1.0F, 1.0F, 75);
  for (const ElementType type : kTypes) {
    SCOPED_TRACE(name(type));
    std::vector<std::vector<std::uint8_t>> ys, dxs;
    std::vector<std::vector<float>> stats;
    for (const bool shifted : {false, true}) {
      Buffer xb(x, type, shifted), gb(g, type, shifted), dxb(old, type, shifted);
      Buffer wb(gamma, type, shifted), bb(beta, type, shifted);
      Buffer yb(std::vector<float>(x.size(), 7.0F), type, shifted);
      std::vector<float> mean(static_cast<std::size_t>(rows)), rstd(mean.size());
      const LayerNormForward f{xb.floats(), wb.floats(), bb.floats(), yb.floats(),
                               mean.data(), rstd.data(), rows,        d,
                               1e-5F,       type,        type};
      EXPECT_EQ(f.packed(), !shifted);
      run(f);
      LayerNormBackwardDx b{xb.floats(),  wb.floats(), mean.data(), rstd.data(), gb.floats(),
                            dxb.floats(), rows,        d,           type,        type};
      b.accumulate = true;
      EXPECT_EQ(b.packed(), !shifted);
      run(b);
      Buffer partial(
          std::vector<float>(static_cast<std::size_t>(2 * layer_norm_row_blocks(rows) * d), -1.0F),
          ElementType::f32, shifted);
      const LayerNormBackwardParams p{xb.floats(),
                                      mean.data(),
                                      rstd.data(),
                                      gb.floats(),
                                      partial.floats(),
                                      partial.floats() + layer_norm_row_blocks(rows) * d,
                                      rows,
                                      d,
                                      type};
      EXPECT_EQ(p.packed(), !shifted);
      run(p);
      ys.push_back(yb.contents());
      dxs.push_back(dxb.contents());
      std::vector<float> both = mean;
      both.insert(both.end(), rstd.begin(), rstd.end());
      const std::vector<std::uint8_t> bytes = partial.contents();
      std::vector<float> sums(bytes.size() / 4);
      std::memcpy(sums.data(), bytes.data(), bytes.size());
      both.insert(both.end(), sums.begin(), sums.end());
      stats.push_back(both);
    }
    EXPECT_TRUE(bit_equal(ys[0], ys[1]));
    EXPECT_TRUE(bit_equal(dxs[0], dxs[1]));
    EXPECT_TRUE(bit_equal(stats[0], stats[1]));
  }
}

TEST(KernelPacked, CrossEntropyPacksAsItsElements) {
  const std::int64_t rows = 3, c = 1000;
  const std::vector<float> x = uniform(rows * c, -4.0F, 4.0F, 81);
  const std::vector<std::int64_t> labels = {5, 999, 0};
  for (const ElementType type : kTypes) {
    SCOPED_TRACE(name(type));
    std::vector<std::vector<float>> losses;
    std::vector<std::vector<std::uint8_t>> dxs;
    for (const bool shifted : {false, true}) {
      Buffer xb(x, type, shifted);
      Buffer dxb(std::vector<float>(x.size(), 7.0F), type, shifted);
      std::vector<float> loss(static_cast<std::size_t>(rows)), lse(loss.size());
      const CrossEntropyForward f{xb.floats(), labels.data(),         loss.data(), lse.data(), rows,
                                  c,           {0.9F, 0.1F / 999.0F}, type};
      EXPECT_EQ(f.packed(), !shifted);
      run(f);
      CrossEntropyBackward b;
      b.x = xb.floats();
      b.labels = labels.data();
      b.lse = lse.data();
      b.scale = 0.25F;
      b.dx = dxb.floats();
      b.rows = rows;
      b.c = c;
      b.targets = {0.9F, 0.1F / 999.0F};
      b.type = type;
      EXPECT_EQ(b.packed(), !shifted);
      run(b);
      loss.insert(loss.end(), lse.begin(), lse.end());
      losses.push_back(loss);
      dxs.push_back(dxb.contents());
    }
    EXPECT_TRUE(bit_equal(losses[0], losses[1]));
    EXPECT_TRUE(bit_equal(dxs[0], dxs[1]));
  }
}

// The unscale's and the gradient statistics' partial reductions take the same
// chunks of 8 from packs and from elements: the same bits, n % 8 != 0 too.
TEST(KernelPacked, GradientReductionsPackAsTheirElements) {
  const std::int64_t n = 5003;
  std::vector<float> values = uniform(n, -3.0F, 3.0F, 91);
  values[4999] = 80.0F;  // the largest, in the partial last chunk
  for (const ElementType type : kTypes) {
    SCOPED_TRACE(name(type));
    std::vector<std::vector<std::uint8_t>> masters;
    std::vector<std::vector<double>> sums;
    std::vector<std::vector<std::uint32_t>> maxima;
    for (const bool shifted : {false, true}) {
      Buffer src(values, type, shifted);
      Buffer master(std::vector<float>(values.size(), 7.0F), ElementType::f32, shifted);
      UnscalePartials u{n, type, src.data(), master.floats(), 0.5F};
      EXPECT_EQ(u.packed(), !shifted);
      const auto blocks = static_cast<std::size_t>(u.plan(h100()).grid.x);
      std::vector<std::uint32_t> bits(blocks);
      std::vector<double> squares(blocks);
      u.partial_amax_bits = bits.data();
      u.partial_sum_squares = squares.data();
      run(u);
      const auto chunks = static_cast<std::size_t>(check_chunks(n));
      std::vector<double> grad_squares(chunks);
      std::vector<std::uint32_t> grad_bits(chunks);
      run(GradStatsPartials{master.floats(), n, grad_squares.data(), grad_bits.data()});
      masters.push_back(master.contents());
      squares.insert(squares.end(), grad_squares.begin(), grad_squares.end());
      bits.insert(bits.end(), grad_bits.begin(), grad_bits.end());
      sums.push_back(squares);
      maxima.push_back(bits);
    }
    EXPECT_TRUE(bit_equal(masters[0], masters[1]));
    EXPECT_TRUE(bit_equal(sums[0], sums[1]));
    EXPECT_TRUE(bit_equal(maxima[0], maxima[1]));
  }
}

// Binary ops over [5, 24]: both inputs contiguous, or one broadcast along
// the last axis ([5, 1], stride 0 there): packs of a row's 8 elements.
TEST(KernelPacked, BinaryPacksAsItsElements) {
  const std::int64_t rows = 5, cols = 24;
  const std::vector<float> a = uniform(rows * cols, -2.0F, 2.0F, 97);
  const std::vector<float> b = uniform(rows * cols, -2.0F, 2.0F, 98);
  for (const ElementType type : kTypes) {
    for (const bool broadcast : {false, true}) {
      for (const bool b_first : {false, true}) {  // the broadcast operand as a, or as b
        SCOPED_TRACE(::testing::Message()
                     << name(type) << " broadcast " << broadcast << " first " << b_first);
        std::vector<std::vector<std::uint8_t>> outputs;
        for (const bool shifted : {false, true}) {
          Buffer ab(a, type, shifted), bb(b, type, shifted);
          Buffer ob(std::vector<float>(a.size(), 7.0F), type, shifted);
          BinaryKernel k;
          k.op = BinaryOp::mul;
          k.ndim = 2;
          k.shape[0] = rows;
          k.shape[1] = cols;
          k.type = type;
          k.relu = true;
          k.out = ob.floats();
          const std::int64_t row_stride[3] = {cols, cols, broadcast ? 1 : cols};
          const std::int64_t last_stride[3] = {1, 1, broadcast ? 0 : 1};
          for (int o = 0; o < 3; ++o) {
            const int at = (b_first && o > 0) ? 3 - o : o;  // swap a's and b's strides
            k.strides[at][0] = row_stride[o];
            k.strides[at][1] = last_stride[o];
          }
          k.a = b_first ? bb.floats() : ab.floats();
          k.b = b_first ? ab.floats() : bb.floats();
          EXPECT_EQ(k.packed(), !shifted);
          run(k);
          outputs.push_back(ob.contents());
        }
        EXPECT_TRUE(bit_equal(outputs[0], outputs[1]));
      }
    }
  }
}

TEST(KernelPacked, DropoutPacksAsItsElements) {
  const math::PhiloxStream stream = math::PhiloxStream::of(0xABCDEFULL, 5, 1, 7);
  const std::int64_t n = 1003;  // a partial last block and pack
  for (const ElementType type : kTypes) {
    for (const bool residual : {false, true}) {
      SCOPED_TRACE(::testing::Message() << name(type) << " residual " << residual);
      const std::vector<float> x = uniform(n, -2.0F, 2.0F, 21);
      const std::vector<float> r = uniform(n, -1.0F, 1.0F, 22);
      std::vector<std::vector<std::uint8_t>> outputs, grads;
      std::vector<std::vector<std::uint32_t>> masks;
      for (const bool shifted : {false, true}) {
        Buffer xb(x, type, shifted), rb(r, type, shifted);
        Buffer yb(std::vector<float>(static_cast<std::size_t>(n), 7.0F), type, shifted);
        std::vector<std::uint32_t> mask(static_cast<std::size_t>((n + 31) / 32), 0xABABABABU);
        DropoutForward f{stream,      math::dropout_threshold(0.3F),
                         1.0F / 0.7F, type,
                         xb.data(),   yb.data(),
                         mask.data(), n};
        if (residual) f.residual = rb.data();
        EXPECT_EQ(f.packed(), !shifted);
        run(f);
        outputs.push_back(yb.contents());
        masks.push_back(mask);
        Buffer dxb(std::vector<float>(static_cast<std::size_t>(n), 7.0F), type, shifted);
        const DropoutBackward b{mask.data(), 1.0F / 0.7F, type, rb.data(), dxb.data(), n};
        EXPECT_EQ(b.packed(), !shifted);
        run(b);
        grads.push_back(dxb.contents());
      }
      EXPECT_TRUE(bit_equal(outputs[0], outputs[1]));
      EXPECT_TRUE(bit_equal(masks[0], masks[1]));
      EXPECT_TRUE(bit_equal(grads[0], grads[1]));
    }
  }
}

TEST(KernelPacked, BiasReluDropoutStorePacksAsItsElements) {
  const std::int64_t rows = 37, cols = 40;
  const std::vector<float> y = uniform(rows * cols, -3.0F, 3.0F, 31);
  const std::vector<float> bias = uniform(cols, -1.0F, 1.0F, 32);
  for (const ElementType type : {ElementType::bf16, ElementType::f16}) {
    for (const bool dropped : {false, true}) {
      SCOPED_TRACE(::testing::Message() << name(type) << " dropped " << dropped);
      std::vector<std::vector<std::uint8_t>> outputs;
      for (const bool shifted : {false, true}) {
        Buffer yb(y, ElementType::f32, shifted), bb(bias, ElementType::bf16, shifted);
        Buffer ob(std::vector<float>(y.size(), 7.0F), type, shifted);
        BiasReluDropoutStore k;
        k.y = yb.floats();
        k.bias = bb.data();
        k.bias_type = ElementType::bf16;
        k.out = ob.data();
        k.type = type;
        k.rows = rows;
        k.cols = cols;
        k.relu = true;
        k.dropped = dropped;
        k.stream = math::PhiloxStream::of(3, 4, 0, 5);
        k.threshold = math::dropout_threshold(0.25F);
        k.scale = 1.0F / 0.75F;
        EXPECT_EQ(k.packed(), !shifted);
        run(k);
        outputs.push_back(ob.contents());
      }
      EXPECT_TRUE(bit_equal(outputs[0], outputs[1]));
    }
  }
}

TEST(KernelPacked, ActivationBackwardPacksAsItsElements) {
  for (const std::int64_t rows : {5, 150}) {  // one row block and three (the last partial)
    const std::int64_t cols = 24;
    const std::vector<float> g = uniform(rows * cols, -1.0F, 1.0F, 41);
    std::vector<float> saved = uniform(rows * cols, -2.0F, 2.0F, 42);
    for (float& v : saved) v = v < 0.0F ? 0.0F : v;  // relu's output
    for (const bool sixteen : {false, true}) {
      SCOPED_TRACE(::testing::Message() << rows << " rows, 16-bit " << sixteen);
      const ElementType type = sixteen ? ElementType::bf16 : ElementType::f32;
      std::vector<std::vector<std::uint8_t>> dzs;
      std::vector<std::vector<float>> sums;
      for (const bool shifted : {false, true}) {
        Buffer gb(g, type, shifted), sb(saved, type, shifted);
        Buffer dzb(std::vector<float>(g.size(), 7.0F), type, shifted);
        const std::int64_t blocks = activation_row_blocks(rows);
        std::vector<float> partial(static_cast<std::size_t>(blocks * cols), -1.0F);
        ActivationBackward k;
        k.activation = Activation::relu;
        k.rows = rows;
        k.cols = cols;
        k.relu_scale = 1.25F;
        k.db_partial = partial.data();
        if (sixteen) {
          k.g16 = static_cast<const std::uint16_t*>(gb.data());
          k.saved16 = static_cast<const std::uint16_t*>(sb.data());
          k.dz16 = static_cast<std::uint16_t*>(dzb.data());
        } else {
          k.g = gb.floats();
          k.saved = sb.floats();
          k.dz = dzb.floats();
        }
        EXPECT_EQ(k.packed(), !shifted);
        run(k);
        dzs.push_back(dzb.contents());
        sums.push_back(partial);
      }
      EXPECT_TRUE(bit_equal(dzs[0], dzs[1]));
      EXPECT_TRUE(bit_equal(sums[0], sums[1]));
    }
  }
}

TEST(KernelPacked, SgdPacksAsItsElements) {
  const std::int64_t n = 1003;
  SgdUpdate a;
  a.learning_rate = 0.1F;
  a.first = false;
  a.momentum = 0.9F;
  a.weight_decay = 1e-4F;
  for (const bool momentum : {false, true}) {
    SCOPED_TRACE(::testing::Message() << "momentum " << momentum);
    std::vector<std::vector<std::uint8_t>> results;
    for (const bool shifted : {false, true}) {
      Buffer p(uniform(n, -1.0F, 1.0F, 56), ElementType::f32, shifted);
      Buffer g(uniform(n, -2.0F, 2.0F, 57), ElementType::f32, shifted);
      Buffer buf(uniform(n, -0.1F, 0.1F, 58), ElementType::f32, shifted);
      const SgdUpdateKernel k{n, p.floats(), g.floats(), momentum ? buf.floats() : nullptr, a};
      EXPECT_EQ(k.packed(), !shifted);
      run(k);
      std::vector<std::uint8_t> all = p.contents();
      const std::vector<std::uint8_t> b = buf.contents();
      all.insert(all.end(), b.begin(), b.end());
      results.push_back(all);
    }
    EXPECT_TRUE(bit_equal(results[0], results[1]));
  }
}

TEST(KernelPacked, AdamPacksAsItsElements) {
  const std::int64_t n = 1003;
  AdamUpdate a;
  a.step_size = 1e-3F;
  a.inv_bc2_sqrt = 1.0F / std::sqrt(1.0F - 0.999F * 0.999F);
  a.coupled_decay = 0.01F;
  for (const bool amsgrad : {false, true}) {
    SCOPED_TRACE(::testing::Message() << "amsgrad " << amsgrad);
    std::vector<std::vector<std::uint8_t>> results;
    for (const bool shifted : {false, true}) {
      Buffer p(uniform(n, -1.0F, 1.0F, 51), ElementType::f32, shifted);
      Buffer g(uniform(n, -2.0F, 2.0F, 52), ElementType::f32, shifted);
      Buffer m(uniform(n, -0.1F, 0.1F, 53), ElementType::f32, shifted);
      Buffer v(uniform(n, 0.0F, 0.01F, 54), ElementType::f32, shifted);
      Buffer vmax(uniform(n, 0.0F, 0.01F, 55), ElementType::f32, shifted);
      const AdamUpdateKernel k{
          n, p.floats(), g.floats(), m.floats(), v.floats(), amsgrad ? vmax.floats() : nullptr, a};
      EXPECT_EQ(k.packed(), !shifted);
      run(k);
      std::vector<std::uint8_t> all = p.contents();
      for (const Buffer* b : {&m, &v, &vmax}) {
        const std::vector<std::uint8_t> c = b->contents();
        all.insert(all.end(), c.begin(), c.end());
      }
      results.push_back(all);
    }
    EXPECT_TRUE(bit_equal(results[0], results[1]));
  }
}

TEST(KernelPacked, MaxPoolPacksChannels) {
  // ResNet's stem pool (3x3, stride 2, padding 1) channels last on odd sizes,
  // 16 channels: two packs a pixel. Ties, NaNs and -inf in x.
  PoolGeometry geo;
  geo.channels_last = true;
  geo.channels = 16;
  geo.planes = 2 * geo.channels;
  geo.h = 7;
  geo.w = 9;
  geo.kernel_h = geo.kernel_w = 3;
  geo.stride_h = geo.stride_w = 2;
  geo.pad_h = geo.pad_w = 1;
  geo.out_h = (geo.h + 2 - 3) / 2 + 1;
  geo.out_w = (geo.w + 2 - 3) / 2 + 1;
  const std::int64_t in = geo.planes * geo.in_size(), out = geo.planes * geo.out_size();
  std::vector<float> x = uniform(in, -3.0F, 3.0F, 61);
  for (std::size_t i = 0; i < x.size(); ++i) {
    x[i] = std::round(x[i]);
    if (i % 13 == 5) x[i] = std::numeric_limits<float>::quiet_NaN();
    if (i % 7 == 3) x[i] = -std::numeric_limits<float>::infinity();
  }
  const std::vector<float> dy = uniform(out, -1.0F, 1.0F, 62);
  const std::vector<float> unset(static_cast<std::size_t>(out), std::bit_cast<float>(-7));
  for (const ElementType type : kTypes) {
    SCOPED_TRACE(name(type));
    std::vector<std::vector<std::uint8_t>> ys, indices, dxs;
    for (const bool shifted : {false, true}) {
      Buffer xb(x, type, shifted), dyb(dy, type, shifted);
      Buffer yb(std::vector<float>(static_cast<std::size_t>(out), 7.0F), type, shifted);
      Buffer dxb(std::vector<float>(static_cast<std::size_t>(in), 7.0F), type, shifted);
      Buffer ib(unset, ElementType::f32, shifted);  // int32 words
      auto* index = static_cast<std::int32_t*>(ib.data());
      MaxPool2dForward f{geo, xb.floats(), yb.floats(), index};
      f.type = type;
      EXPECT_EQ(f.packed(), !shifted);
      run(f);
      MaxPool2dBackward b{geo, index, dyb.floats(), dxb.floats()};
      b.type = type;
      EXPECT_EQ(b.packed(), !shifted);
      run(b);
      ys.push_back(yb.contents());
      indices.push_back(ib.contents());
      dxs.push_back(dxb.contents());
    }
    EXPECT_TRUE(bit_equal(ys[0], ys[1]));
    EXPECT_TRUE(bit_equal(indices[0], indices[1]));
    EXPECT_TRUE(bit_equal(dxs[0], dxs[1]));
  }
}

}  // namespace
}  // namespace rig::kernels::test
