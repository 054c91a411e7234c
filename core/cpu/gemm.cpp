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

void run_whole(const GemmProduct& p) {
  blas(p.m, p.n, p.k, p.alpha, p.a.data, p.a.ld, p.a.trans, p.b.data, p.b.ld, p.b.trans, p.beta,
       p.c, p.ldc);
}

// A product's C cut into `count` panels along its longer side, each a
// multiple of 16 rows or columns (the kernels' tiles).
struct Panels {
  bool rows = true;
  std::int64_t extent = 0, size = 0, count = 0;
};

Panels panels_of(const GemmProduct& p, int parts) {
  Panels panels;
  panels.rows = p.m >= p.n;
  panels.extent = panels.rows ? p.m : p.n;
  panels.size = ((panels.extent + parts - 1) / parts + 15) / 16 * 16;
  panels.count = (panels.extent + panels.size - 1) / panels.size;
  return panels;
}

void run_panel(const GemmProduct& p, const Panels& panels, std::int64_t index) {
  const std::int64_t lo = index * panels.size;
  const std::int64_t len = std::min(panels.extent, lo + panels.size) - lo;
  if (panels.rows) {
    const float* a = p.a.data + (p.a.trans ? lo : lo * p.a.ld);
    blas(len, p.n, p.k, p.alpha, a, p.a.ld, p.a.trans, p.b.data, p.b.ld, p.b.trans, p.beta,
         p.c + lo * p.ldc, p.ldc);
  } else {
    const float* b = p.b.data + (p.b.trans ? lo * p.b.ld : lo);
    blas(p.m, len, p.k, p.alpha, p.a.data, p.a.ld, p.a.trans, b, p.b.ld, p.b.trans, p.beta,
         p.c + lo, p.ldc);
  }
}

// A tall product with A transposed, like a weight gradient dY^T X with many
// more output rows than columns (the 8192 x 256 gradient of a shared
// embedding): oneDNN's kernels run it 12-20 % slower than its transpose
// C^T = X^T dY (measured single- and two-threaded on the Transformer's
// shapes), so that is computed into scratch and copied back transposed, a
// tiled pass that costs a few percent of the product.
bool tall_transposed_a(const GemmProduct& p) {
  return p.a.trans && !p.b.trans && p.m >= 8 * p.n && p.m * p.n * p.k >= (std::int64_t{1} << 24) &&
         (p.beta == 0.0F || p.beta == 1.0F);
}

void run_tall_transposed_a(const GemmProduct& p) {
  Tensor scratch = dnnl_util::buffer(static_cast<std::size_t>(p.n * p.m) * sizeof(float));
  auto* t = reinterpret_cast<float*>(scratch.raw_data());
  gemm({p.n, p.m, p.k, p.alpha, {p.b.data, p.b.ld, true}, {p.a.data, p.a.ld, false}, 0.0F, t, p.m});
  const Shape shape{p.m, p.n};
  const Strides c_strides{p.ldc, 1}, t_strides{1, p.m};
  if (p.beta == 0.0F) {
    copy_strided(shape, p.c, c_strides, DType::f32, t, t_strides, DType::f32);
  } else {
    add_strided(shape, p.c, c_strides, DType::f32, t, t_strides, DType::f32);
  }
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
  const GemmProduct product{m, n, k, alpha, a, b, beta, c, ldc};
  if (tall_transposed_a(product)) {
    run_tall_transposed_a(product);
    return;
  }
  const int threads = num_threads();
  if (threads == 1 || m * n * k < kSplitWork) {
    run_whole(product);
    return;
  }
  const Panels panels = panels_of(product, threads);
  FirstError errors;
  parallel_for(panels.count, 1, [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t p = begin; p < end; ++p) errors.run([&] { run_panel(product, panels, p); });
  });
  errors.rethrow();
}

void gemm_pair(const GemmProduct& first, const GemmProduct& second) {
  single_threaded_blas();
  const int threads = num_threads();
  const auto small = [](const GemmProduct& p) { return p.m * p.n * p.k < kSplitWork; };
  if (threads == 1 || small(first) || small(second) || tall_transposed_a(first) ||
      tall_transposed_a(second)) {
    gemm(first);
    gemm(second);
    return;
  }
  const int parts = (threads + 1) / 2;
  const Panels first_panels = panels_of(first, parts);
  const Panels second_panels = panels_of(second, parts);
  FirstError errors;
  parallel_for(first_panels.count + second_panels.count, 1,
               [&](std::int64_t begin, std::int64_t end) {
                 for (std::int64_t p = begin; p < end; ++p) {
                   errors.run([&] {
                     if (p < first_panels.count) {
                       run_panel(first, first_panels, p);
                     } else {
                       run_panel(second, second_panels, p - first_panels.count);
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
