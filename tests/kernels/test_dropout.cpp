#include "cuda/kernels/dropout.hpp"

#include <gtest/gtest.h>

#include "kernel_test_util.hpp"
#include "rig/dtype.hpp"
#include "rig/half.hpp"
#include "rig/random.hpp"

namespace rig::kernels::test {
namespace {

constexpr std::int64_t kSizes[] = {1, 7, 31, 33, 257, 1000, 4099};

struct Type {
  ElementType type;
  DType dtype;
  std::size_t bytes;
};

TEST(KernelDropout, MasksAndOutputsAreBitEqualToCpu) {
  const RandomKey key{0x1234567890ABCDEFULL, 77, 3, 0xC0FFEEU};
  for (const std::int64_t n : kSizes) {
    for (const float p : {0.1F, 0.5F}) {
      for (const Type t :
           {Type{ElementType::f32, DType::f32, 4}, Type{ElementType::f16, DType::f16, 2},
            Type{ElementType::bf16, DType::bf16, 2}}) {
        SCOPED_TRACE(::testing::Message()
                     << "n " << n << " p " << p << " type " << static_cast<int>(t.type));
        const std::vector<float> values = uniform(n, -4.0F, 4.0F, static_cast<std::uint32_t>(n));
        const auto bytes = static_cast<std::size_t>(n) * t.bytes;
        std::vector<std::uint8_t> src(bytes);
        for (std::int64_t i = 0; i < n; ++i) {
          const auto k = static_cast<std::size_t>(i);
          if (t.type == ElementType::f32) {
            std::memcpy(src.data() + 4 * k, &values[k], 4);
          } else {
            const std::uint16_t h = t.type == ElementType::f16 ? float_to_half_bits(values[k])
                                                               : float_to_bfloat16_bits(values[k]);
            std::memcpy(src.data() + 2 * k, &h, 2);
          }
        }
        const float scale = 1.0F / (1.0F - p);
        const auto words = static_cast<std::size_t>((n + 31) / 32);
        std::vector<std::uint8_t> want(bytes);
        std::vector<std::uint32_t> want_mask(words);
        cpu().dropout_forward(key, p, scale, t.dtype, src.data(), want.data(), n, want_mask.data());

        const DropoutForward forward_base{
            math::PhiloxStream::of(key.seed, key.step, key.rank, key.purpose),
            math::dropout_threshold(p),
            scale,
            t.type,
            src.data(),
            nullptr,
            nullptr,
            n};
        for (const std::uint64_t emu_seed : kSeeds) {
          std::vector<std::uint8_t> dst(bytes, 0xAB);
          std::vector<std::uint32_t> mask(words, 0xABABABABU);
          DropoutForward forward = forward_base;
          forward.dst = dst.data();
          forward.mask_bits = mask.data();
          run(forward, emu_seed);
          EXPECT_TRUE(bit_equal(dst, want));
          EXPECT_TRUE(bit_equal(mask, want_mask));
        }
        // Without a mask, in place.
        std::vector<std::uint8_t> inplace = src;
        DropoutForward forward = forward_base;
        forward.src = inplace.data();
        forward.dst = inplace.data();
        run(forward);
        EXPECT_TRUE(bit_equal(inplace, want));

        // Backward from the CPU's mask.
        const std::vector<std::uint8_t>& grad = src;
        std::vector<std::uint8_t> want_dx(bytes), dx(bytes, 0xCD);
        cpu().dropout_backward(want_mask.data(), scale, t.dtype, grad.data(), want_dx.data(), n);
        run(DropoutBackward{want_mask.data(), scale, t.type, grad.data(), dx.data(), n});
        EXPECT_TRUE(bit_equal(dx, want_dx));
      }
    }
  }
}

// A grid smaller than the tensor: several chunks per warp.
TEST(KernelDropout, GridStrideCoversEveryChunk) {
  const RandomKey key{5, 6, 0, 9};
  const std::int64_t n = 3000;
  const std::vector<float> x = uniform(n, -1.0F, 1.0F, 1);
  std::vector<float> want(x.size()), y(x.size());
  const auto words = static_cast<std::size_t>((n + 31) / 32);
  std::vector<std::uint32_t> want_mask(words), mask(words);
  cpu().dropout_forward(key, 0.3F, 2.0F, DType::f32, x.data(), want.data(), n, want_mask.data());
  simt::emulate(simt::LaunchShape{{2, 1, 1}, {64, 1, 1}, 0},
                DropoutForward{math::PhiloxStream::of(key.seed, key.step, key.rank, key.purpose),
                               math::dropout_threshold(0.3F), 2.0F, ElementType::f32, x.data(),
                               y.data(), mask.data(), n});
  EXPECT_TRUE(bit_equal(y, want));
  EXPECT_TRUE(bit_equal(mask, want_mask));
}

// Backend::relu_mask's kernel: the dropout's bits (in place, unscaled), then
// bit (r * ld + c) of the mask = the stored h[r, c] > 0, bits past the row's
// columns untouched; without dropout, h unchanged and its mask alone.
TEST(KernelDropout, ReluMaskIsTheStoredValueAboveZero) {
  const RandomKey key{11, 12, 1, 13};
  for (const Type t :
       {Type{ElementType::f16, DType::f16, 2}, Type{ElementType::bf16, DType::bf16, 2}}) {
    for (const auto& [rows, cols] :
         {std::pair<std::int64_t, std::int64_t>{3, 8}, {5, 136}, {33, 256}}) {
      for (const float p : {0.0F, 0.25F}) {
        SCOPED_TRACE(::testing::Message() << "rows " << rows << " cols " << cols << " p " << p
                                          << " type " << static_cast<int>(t.type));
        const std::int64_t n = rows * cols;
        const std::int64_t ld = (cols + 127) / 128 * 128;
        // relu outputs: zeros and positives, and values that underflow f16 once stored.
        std::vector<float> values = uniform(n, -1.0F, 1.0F, static_cast<std::uint32_t>(n));
        for (std::int64_t i = 0; i < n; ++i) {
          float& v = values[static_cast<std::size_t>(i)];
          v = v < 0.0F ? 0.0F : (i % 17 == 0 ? 1e-9F : v);
        }
        std::vector<std::uint16_t> h(static_cast<std::size_t>(n));
        for (std::int64_t i = 0; i < n; ++i) {
          const float v = values[static_cast<std::size_t>(i)];
          h[static_cast<std::size_t>(i)] =
              t.type == ElementType::f16 ? float_to_half_bits(v) : float_to_bfloat16_bits(v);
        }
        std::vector<std::uint16_t> want = h;
        if (p > 0.0F) {
          cpu().dropout_forward(key, p, 1.0F, t.dtype, h.data(), want.data(), n, nullptr);
        }
        const auto stored = [&](std::uint16_t bits) {
          return t.type == ElementType::f16 ? half_bits_to_float(bits)
                                            : bfloat16_bits_to_float(bits);
        };
        for (const std::uint64_t emu_seed : kSeeds) {
          std::vector<std::uint16_t> got = h;
          std::vector<std::uint8_t> mask(static_cast<std::size_t>(rows * ld / 8), 0xA5);
          DropoutForward k{math::PhiloxStream::of(key.seed, key.step, key.rank, key.purpose),
                           math::dropout_threshold(p),
                           1.0F,
                           t.type,
                           got.data(),
                           p > 0.0F ? got.data() : nullptr,
                           nullptr,
                           n};
          k.relu_mask = mask.data();
          k.relu_cols = cols;
          k.relu_mask_ld = ld;
          run(k, emu_seed);
          EXPECT_TRUE(bit_equal(got, want));
          int bad = 0;
          for (std::int64_t r = 0; r < rows; ++r) {
            for (std::int64_t c = 0; c < ld; ++c) {
              const std::int64_t b = r * ld + c;
              const bool bit = ((mask[static_cast<std::size_t>(b / 8)] >> (b % 8)) & 1U) != 0;
              const bool expected =
                  c < cols ? stored(want[static_cast<std::size_t>(r * cols + c)]) > 0.0F
                           : ((0xA5U >> (b % 8)) & 1U) != 0;  // untouched
              if (bit != expected && ++bad <= 5) {
                ADD_FAILURE() << "bit of row " << r << " column " << c << ": " << bit;
              }
            }
          }
        }
      }
    }
  }
}

}  // namespace
}  // namespace rig::kernels::test
