#include "cpu/small_gemm_bf16.hpp"

#include <algorithm>
#include <bit>
#include <cstring>
#include <stdexcept>

#include "cpu/transpose_block.hpp"
#include "rig/half.hpp"
#include "rig/kernel_attributes.hpp"

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#include <immintrin.h>
#define RIG_HAVE_BF16_KERNEL 1
#define RIG_BF16_TARGET __attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16")))
#else
#define RIG_HAVE_BF16_KERNEL 0
#endif

// The 64-byte vector helpers below are always inlined, so the ABI that
// -Wpsabi warns about (returning them by value without AVX-512) never applies.
#pragma GCC diagnostic ignored "-Wpsabi"

namespace rig::cpu {
namespace {

// The packed operands: pair kk of row i of op(A) (elements 2 kk and 2 kk + 1
// along k, the first in the low half) at a[i * a_row + kk * a_pair]; pair kk
// of column j of op(B) at b[kk * b_ld + j], b_ld a multiple of 16 (columns
// past n are zeros). An odd k gets a zero high half in the last pair.
struct Packed {
  const std::uint32_t* a = nullptr;
  std::int64_t a_row = 0, a_pair = 0;
  const std::uint32_t* b = nullptr;
  std::int64_t b_ld = 0;
  std::int64_t pairs = 0;
};

using u32x16 = std::uint32_t __attribute__((vector_size(64)));
using u64x8 = std::uint64_t __attribute__((vector_size(64)));
using u32x8 = std::uint32_t __attribute__((vector_size(32)));
using f32x16 = float __attribute__((vector_size(64)));

#define RIG_INLINE inline __attribute__((always_inline))

// float_to_bfloat16_bits on 16 lanes: the bf16 bits in each lane's low half.
RIG_INLINE u32x16 bf16_bits(const u32x16& w) {
  const u32x16 rounded = (w + 0x7FFFU + ((w >> 16U) & 1U)) >> 16U;
  const u32x16 quiet = (w >> 16U) | 0x40U;
  return (w & 0x7FFFFFFFU) > 0x7F800000U ? quiet : rounded;
}

RIG_INLINE std::uint32_t pair_of(float lo, float hi) {
  return float_to_bfloat16_bits(lo) |
         (static_cast<std::uint32_t>(float_to_bfloat16_bits(hi)) << 16U);
}

// out[kk] = the pair (x[2 kk], x[2 kk + 1]) for kk < (n + 1) / 2: a row's
// consecutive elements paired.
RIG_INLINE void pair_along_row(const float* x, std::int64_t n, std::uint32_t* out) {
  std::int64_t e = 0;
  for (; e + 16 <= n; e += 16) {
    u32x16 w;
    std::memcpy(&w, x + e, sizeof w);
    // Lane t of the u64 view holds elements 2t (low word) and 2t + 1 (high word).
    const auto q = std::bit_cast<u64x8>(bf16_bits(w));
    const u32x8 pairs = __builtin_convertvector(q | (q >> 16U), u32x8);
    std::memcpy(out + e / 2, &pairs, sizeof pairs);
  }
  for (; e < n; e += 2) out[e / 2] = pair_of(x[e], e + 1 < n ? x[e + 1] : 0.0F);
}

// out[j] = the pair (x0[j], x1[j]) for j < n (x1 null: a zero high half).
RIG_INLINE void pair_across_rows(const float* x0, const float* x1, std::int64_t n,
                                 std::uint32_t* out) {
  std::int64_t j = 0;
  for (; j + 16 <= n; j += 16) {
    u32x16 w0, w1 = {};
    std::memcpy(&w0, x0 + j, sizeof w0);
    if (x1 != nullptr) std::memcpy(&w1, x1 + j, sizeof w1);
    const u32x16 pairs = bf16_bits(w0) | (x1 != nullptr ? bf16_bits(w1) << 16U : u32x16{});
    std::memcpy(out + j, &pairs, sizeof pairs);
  }
  for (; j < n; ++j) out[j] = pair_of(x0[j], x1 != nullptr ? x1[j] : 0.0F);
}

// op(X) [rows, k] packed as pairs along k: pair kk of row i at out[i * pairs
// + kk], or at out[kk * rows + i] when X is transposed (the cheaper layout to
// write then). One call per operand: these run once per product.
RIG_CPU_KERNEL void pack_rows(const SmallOperand& x, std::int64_t rows, std::int64_t k,
                              std::uint32_t* out) {
  const std::int64_t pairs = (k + 1) / 2;
  if (!x.trans) {  // rows of X are rows of op(X)
    for (std::int64_t i = 0; i < rows; ++i) pair_along_row(x.data + i * x.ld, k, out + i * pairs);
    return;
  }
  // op(X)[i][e] = X[e][i]: two rows of X make a row of pairs, laid out pair-major.
  for (std::int64_t kk = 0; kk < pairs; ++kk) {
    const float* x1 = 2 * kk + 1 < k ? x.data + (2 * kk + 1) * x.ld : nullptr;
    pair_across_rows(x.data + 2 * kk * x.ld, x1, rows, out + kk * rows);
  }
}

// op(X) [k, cols] packed as pairs along k: pair kk of column j at out[kk * ld
// + j], columns cols..ld zeros. A transposed X (columns of op(X) are rows of
// X) is paired along its rows into `rows_scratch` ([ld x pairs]) first, then
// transposed in 16 x 16 blocks.
RIG_CPU_KERNEL void pack_columns(const SmallOperand& x, std::int64_t k, std::int64_t cols,
                                 std::int64_t ld, std::uint32_t* out, std::uint32_t* rows_scratch) {
  const std::int64_t pairs = (k + 1) / 2;
  if (!x.trans) {  // op(X)[e][j] = X[e][j]
    for (std::int64_t kk = 0; kk < pairs; ++kk) {
      const float* x1 = 2 * kk + 1 < k ? x.data + (2 * kk + 1) * x.ld : nullptr;
      pair_across_rows(x.data + 2 * kk * x.ld, x1, cols, out + kk * ld);
      std::fill(out + kk * ld + cols, out + kk * ld + ld, 0U);
    }
    return;
  }
  for (std::int64_t j = 0; j < cols; ++j) {
    pair_along_row(x.data + j * x.ld, k, rows_scratch + j * pairs);
  }
  std::fill(rows_scratch + cols * pairs, rows_scratch + ld * pairs, 0U);
  transpose(rows_scratch, pairs, ld, pairs, out);
}

// ---- the tile kernels: C[R rows, 16 W columns] ----------------------------

struct TileArgs {
  const Packed* p;
  std::int64_t row0, col0;
  float alpha;
  float* c;
  std::int64_t ldc;
  std::int64_t cols;  // valid columns of this tile (<= 16 W)
};

RIG_INLINE std::uint32_t a_pair(const Packed& p, std::int64_t i, std::int64_t kk) {
  return p.a[i * p.a_row + kk * p.a_pair];
}

// Writes the tile's valid columns of alpha * acc.
template <int R, int W, class Store>
RIG_INLINE void store_tile(const TileArgs& t, Store store) {
  for (int r = 0; r < R; ++r) {
    float* row = t.c + (t.row0 + r) * t.ldc + t.col0;
    for (int w = 0; w < W; ++w) {
      const std::int64_t valid = std::min<std::int64_t>(16, t.cols - 16 * w);
      if (valid > 0) store(r, w, row + 16 * w, valid);
    }
  }
}

// The instruction's arithmetic: for each lane, acc += a.hi * b.hi, then
// acc += a.lo * b.lo (both products exact in f32).
template <int R, int W>
void portable_tile(const TileArgs& t) {
  const Packed& p = *t.p;
  f32x16 acc[R][W] = {};
  for (std::int64_t kk = 0; kk < p.pairs; ++kk) {
    f32x16 b_lo[W], b_hi[W];
    for (int w = 0; w < W; ++w) {
      u32x16 bits;
      std::memcpy(&bits, p.b + kk * p.b_ld + t.col0 + 16 * w, sizeof bits);
      b_lo[w] = std::bit_cast<f32x16>(bits << 16U);
      b_hi[w] = std::bit_cast<f32x16>(bits & 0xFFFF0000U);
    }
    for (int r = 0; r < R; ++r) {
      const std::uint32_t pair = a_pair(p, t.row0 + r, kk);
      const float a_lo = std::bit_cast<float>(pair << 16U);
      const float a_hi = std::bit_cast<float>(pair & 0xFFFF0000U);
      for (int w = 0; w < W; ++w) {
        acc[r][w] += a_hi * b_hi[w];
        acc[r][w] += a_lo * b_lo[w];
      }
    }
  }
  store_tile<R, W>(t, [&](int r, int w, float* out, std::int64_t valid) {
    const f32x16 v = acc[r][w] * t.alpha;
    for (std::int64_t l = 0; l < valid; ++l) out[l] = v[l];
  });
}

#if RIG_HAVE_BF16_KERNEL
template <int R, int W>
RIG_BF16_TARGET void native_tile(const TileArgs& t) {
  const Packed& p = *t.p;
  __m512 acc[R][W];
  for (int r = 0; r < R; ++r) {
    for (int w = 0; w < W; ++w) acc[r][w] = _mm512_setzero_ps();
  }
  for (std::int64_t kk = 0; kk < p.pairs; ++kk) {
    __m512bh b[W];
    for (int w = 0; w < W; ++w) {
      b[w] = reinterpret_cast<__m512bh>(_mm512_loadu_si512(p.b + kk * p.b_ld + t.col0 + 16 * w));
    }
    for (int r = 0; r < R; ++r) {
      const auto a = reinterpret_cast<__m512bh>(
          _mm512_set1_epi32(static_cast<int>(a_pair(p, t.row0 + r, kk))));
      for (int w = 0; w < W; ++w) acc[r][w] = _mm512_dpbf16_ps(acc[r][w], a, b[w]);
    }
  }
  // Not store_tile: a lambda would not inherit this function's target.
  const __m512 alpha = _mm512_set1_ps(t.alpha);
  for (int r = 0; r < R; ++r) {
    float* row = t.c + (t.row0 + r) * t.ldc + t.col0;
    for (int w = 0; w < W; ++w) {
      const std::int64_t valid = std::min<std::int64_t>(16, t.cols - 16 * w);
      if (valid <= 0) continue;
      const auto mask = static_cast<__mmask16>((1U << valid) - 1U);
      _mm512_mask_storeu_ps(row + 16 * w, mask, _mm512_mul_ps(acc[r][w], alpha));
    }
  }
}
#endif

using TileFn = void (*)(const TileArgs&);

// Tiles of up to 4 rows and 64 columns.
template <template <int, int> class Tile>
struct TileTable {
  static constexpr TileFn fns[3][4] = {
      {Tile<1, 1>::run, Tile<1, 2>::run, Tile<1, 3>::run, Tile<1, 4>::run},
      {Tile<2, 1>::run, Tile<2, 2>::run, Tile<2, 3>::run, Tile<2, 4>::run},
      {Tile<4, 1>::run, Tile<4, 2>::run, Tile<4, 3>::run, Tile<4, 4>::run}};
};
template <int R, int W>
struct Portable {
  static void run(const TileArgs& t) { portable_tile<R, W>(t); }
};
#if RIG_HAVE_BF16_KERNEL
template <int R, int W>
struct Native {
  static void run(const TileArgs& t) { native_tile<R, W>(t); }
};
#endif

void run_tiles(const Packed& p, std::int64_t m, std::int64_t n, float alpha, float* c,
               std::int64_t ldc, const TileFn (&fns)[3][4]) {
  std::int64_t i = 0;
  while (i < m) {
    const int rows = m - i >= 4 ? 4 : m - i >= 2 ? 2 : 1;
    const int row_index = rows == 4 ? 2 : rows - 1;
    for (std::int64_t j = 0; j < n; j += 64) {
      const std::int64_t cols = std::min<std::int64_t>(64, n - j);
      const TileArgs t{&p, i, j, alpha, c, ldc, cols};
      fns[row_index][(cols + 15) / 16 - 1](t);
    }
    i += rows;
  }
}

std::int64_t padded_columns(std::int64_t n) {
  return (n + 15) / 16 * 16;
}

}  // namespace

bool small_gemm_bf16_native_available() {
#if RIG_HAVE_BF16_KERNEL
  static const bool has = __builtin_cpu_supports("avx512bf16") != 0;
  return has;
#else
  return false;
#endif
}

std::int64_t small_gemm_bf16_scratch(std::int64_t m, std::int64_t n, std::int64_t k) {
  const std::int64_t pairs = (k + 1) / 2;
  return pairs * m + 2 * pairs * padded_columns(n);  // A, B, and B's rows before transposing
}

void small_gemm_bf16(std::int64_t m, std::int64_t n, std::int64_t k, float alpha,
                     const SmallOperand& a, const SmallOperand& b, float* c, std::int64_t ldc,
                     std::uint32_t* scratch, SmallGemmKernel kernel) {
  if (kernel == SmallGemmKernel::native && !small_gemm_bf16_native_available()) {
    throw std::logic_error("small_gemm_bf16: this CPU has no AVX512_BF16");
  }
  if (m <= 0 || n <= 0) return;
  if (k <= 0) {
    for (std::int64_t i = 0; i < m; ++i) std::fill(c + i * ldc, c + i * ldc + n, 0.0F);
    return;
  }
  Packed p;
  p.pairs = (k + 1) / 2;
  std::uint32_t* a_packed = scratch;
  std::uint32_t* b_packed = scratch + p.pairs * m;
  pack_rows(a, m, k, a_packed);
  p.a = a_packed;
  p.a_row = a.trans ? 1 : p.pairs;
  p.a_pair = a.trans ? m : 1;
  p.b_ld = padded_columns(n);
  pack_columns(b, k, n, p.b_ld, b_packed, b_packed + p.pairs * p.b_ld);
  p.b = b_packed;
#if RIG_HAVE_BF16_KERNEL
  if (kernel != SmallGemmKernel::portable && small_gemm_bf16_native_available()) {
    run_tiles(p, m, n, alpha, c, ldc, TileTable<Native>::fns);
    return;
  }
#endif
  run_tiles(p, m, n, alpha, c, ldc, TileTable<Portable>::fns);
}

}  // namespace rig::cpu
