#include "cpu/reduce.hpp"

#include <algorithm>
#include <array>
#include <cmath>

#include "cpu/parallel.hpp"
#include "cpu/simd.hpp"
#include "rig/kernel_attributes.hpp"

namespace rig::cpu {

namespace {

constexpr std::int64_t kGrain = 16384;

// Sum (or sum of squares) of a range: float lanes over blocks of 2048
// elements, the block sums accumulated in double (accurate to about 1e-7
// relative for any n, and as fast as a float sum).
template <int W>
struct RangeSum {
  using V = simd::Vec<W>;
  using F = typename V::F;
  static RIG_SIMD_INLINE void run(const float* x, std::int64_t n, bool squares, double* out) {
    constexpr std::int64_t kBlock = 2048;
    double total = 0.0;
    for (std::int64_t b = 0; b < n; b += kBlock) {
      const std::int64_t e = std::min(n, b + kBlock);
      F acc{};
      std::int64_t i = b;
      if (squares) {
        for (; i + W <= e; i += W) {
          const F v = V::load(x + i);
          acc += v * v;
        }
        if (i < e) {
          const F v = V::load_partial(x + i, e - i, 0.0F);
          acc += v * v;
        }
      } else {
        for (; i + W <= e; i += W) acc += V::load(x + i);
        if (i < e) acc += V::load_partial(x + i, e - i, 0.0F);
      }
      total += static_cast<double>(V::sum(acc));
    }
    *out = total;
  }
};

double sum_range(const float* x, std::int64_t n) {
  double total = 0.0;
  simd::dispatch<RangeSum>(x, n, false, &total);
  return total;
}

double sum_squares_range(const float* x, std::int64_t n) {
  double total = 0.0;
  simd::dispatch<RangeSum>(x, n, true, &total);
  return total;
}

// A fixed partition (independent of the thread count) keeps the result reproducible.
template <class Range>
double chunked_sum(const float* x, std::int64_t n, Range range) {
  constexpr int kMaxChunks = 64;
  const std::int64_t chunks = std::clamp<std::int64_t>((n + kGrain - 1) / kGrain, 1, kMaxChunks);
  const std::int64_t chunk = (n + chunks - 1) / chunks;
  std::array<double, kMaxChunks> partial{};
  parallel_for(chunks, 1, [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t c = begin; c < end; ++c) {
      const std::int64_t lo = std::min(n, c * chunk);
      const std::int64_t hi = std::min(n, lo + chunk);
      partial[static_cast<std::size_t>(c)] = range(x + lo, hi - lo);
    }
  });
  double total = 0.0;
  for (std::int64_t c = 0; c < chunks; ++c) total += partial[static_cast<std::size_t>(c)];
  return total;
}

// Rows of contiguous values (inner == 1): y[o] = scale * sum of row o.
template <int W>
struct RowSums {
  using V = simd::Vec<W>;
  static RIG_SIMD_INLINE void run(const float* x, float* y, std::int64_t rows, std::int64_t r,
                                  float scale) {
    for (std::int64_t o = 0; o < rows; ++o) {
      const float* row = x + o * r;
      typename V::F acc{};
      std::int64_t j = 0;
      for (; j + W <= r; j += W) acc += V::load(row + j);
      if (j < r) acc += V::load_partial(row + j, r - j, 0.0F);
      y[o] = V::sum(acc) * scale;
    }
  }
};

// y[i] = scale * sum_j x[j * inner + i] for i in [i0, i1).
RIG_CPU_KERNEL void column_sums(const float* x, float* y, std::int64_t r, std::int64_t inner,
                                std::int64_t i0, std::int64_t i1, float scale) {
  float* out = y + i0;
  const std::int64_t w = i1 - i0;
  std::fill(out, out + w, 0.0F);
  for (std::int64_t j = 0; j < r; ++j) {
    const float* row = x + j * inner + i0;
    for (std::int64_t i = 0; i < w; ++i) out[i] += row[i];
  }
  if (scale != 1.0F) {
    for (std::int64_t i = 0; i < w; ++i) out[i] *= scale;
  }
}

RIG_CPU_KERNEL void max_columns(const float* x, float* y, std::int64_t* index, std::int64_t r,
                                std::int64_t inner, std::int64_t i0, std::int64_t i1) {
  for (std::int64_t i = i0; i < i1; ++i) {
    y[i] = x[i];
    index[i] = 0;
  }
  for (std::int64_t j = 1; j < r; ++j) {
    const float* row = x + j * inner;
    for (std::int64_t i = i0; i < i1; ++i) {
      const float v = row[i];
      // Strictly greater keeps the first maximum; a NaN wins once and stays.
      const bool take = v > y[i] || (std::isnan(v) && !std::isnan(y[i]));
      y[i] = take ? v : y[i];
      index[i] = take ? j : index[i];
    }
  }
}

}  // namespace

double sum_all(const float* x, std::int64_t n) {
  return chunked_sum(x, n, sum_range);
}

double sum_squares(const float* x, std::int64_t n) {
  return chunked_sum(x, n, sum_squares_range);
}

void sum_axis(const float* x, float* y, std::int64_t outer, std::int64_t r, std::int64_t inner,
              float scale) {
  if (outer == 0 || inner == 0) return;
  if (r == 0) {
    std::fill(y, y + outer * inner, 0.0F);
    return;
  }
  if (inner == 1) {
    const std::int64_t grain = std::max<std::int64_t>(1, kGrain / r);
    parallel_for(outer, grain, [&](std::int64_t begin, std::int64_t end) {
      simd::dispatch<RowSums>(x + begin * r, y + begin, end - begin, r, scale);
    });
    return;
  }
  // Columns: split each outer slice's inner axis into blocks so that a
  // single [r, inner] reduction (outer == 1) is threaded too.
  constexpr std::int64_t kBlock = 256;
  const std::int64_t blocks = (inner + kBlock - 1) / kBlock;
  const std::int64_t grain = std::max<std::int64_t>(1, kGrain / (r * std::min(inner, kBlock)));
  parallel_for(outer * blocks, grain, [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t t = begin; t < end; ++t) {
      const std::int64_t o = t / blocks;
      const std::int64_t i0 = (t % blocks) * kBlock;
      const std::int64_t i1 = std::min(inner, i0 + kBlock);
      column_sums(x + o * r * inner, y + o * inner, r, inner, i0, i1, scale);
    }
  });
}

void max_axis(const float* x, float* y, std::int64_t* index, std::int64_t outer, std::int64_t r,
              std::int64_t inner) {
  if (outer == 0 || inner == 0 || r == 0) return;
  const std::int64_t grain = std::max<std::int64_t>(1, kGrain / (r * inner));
  parallel_for(outer, grain, [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t o = begin; o < end; ++o) {
      max_columns(x + o * r * inner, y + o * inner, index + o * inner, r, inner, 0, inner);
    }
  });
}

void max_axis_backward(const float* g, const std::int64_t* index, float* dx, std::int64_t outer,
                       std::int64_t r, std::int64_t inner) {
  const std::int64_t row = r * inner;
  parallel_for(outer, std::max<std::int64_t>(1, 16384 / std::max<std::int64_t>(1, row)),
               [&](std::int64_t begin, std::int64_t end) {
                 std::fill(dx + begin * row, dx + end * row, 0.0F);
                 for (std::int64_t o = begin; o < end; ++o) {
                   for (std::int64_t i = 0; i < inner; ++i) {
                     const std::int64_t k = o * inner + i;
                     dx[(o * r + index[k]) * inner + i] = g[k];
                   }
                 }
               });
}

}  // namespace rig::cpu
