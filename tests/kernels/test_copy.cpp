#include "cuda/kernels/copy.hpp"

#include <gtest/gtest.h>

#include <cstring>

#include "kernel_test_util.hpp"
#include "rig/dtype.hpp"

namespace rig::kernels::test {
namespace {

constexpr DType kTypes[] = {DType::f32, DType::f16, DType::bf16, DType::i32, DType::i64, DType::u8};

// Values that exercise every rule: NaN, infinities, out-of-range values for
// each integer type, fractions of both signs, halfway cases of f16 / bf16.
std::vector<float> float_values(std::int64_t n) {
  const float specials[] = {NAN,      INFINITY,    -INFINITY,     3e9F,    -3e9F,
                            1e20F,    -1e20F,      300.5F,        -2.7F,   -0.5F,
                            0.0F,     -0.0F,       255.9F,        256.0F,  1.0009765625F,
                            65520.0F, 1.00390625F, 2147483520.0F, -129.0F, 1e-8F};
  std::vector<float> v = uniform(n, -1000.0F, 1000.0F, 77);
  for (std::size_t i = 0; i < v.size() && i < std::size(specials); ++i) v[i] = specials[i];
  return v;
}

std::vector<std::int64_t> int_values(std::int64_t n) {
  const std::int64_t specials[] = {0,
                                   -1,
                                   255,
                                   256,
                                   -129,
                                   2147483647,
                                   2147483648LL,
                                   -2147483649LL,
                                   1LL << 40,
                                   -(1LL << 53) - 1,
                                   (1LL << 62) + 12345,
                                   16777217};
  std::vector<std::int64_t> v(static_cast<std::size_t>(n));
  std::mt19937 gen(5);
  for (auto& x : v) x = static_cast<std::int64_t>(gen() % 100000) - 50000;
  for (std::size_t i = 0; i < v.size() && i < std::size(specials); ++i) v[i] = specials[i];
  return v;
}

// n contiguous elements of `type`, made from the values above by the CPU's own casts.
std::vector<std::uint8_t> source(DType type, std::int64_t n) {
  std::vector<std::uint8_t> out(static_cast<std::size_t>(n) * dtype_size(type));
  const Shape shape{n};
  const Strides strides{1};
  if (is_floating(type)) {
    const std::vector<float> f = float_values(n);
    cpu().copy_strided(shape, out.data(), strides, type, f.data(), strides, DType::f32);
  } else {
    const std::vector<std::int64_t> i = int_values(n);
    cpu().copy_strided(shape, out.data(), strides, type, i.data(), strides, DType::i64);
  }
  return out;
}

std::int64_t span(const Shape& shape, const Strides& strides) {
  std::int64_t s = 1;
  for (std::size_t d = 0; d < shape.size(); ++d) s += (shape[d] - 1) * strides[d];
  return s;
}

template <class K>
void set_dims(K& k, const Shape& shape, const Strides* strides, int operands) {
  k.ndim = static_cast<int>(shape.size());
  for (std::size_t d = 0; d < shape.size(); ++d) {
    k.shape[d] = shape[d];
    for (int o = 0; o < operands; ++o) k.strides[o][d] = strides[o][d];
  }
}

struct Layout {
  Shape shape;
  Strides dst, src;
};

TEST(KernelCopy, CopyStridedCastsBitEqualToCpu) {
  const Layout layouts[] = {
      {{3, 5, 7}, {35, 7, 1}, {1, 3, 15}},  // transpose
      {{4, 9}, {20, 2}, {9, 1}},            // gaps in dst
      {{2, 1, 3, 2, 1, 2, 3, 2},
       {72, 72, 24, 12, 6, 6, 2, 1},  // 8 axes, src reversed
       {1, 0, 2, 6, 0, 12, 24, 72}},
      {{1003}, {1}, {1}},  // contiguous: floating casts in packs, a partial last one
  };
  for (const Layout& l : layouts) {
    for (const DType st : kTypes) {
      for (const DType dt : kTypes) {
        SCOPED_TRACE(::testing::Message()
                     << to_string(l.shape) << " " << dtype_name(dt) << " <- " << dtype_name(st));
        const std::int64_t src_n = span(l.shape, l.src), dst_n = span(l.shape, l.dst);
        const std::vector<std::uint8_t> src = source(st, src_n);
        const auto dst_bytes = static_cast<std::size_t>(dst_n) * dtype_size(dt);
        std::vector<std::uint8_t> want(dst_bytes, 0xA5), got(dst_bytes, 0xA5);
        cpu().copy_strided(l.shape, want.data(), l.dst, dt, src.data(), l.src, st);
        CopyStrided k{.dst = got.data(), .dst_type = dt, .src = src.data(), .src_type = st};
        const Strides both[2] = {l.dst, l.src};
        set_dims(k, l.shape, both, 2);
        EXPECT_EQ(k.packed(),
                  l.shape.size() == 1 && st != dt && is_floating(st) && is_floating(dt));
        run(k);
        EXPECT_TRUE(bit_equal(got, want));
      }
    }
  }
}

TEST(KernelCopy, FillStridedBitEqualToCpu) {
  for (const Layout& l : {Layout{{3, 4, 5}, {1, 6, 24}, {}},  // gaps and a transposed order
                          Layout{{1003}, {1}, {}}}) {         // contiguous: packs if floating
    const Shape& shape = l.shape;
    const Strides& strides = l.dst;
    for (const DType dt : kTypes) {
      for (const float value : {1.5F, -2.7F, NAN, 3e9F, -INFINITY, 65520.0F, 300.0F}) {
        SCOPED_TRACE(::testing::Message() << dtype_name(dt) << " " << value);
        const auto bytes = static_cast<std::size_t>(span(shape, strides)) * dtype_size(dt);
        std::vector<std::uint8_t> want(bytes, 0x5A), got(bytes, 0x5A);
        cpu().fill_strided(shape, want.data(), strides, dt, value);
        FillStrided k{.dst = got.data(), .dst_type = dt, .value = value};
        set_dims(k, shape, &strides, 1);
        EXPECT_EQ(k.packed(), shape.size() == 1 && is_floating(dt));
        run(k);
        EXPECT_TRUE(bit_equal(got, want));
      }
    }
  }
}

// Every alignment of both pointers and odd sizes: 16-byte words only when
// both are 16-byte aligned, then narrower words, the tail byte by byte.
TEST(KernelCopy, ContiguousCopyAtEveryAlignment) {
  constexpr std::size_t kPad = 64;
  alignas(16) std::uint8_t src_buf[2048 + kPad];
  for (std::size_t i = 0; i < sizeof src_buf; ++i)
    src_buf[i] = static_cast<std::uint8_t>(i * 7 + 3);
  for (const std::size_t src_off : {0, 1, 2, 4, 8, 16, 3}) {
    for (const std::size_t dst_off : {0, 1, 4, 16}) {
      for (const std::int64_t bytes : {1, 15, 16, 17, 100, 2000}) {
        SCOPED_TRACE(::testing::Message()
                     << "src +" << src_off << " dst +" << dst_off << " bytes " << bytes);
        alignas(16) std::uint8_t dst_buf[2048 + kPad];
        std::memset(dst_buf, 0xEE, sizeof dst_buf);
        const CopyContiguous k{dst_buf + dst_off, src_buf + src_off, bytes};
        const int want_width = (src_off | dst_off) % 16 == 0  ? 16
                               : (src_off | dst_off) % 8 == 0 ? 8
                               : (src_off | dst_off) % 4 == 0 ? 4
                               : (src_off | dst_off) % 2 == 0 ? 2
                                                              : 1;
        EXPECT_EQ(k.width(), want_width);
        run(k);
        EXPECT_EQ(
            std::memcmp(dst_buf + dst_off, src_buf + src_off, static_cast<std::size_t>(bytes)), 0);
        for (std::size_t i = 0; i < sizeof dst_buf; ++i) {
          if (i >= dst_off && i < dst_off + static_cast<std::size_t>(bytes)) continue;
          ASSERT_EQ(dst_buf[i], 0xEE) << "byte " << i << " written outside the copy";
        }
      }
    }
  }
  EXPECT_EQ((CopyContiguous{nullptr, nullptr, 0}.plan(h100()).grid.x), 0U);
}

}  // namespace
}  // namespace rig::kernels::test
