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
#include <utility>
#include <vector>

#include "cpu/parallel.hpp"
#include "cpu/small_gemm_bf16.hpp"
#include "cpu/transpose_block.hpp"
#include "cpu/vec_math.hpp"
#include "rig/kernel_attributes.hpp"

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

// Per-thread working memory of the head kernels, kept between calls.
struct Scratch {
  std::vector<float> p, pd, dp;       // [tq x tk] each
  std::vector<float> a_t, b_t;        // transposed f32 operands
  std::vector<std::uint32_t> packed;  // bf16 pairs (small_gemm_bf16)

  static Scratch& of_this_thread(const AttentionShape& s) {
    thread_local Scratch scratch;
    const auto size = [](std::vector<float>& v, std::int64_t n) {
      if (v.size() < static_cast<std::size_t>(n)) v.resize(static_cast<std::size_t>(n));
    };
    const std::int64_t scores = s.tq * s.tk;
    size(scratch.p, scores);
    size(scratch.pd, scores);
    size(scratch.dp, scores);
    // The transposed operands: K or V [tk x d] and the weights [tq x tk].
    const std::int64_t operand = std::max(s.tk * s.d, scores);
    size(scratch.a_t, operand);
    size(scratch.b_t, operand);
    if (s.bf16_products) {
      const std::int64_t packed = std::max({small_gemm_bf16_scratch(s.tq, s.tk, s.d),
                                            small_gemm_bf16_scratch(s.tq, s.d, s.tk),
                                            small_gemm_bf16_scratch(s.tk, s.d, s.tq)});
      if (scratch.packed.size() < static_cast<std::size_t>(packed)) {
        scratch.packed.resize(static_cast<std::size_t>(packed));
      }
    }
    return scratch;
  }
};

// op(X) [rows x cols] as a dense f32 matrix and its leading dimension: X
// itself, or X (stored [cols x rows]) transposed into `scratch`.
[[gnu::always_inline]] inline std::pair<const float*, std::int64_t> dense(const SmallOperand& x,
                                                                          std::int64_t rows,
                                                                          std::int64_t cols,
                                                                          float* scratch) {
  if (!x.trans) return {x.data, x.ld};
  transpose(x.data, x.ld, cols, rows, scratch);
  return {scratch, cols};
}

// One per-head product C[m x n] = alpha op(A)[m x k] op(B)[k x n]. At bf16
// precision both operands are rounded (small_gemm_bf16 reads transposed
// operands in place); in f32 a transposed operand is transposed into scratch
// first, for the register-tiled kernel above.
[[gnu::always_inline]] inline void product(const AttentionShape& s, Scratch& scratch,
                                           std::int64_t m, std::int64_t n, std::int64_t k,
                                           float alpha, const SmallOperand& a,
                                           const SmallOperand& b, float* c, std::int64_t ldc) {
  if (s.bf16_products) {
    small_gemm_bf16(m, n, k, alpha, a, b, c, ldc, scratch.packed.data());
    return;
  }
  const auto [a_data, lda] = dense(a, m, k, scratch.a_t.data());
  const auto [b_data, ldb] = dense(b, k, n, scratch.b_t.data());
  gemm(m, n, k, alpha, a_data, lda, b_data, ldb, c, ldc);
}

struct ForwardArgs {
  Operands in;
  float* out;
  HeadStrides os;
  float* probs;
};

RIG_CPU_KERNEL void forward_heads(const ForwardArgs& a, std::int64_t begin, std::int64_t end) {
  const AttentionShape& s = *a.in.s;
  const std::int64_t tq = s.tq, tk = s.tk, d = s.d;
  Scratch& scratch = Scratch::of_this_thread(s);
  for (std::int64_t bh = begin; bh < end; ++bh) {
    const std::int64_t b = bh / s.h, h = bh % s.h;
    const float* q = a.in.q + at(a.in.qs, b, h);
    const float* k = a.in.k + at(a.in.ks, b, h);
    const float* v = a.in.v + at(a.in.vs, b, h);
    float* p = a.probs != nullptr ? a.probs + bh * tq * tk : scratch.p.data();
    // scores = scale q k^T
    product(s, scratch, tq, tk, d, s.scale, {q, a.in.qs.time}, {k, a.in.ks.time, true}, p, tk);
    for (std::int64_t i = 0; i < tq; ++i) {
      const std::uint8_t* mask =
          s.mask == nullptr
              ? nullptr
              : s.mask + b * s.mask_strides[0] + h * s.mask_strides[1] + i * s.mask_strides[2];
      softmax_row(p + i * tk, tk, key_limit(s, i), mask, s.mask_strides[3]);
    }
    const float* weights = p;
    if (s.keep != nullptr) {
      apply_keep(p, s.keep + bh * tq * tk, s.keep_scale, scratch.pd.data(), tq * tk);
      weights = scratch.pd.data();
    }
    product(s, scratch, tq, d, tk, 1.0F, {weights, tk}, {v, a.in.vs.time}, a.out + at(a.os, b, h),
            a.os.time);
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

RIG_CPU_KERNEL void backward_heads(const BackwardArgs& a, std::int64_t begin, std::int64_t end) {
  const AttentionShape& s = *a.in.s;
  const std::int64_t tq = s.tq, tk = s.tk, d = s.d;
  Scratch& scratch = Scratch::of_this_thread(s);
  float* dp = scratch.dp.data();
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
        apply_keep(p, keep, s.keep_scale, scratch.pd.data(), tq * tk);
        weights = scratch.pd.data();
      }
      product(s, scratch, tk, d, tq, 1.0F, {weights, tk, true}, {g, a.dos.time},
              a.dv + at(a.dvs, b, h), a.dvs.time);
    }
    if (a.dq == nullptr && a.dk == nullptr) continue;
    // dp = g v^T (through dropout), then the softmax backward in place:
    // ds = p (dp - <p, dp>) per row.
    product(s, scratch, tq, tk, d, 1.0F, {g, a.dos.time}, {v, a.in.vs.time, true}, dp, tk);
    if (keep != nullptr) apply_keep(dp, keep, s.keep_scale, dp, tq * tk);
    for (std::int64_t i = 0; i < tq; ++i) {
      float* row = dp + i * tk;
      const float* pr = p + i * tk;
      float dot = 0.0F;
      for (std::int64_t j = 0; j < tk; ++j) dot += pr[j] * row[j];
      for (std::int64_t j = 0; j < tk; ++j) row[j] = pr[j] * (row[j] - dot);
    }
    if (a.dq != nullptr) {  // dq = scale ds k
      product(s, scratch, tq, d, tk, s.scale, {dp, tk}, {k, a.in.ks.time}, a.dq + at(a.dqs, b, h),
              a.dqs.time);
    }
    if (a.dk != nullptr) {  // dk = scale ds^T q
      product(s, scratch, tk, d, tq, s.scale, {dp, tk, true}, {q, a.in.qs.time},
              a.dk + at(a.dks, b, h), a.dks.time);
    }
  }
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
  parallel_for(s.b * s.h, head_grain(s),
               [&](std::int64_t begin, std::int64_t end) { forward_heads(args, begin, end); });
}

void attention_backward(const AttentionShape& s, const float* q, const HeadStrides& qs,
                        const float* k, const HeadStrides& ks, const float* v,
                        const HeadStrides& vs, const float* probs, const float* dout,
                        const HeadStrides& dos, float* dq, const HeadStrides& dqs, float* dk,
                        const HeadStrides& dks, float* dv, const HeadStrides& dvs) {
  const BackwardArgs args{{&s, q, k, v, qs, ks, vs}, probs, dout, dos, dq, dk, dv, dqs, dks, dvs};
  parallel_for(s.b * s.h, head_grain(s),
               [&](std::int64_t begin, std::int64_t end) { backward_heads(args, begin, end); });
}

}  // namespace rig::cpu
