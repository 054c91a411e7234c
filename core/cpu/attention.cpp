// Fused attention: one (batch, head) per task. Each task's operands (a few
// [T, D] blocks) stay in L1/L2; the GEMMs are a register-tiled kernel written
// with GCC vector extensions (16 floats: one AVX-512 register, two AVX2 ones),
// which at these sizes (32 x 32 x 64 in the Transformer benchmark) runs at
// about the speed of OpenBLAS's small-matrix path without its per-call cost
// or its own threading inside our pool.
#include "cpu/attention.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "cpu/kernel_attributes.hpp"
#include "cpu/parallel.hpp"
#include "cpu/vec_math.hpp"

namespace rig::cpu {

namespace {

using v16 = float __attribute__((vector_size(64)));

// C[R rows, 16 W columns] = alpha * A B over K, A rows `lda` apart.
template <int R, int W>
[[gnu::always_inline]] inline void tile(std::int64_t k_size, float alpha, const float* a,
                                        std::int64_t lda, const float* b, std::int64_t ldb,
                                        float* c, std::int64_t ldc) {
  v16 acc[R][W];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) {
#pragma GCC unroll 4
    for (int w = 0; w < W; ++w) acc[r][w] = v16{};
  }
  for (std::int64_t k = 0; k < k_size; ++k) {
    v16 bk[W];
#pragma GCC unroll 4
    for (int w = 0; w < W; ++w) std::memcpy(&bk[w], b + k * ldb + 16 * w, sizeof(v16));
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      const float ar = a[r * lda + k];
#pragma GCC unroll 4
      for (int w = 0; w < W; ++w) acc[r][w] += ar * bk[w];
    }
  }
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) {
#pragma GCC unroll 4
    for (int w = 0; w < W; ++w) {
      const v16 out = acc[r][w] * alpha;
      std::memcpy(c + r * ldc + 16 * w, &out, sizeof(v16));
    }
  }
}

template <int R>
[[gnu::always_inline]] inline void row_block(std::int64_t n, std::int64_t k_size, float alpha,
                                             const float* a, std::int64_t lda, const float* b,
                                             std::int64_t ldb, float* c, std::int64_t ldc) {
  std::int64_t j = 0;
  for (; j + 32 <= n; j += 32) tile<R, 2>(k_size, alpha, a, lda, b + j, ldb, c + j, ldc);
  for (; j + 16 <= n; j += 16) tile<R, 1>(k_size, alpha, a, lda, b + j, ldb, c + j, ldc);
  for (; j < n; ++j) {
    for (int r = 0; r < R; ++r) {
      float total = 0.0F;
      for (std::int64_t k = 0; k < k_size; ++k) total += a[r * lda + k] * b[k * ldb + j];
      c[r * ldc + j] = alpha * total;
    }
  }
}

// C[m x n] = alpha * A[m x k] B[k x n], row-major with leading dimensions.
[[gnu::always_inline]] inline void gemm(std::int64_t m, std::int64_t n, std::int64_t k, float alpha,
                                        const float* a, std::int64_t lda, const float* b,
                                        std::int64_t ldb, float* c, std::int64_t ldc) {
  std::int64_t i = 0;
  for (; i + 6 <= m; i += 6) row_block<6>(n, k, alpha, a + i * lda, lda, b, ldb, c + i * ldc, ldc);
  for (; i + 2 <= m; i += 2) row_block<2>(n, k, alpha, a + i * lda, lda, b, ldb, c + i * ldc, ldc);
  for (; i < m; ++i) row_block<1>(n, k, alpha, a + i * lda, lda, b, ldb, c + i * ldc, ldc);
}

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
[[gnu::always_inline]] inline void transpose16(const float* src, std::int64_t ld, float* dst,
                                               std::int64_t ldd) {
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
[[gnu::always_inline]] inline void transpose(const float* src, std::int64_t ld, std::int64_t rows,
                                             std::int64_t cols, float* dst) {
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

constexpr int kLanes = 16;

// Softmax of one row of scores in place over the allowed keys; a row with no
// allowed key (or only -inf scores) becomes zeros.
[[gnu::always_inline]] inline void softmax_row(float* row, std::int64_t n, std::int64_t limit,
                                               const std::uint8_t* mask, std::int64_t mask_stride) {
  constexpr float kNegInf = -std::numeric_limits<float>::infinity();
  for (std::int64_t j = limit; j < n; ++j) row[j] = kNegInf;
  if (mask != nullptr) {
    for (std::int64_t j = 0; j < limit; ++j) row[j] = mask[j * mask_stride] ? row[j] : kNegInf;
  }
  float lanes[kLanes];
  std::fill(lanes, lanes + kLanes, kNegInf);
  std::int64_t j = 0;
  for (; j + kLanes <= n; j += kLanes) {
    for (int l = 0; l < kLanes; ++l) lanes[l] = row[j + l] > lanes[l] ? row[j + l] : lanes[l];
  }
  float best = kNegInf;
  for (; j < n; ++j) best = row[j] > best ? row[j] : best;
  for (int l = 0; l < kLanes; ++l) best = lanes[l] > best ? lanes[l] : best;
  if (best == kNegInf) {
    std::fill(row, row + n, 0.0F);
    return;
  }
  std::fill(lanes, lanes + kLanes, 0.0F);
  j = 0;
  for (; j + kLanes <= n; j += kLanes) {
    for (int l = 0; l < kLanes; ++l) {
      const float e = vec::exp(row[j + l] - best);
      row[j + l] = e;
      lanes[l] += e;
    }
  }
  float total = 0.0F;
  for (; j < n; ++j) {
    row[j] = vec::exp(row[j] - best);
    total += row[j];
  }
  for (int l = 0; l < kLanes; ++l) total += lanes[l];
  const float inv = 1.0F / total;
  for (j = 0; j < n; ++j) row[j] *= inv;
}

// out[i] = p[i] * keep[i] * scale over n entries.
[[gnu::always_inline]] inline void apply_keep(const float* p, const std::uint8_t* keep, float scale,
                                              float* out, std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i) out[i] = keep[i] ? p[i] * scale : 0.0F;
}

struct Operands {
  const AttentionShape* s;
  const float *q, *k, *v;
  HeadStrides qs, ks, vs;
};

// The first keys a query may not see under the causal rule (tk without it).
inline std::int64_t key_limit(const AttentionShape& s, std::int64_t i) {
  if (!s.causal) return s.tk;
  return std::clamp<std::int64_t>(i + (s.tk - s.tq) + 1, 0, s.tk);
}

inline std::int64_t at(const HeadStrides& st, std::int64_t b, std::int64_t h) {
  return b * st.batch + h * st.head;
}

struct ForwardArgs {
  Operands in;
  float* out;
  HeadStrides os;
  float* probs;
};

// Scratch per task: kt [d x tk], p [tq x tk], pd [tq x tk].
RIG_CPU_KERNEL void forward_heads(const ForwardArgs& a, float* scratch, std::int64_t begin,
                                  std::int64_t end) {
  const AttentionShape& s = *a.in.s;
  const std::int64_t tq = s.tq, tk = s.tk, d = s.d;
  float* kt = scratch;
  float* own_p = kt + d * tk;
  float* pd = own_p + tq * tk;
  for (std::int64_t bh = begin; bh < end; ++bh) {
    const std::int64_t b = bh / s.h, h = bh % s.h;
    const float* q = a.in.q + at(a.in.qs, b, h);
    const float* k = a.in.k + at(a.in.ks, b, h);
    const float* v = a.in.v + at(a.in.vs, b, h);
    float* p = a.probs != nullptr ? a.probs + bh * tq * tk : own_p;
    transpose(k, a.in.ks.time, tk, d, kt);
    gemm(tq, tk, d, s.scale, q, a.in.qs.time, kt, tk, p, tk);
    for (std::int64_t i = 0; i < tq; ++i) {
      const std::uint8_t* mask =
          s.mask == nullptr
              ? nullptr
              : s.mask + b * s.mask_strides[0] + h * s.mask_strides[1] + i * s.mask_strides[2];
      softmax_row(p + i * tk, tk, key_limit(s, i), mask, s.mask_strides[3]);
    }
    const float* weights = p;
    if (s.keep != nullptr) {
      apply_keep(p, s.keep + bh * tq * tk, s.keep_scale, pd, tq * tk);
      weights = pd;
    }
    gemm(tq, d, tk, 1.0F, weights, tk, v, a.in.vs.time, a.out + at(a.os, b, h), a.os.time);
  }
}

struct BackwardArgs {
  Operands in;
  const float* probs;
  const float* dout;
  HeadStrides dos;
  float *dq, *dk, *dv;
  HeadStrides dqs, dks, dvs;
};

// Scratch per task: vt [d x tk], pd [tq x tk], tr [tk x tq], dp [tq x tk].
RIG_CPU_KERNEL void backward_heads(const BackwardArgs& a, float* scratch, std::int64_t begin,
                                   std::int64_t end) {
  const AttentionShape& s = *a.in.s;
  const std::int64_t tq = s.tq, tk = s.tk, d = s.d;
  float* vt = scratch;
  float* pd = vt + d * tk;
  float* tr = pd + tq * tk;
  float* dp = tr + tk * tq;
  for (std::int64_t bh = begin; bh < end; ++bh) {
    const std::int64_t b = bh / s.h, h = bh % s.h;
    const float* q = a.in.q + at(a.in.qs, b, h);
    const float* k = a.in.k + at(a.in.ks, b, h);
    const float* v = a.in.v + at(a.in.vs, b, h);
    const float* p = a.probs + bh * tq * tk;
    const float* g = a.dout + at(a.dos, b, h);
    const std::uint8_t* keep = s.keep != nullptr ? s.keep + bh * tq * tk : nullptr;
    if (a.dv != nullptr) {  // dv = pd^T g
      const float* weights = p;
      if (keep != nullptr) {
        apply_keep(p, keep, s.keep_scale, pd, tq * tk);
        weights = pd;
      }
      transpose(weights, tk, tq, tk, tr);
      gemm(tk, d, tq, 1.0F, tr, tq, g, a.dos.time, a.dv + at(a.dvs, b, h), a.dvs.time);
    }
    if (a.dq == nullptr && a.dk == nullptr) continue;
    // dp = g v^T (through dropout), then the softmax backward in place:
    // ds = p (dp - <p, dp>) per row.
    transpose(v, a.in.vs.time, tk, d, vt);
    gemm(tq, tk, d, 1.0F, g, a.dos.time, vt, tk, dp, tk);
    if (keep != nullptr) apply_keep(dp, keep, s.keep_scale, dp, tq * tk);
    for (std::int64_t i = 0; i < tq; ++i) {
      float* row = dp + i * tk;
      const float* pr = p + i * tk;
      float dot = 0.0F;
      for (std::int64_t j = 0; j < tk; ++j) dot += pr[j] * row[j];
      for (std::int64_t j = 0; j < tk; ++j) row[j] = pr[j] * (row[j] - dot);
    }
    if (a.dq != nullptr) {  // dq = scale ds k
      gemm(tq, d, tk, s.scale, dp, tk, k, a.in.ks.time, a.dq + at(a.dqs, b, h), a.dqs.time);
    }
    if (a.dk != nullptr) {  // dk = scale ds^T q
      transpose(dp, tk, tq, tk, tr);
      gemm(tk, d, tq, s.scale, tr, tq, q, a.in.qs.time, a.dk + at(a.dks, b, h), a.dks.time);
    }
  }
}

// This thread's scratch of at least n floats (kept between calls).
float* thread_scratch(std::int64_t n) {
  thread_local std::vector<float> buffer;
  if (buffer.size() < static_cast<std::size_t>(n)) buffer.resize(static_cast<std::size_t>(n));
  return buffer.data();
}

// (batch, head) pairs per task: about 64 K multiply-adds at least.
std::int64_t head_grain(const AttentionShape& s) {
  const std::int64_t work = std::max<std::int64_t>(1, s.tq * s.tk * std::max<std::int64_t>(1, s.d));
  return std::max<std::int64_t>(1, 65536 / work);
}

}  // namespace

void attention_forward(const AttentionShape& s, const float* q, const HeadStrides& qs,
                       const float* k, const HeadStrides& ks, const float* v, const HeadStrides& vs,
                       float* out, const HeadStrides& os, float* probs) {
  const ForwardArgs args{{&s, q, k, v, qs, ks, vs}, out, os, probs};
  const std::int64_t scratch = s.d * s.tk + 2 * s.tq * s.tk;
  parallel_for(s.b * s.h, head_grain(s), [&](std::int64_t begin, std::int64_t end) {
    forward_heads(args, thread_scratch(scratch), begin, end);
  });
}

void attention_backward(const AttentionShape& s, const float* q, const HeadStrides& qs,
                        const float* k, const HeadStrides& ks, const float* v,
                        const HeadStrides& vs, const float* probs, const float* dout,
                        const HeadStrides& dos, float* dq, const HeadStrides& dqs, float* dk,
                        const HeadStrides& dks, float* dv, const HeadStrides& dvs) {
  const BackwardArgs args{{&s, q, k, v, qs, ks, vs}, probs, dout, dos, dq, dk, dv, dqs, dks, dvs};
  const std::int64_t scratch = s.d * s.tk + 3 * s.tq * s.tk;
  parallel_for(s.b * s.h, head_grain(s), [&](std::int64_t begin, std::int64_t end) {
    backward_heads(args, thread_scratch(scratch), begin, end);
  });
}

}  // namespace rig::cpu
