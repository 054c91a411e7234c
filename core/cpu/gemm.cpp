#include "cpu/gemm.hpp"

#include <cblas.h>

#include <algorithm>
#include <mutex>

#include "cpu/dnnl_util.hpp"
#include "cpu/gemm_dnnl.hpp"
#include "cpu/parallel.hpp"
#include "cpu/tensor_copy.hpp"

namespace rig::cpu {

namespace {

// Products below this many multiply-adds run on one thread: splitting them
// costs more in wake-ups and smaller panels than it gains.
constexpr std::int64_t kSplitWork = std::int64_t{1} << 18;

void single_threaded_blas() {
  static std::once_flag once;
  std::call_once(once, [] { openblas_set_num_threads(1); });
}

void blas(std::int64_t m, std::int64_t n, std::int64_t k, float alpha, const float* a,
          std::int64_t lda, bool ta, const float* b, std::int64_t ldb, bool tb, float beta,
          float* c, std::int64_t ldc) {
  if (m == 0 || n == 0) return;
  if (k == 0) {
    for (std::int64_t i = 0; i < m; ++i) {
      float* row = c + i * ldc;
      if (beta == 0.0F) {
        std::fill(row, row + n, 0.0F);
      } else {
        for (std::int64_t j = 0; j < n; ++j) row[j] *= beta;
      }
    }
    return;
  }
  if (gemm_dnnl(m, n, k, alpha, a, lda, ta, b, ldb, tb, beta, c, ldc)) return;
  cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans,
              static_cast<blasint>(m), static_cast<blasint>(n), static_cast<blasint>(k), alpha, a,
              static_cast<blasint>(std::max<std::int64_t>(1, lda)), b,
              static_cast<blasint>(std::max<std::int64_t>(1, ldb)), beta, c,
              static_cast<blasint>(std::max<std::int64_t>(1, ldc)));
}

std::int64_t offset(const GemmBatchOffsets& o, const std::int64_t* strides, std::int64_t index) {
  std::int64_t result = 0;
  for (int d = o.ndim - 1; d >= 0; --d) {
    result += (index % o.shape[d]) * strides[d];
    index /= o.shape[d];
  }
  return result;
}

// A tall product with A transposed, like a weight gradient dY^T X with many
// more output rows than columns (the 8192 x 256 gradient of a shared
// embedding): oneDNN's kernels run it 12-20 % slower than its transpose
// C^T = X^T dY (measured single- and two-threaded on the Transformer's
// shapes), so that is computed into scratch and copied back transposed, a
// tiled pass that costs a few percent of the product.
bool tall_transposed_a(std::int64_t m, std::int64_t n, std::int64_t k, const GemmOperand& a,
                       const GemmOperand& b, float beta) {
  return a.trans && !b.trans && m >= 8 * n && m * n * k >= (std::int64_t{1} << 24) &&
         (beta == 0.0F || beta == 1.0F);
}

}  // namespace

std::int64_t GemmBatchOffsets::offset_a(std::int64_t index) const {
  return offset(*this, a_strides, index);
}
std::int64_t GemmBatchOffsets::offset_b(std::int64_t index) const {
  return offset(*this, b_strides, index);
}

void gemm(std::int64_t m, std::int64_t n, std::int64_t k, float alpha, const GemmOperand& a,
          const GemmOperand& b, float beta, float* c, std::int64_t ldc) {
  single_threaded_blas();
  if (tall_transposed_a(m, n, k, a, b, beta)) {
    Tensor scratch = dnnl_util::buffer(static_cast<std::size_t>(n * m) * sizeof(float));
    auto* t = reinterpret_cast<float*>(scratch.raw_data());
    gemm(n, m, k, alpha, {b.data, b.ld, true}, {a.data, a.ld, false}, 0.0F, t, m);
    const Shape shape{m, n};
    const Strides c_strides{ldc, 1}, t_strides{1, m};
    if (beta == 0.0F) {
      copy_strided(shape, c, c_strides, DType::f32, t, t_strides, DType::f32);
    } else {
      add_strided(shape, c, c_strides, DType::f32, t, t_strides, DType::f32);
    }
    return;
  }
  const int threads = num_threads();
  if (threads == 1 || m * n * k < kSplitWork) {
    blas(m, n, k, alpha, a.data, a.ld, a.trans, b.data, b.ld, b.trans, beta, c, ldc);
    return;
  }
  // Panels of C, one per thread, aligned to 16 rows/columns (BLAS kernel tiles).
  const bool split_rows = m >= n;
  const std::int64_t extent = split_rows ? m : n;
  std::int64_t panel = (extent + threads - 1) / threads;
  panel = (panel + 15) / 16 * 16;
  const std::int64_t panels = (extent + panel - 1) / panel;
  FirstError errors;
  parallel_for(panels, 1, [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t p = begin; p < end; ++p) {
      const std::int64_t lo = p * panel;
      const std::int64_t len = std::min(extent, lo + panel) - lo;
      errors.run([&] {
        if (split_rows) {
          const float* ap = a.data + (a.trans ? lo : lo * a.ld);
          blas(len, n, k, alpha, ap, a.ld, a.trans, b.data, b.ld, b.trans, beta, c + lo * ldc, ldc);
        } else {
          const float* bp = b.data + (b.trans ? lo * b.ld : lo);
          blas(m, len, k, alpha, a.data, a.ld, a.trans, bp, b.ld, b.trans, beta, c + lo, ldc);
        }
      });
    }
  });
  errors.rethrow();
}

void gemm_batched(std::int64_t batch, std::int64_t m, std::int64_t n, std::int64_t k, float alpha,
                  const GemmOperand& a, const GemmOperand& b, const GemmBatchOffsets& offsets,
                  float beta, float* c, std::int64_t ldc, std::int64_t c_stride) {
  single_threaded_blas();
  const int threads = num_threads();
  const std::int64_t work = m * n * k;
  if (batch < 2 * threads && work >= kSplitWork) {
    // Few large products: split each one across the pool.
    for (std::int64_t i = 0; i < batch; ++i) {
      gemm(m, n, k, alpha, {a.data + offsets.offset_a(i), a.ld, a.trans},
           {b.data + offsets.offset_b(i), b.ld, b.trans}, beta, c + i * c_stride, ldc);
    }
    return;
  }
  const std::int64_t grain =
      std::max<std::int64_t>(1, kSplitWork / std::max<std::int64_t>(1, work) / 4);
  FirstError errors;
  parallel_for(batch, grain, [&](std::int64_t begin, std::int64_t end) {
    errors.run([&] {
      for (std::int64_t i = begin; i < end; ++i) {
        blas(m, n, k, alpha, a.data + offsets.offset_a(i), a.ld, a.trans,
             b.data + offsets.offset_b(i), b.ld, b.trans, beta, c + i * c_stride, ldc);
      }
    });
  });
  errors.rethrow();
}

}  // namespace rig::cpu
