// Transposes of 4-byte elements (float, or packed bf16 pairs) with AVX-512's
// unpack / unpack / 128-bit-lane shuffle sequence on 16 x 16 blocks, written
// with GCC vector extensions (one AVX-512 register, or two AVX2 ones, a row).
// For the fused attention and its bf16 operand packing.
#pragma once

#include <cstdint>
#include <cstring>

namespace rig::cpu {

// Two-input lane shuffles (GCC and Clang spell them differently). Macros, as
// a function taking 64-byte vectors would change the ABI of the non-AVX-512
// clones (-Wpsabi).
#if defined(__clang__)
#define RIG_SHUFFLE16(a, b, ...) __builtin_shufflevector(a, b, __VA_ARGS__)
#else
using v16i = int __attribute__((vector_size(64)));
#define RIG_SHUFFLE16(a, b, ...) __builtin_shuffle(a, b, v16i{__VA_ARGS__})
#endif
#define RIG_LO32 0, 16, 1, 17, 4, 20, 5, 21, 8, 24, 9, 25, 12, 28, 13, 29
#define RIG_HI32 2, 18, 3, 19, 6, 22, 7, 23, 10, 26, 11, 27, 14, 30, 15, 31
#define RIG_LO64 0, 1, 16, 17, 4, 5, 20, 21, 8, 9, 24, 25, 12, 13, 28, 29
#define RIG_HI64 2, 3, 18, 19, 6, 7, 22, 23, 10, 11, 26, 27, 14, 15, 30, 31
#define RIG_EVEN_LANES 0, 1, 2, 3, 8, 9, 10, 11, 16, 17, 18, 19, 24, 25, 26, 27
#define RIG_ODD_LANES 4, 5, 6, 7, 12, 13, 14, 15, 20, 21, 22, 23, 28, 29, 30, 31

// dst (rows `ldd` apart) = the transpose of a 16 x 16 block of src (rows `ld`
// apart): AVX-512's unpack / unpack / 128-bit-lane shuffle sequence.
template <class T>
[[gnu::always_inline]] inline void transpose16(const T* src, std::int64_t ld, T* dst,
                                               std::int64_t ldd) {
  static_assert(sizeof(T) == 4);
  using v16 = std::uint32_t __attribute__((vector_size(64)));  // the bits, moved as they are
  v16 r[16], t[16];
#pragma GCC unroll 16
  for (int i = 0; i < 16; ++i) std::memcpy(&r[i], src + i * ld, sizeof(v16));
#pragma GCC unroll 8
  for (int i = 0; i < 8; ++i) {
    t[2 * i] = RIG_SHUFFLE16(r[2 * i], r[2 * i + 1], RIG_LO32);
    t[2 * i + 1] = RIG_SHUFFLE16(r[2 * i], r[2 * i + 1], RIG_HI32);
  }
#pragma GCC unroll 4
  for (int i = 0; i < 4; ++i) {
    r[4 * i] = RIG_SHUFFLE16(t[4 * i], t[4 * i + 2], RIG_LO64);
    r[4 * i + 1] = RIG_SHUFFLE16(t[4 * i], t[4 * i + 2], RIG_HI64);
    r[4 * i + 2] = RIG_SHUFFLE16(t[4 * i + 1], t[4 * i + 3], RIG_LO64);
    r[4 * i + 3] = RIG_SHUFFLE16(t[4 * i + 1], t[4 * i + 3], RIG_HI64);
  }
#pragma GCC unroll 4
  for (int i = 0; i < 4; ++i) {
    t[i] = RIG_SHUFFLE16(r[i], r[i + 4], RIG_EVEN_LANES);
    t[i + 4] = RIG_SHUFFLE16(r[i], r[i + 4], RIG_ODD_LANES);
    t[i + 8] = RIG_SHUFFLE16(r[i + 8], r[i + 12], RIG_EVEN_LANES);
    t[i + 12] = RIG_SHUFFLE16(r[i + 8], r[i + 12], RIG_ODD_LANES);
  }
#pragma GCC unroll 8
  for (int i = 0; i < 8; ++i) {
    r[i] = RIG_SHUFFLE16(t[i], t[i + 8], RIG_EVEN_LANES);
    r[i + 8] = RIG_SHUFFLE16(t[i], t[i + 8], RIG_ODD_LANES);
  }
#pragma GCC unroll 16
  for (int i = 0; i < 16; ++i) std::memcpy(dst + i * ldd, &r[i], sizeof(v16));
}

// dst[c][r] = src[r][c] for a rows x cols block (src rows `ld` apart).
template <class T>
[[gnu::always_inline]] inline void transpose(const T* src, std::int64_t ld, std::int64_t rows,
                                             std::int64_t cols, T* dst) {
  std::int64_t r0 = 0;
  for (; r0 + 16 <= rows; r0 += 16) {
    std::int64_t c0 = 0;
    for (; c0 + 16 <= cols; c0 += 16)
      transpose16(src + r0 * ld + c0, ld, dst + c0 * rows + r0, rows);
    for (std::int64_t c = c0; c < cols; ++c) {
      for (std::int64_t r = r0; r < r0 + 16; ++r) dst[c * rows + r] = src[r * ld + c];
    }
  }
  for (std::int64_t r = r0; r < rows; ++r) {
    for (std::int64_t c = 0; c < cols; ++c) dst[c * rows + r] = src[r * ld + c];
  }
}

#undef RIG_SHUFFLE16
#undef RIG_LO32
#undef RIG_HI32
#undef RIG_LO64
#undef RIG_HI64
#undef RIG_EVEN_LANES
#undef RIG_ODD_LANES

}  // namespace rig::cpu
