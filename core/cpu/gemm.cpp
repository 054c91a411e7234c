#include "cpu/gemm.hpp"

#include <cblas.h>

#include <algorithm>
#include <array>
#include <mutex>
#include <stdexcept>
#include <type_traits>

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

using Bf16 = std::uint16_t;  // bfloat16 bits

// A product as the kernels take it, its operands f32 or bfloat16.
template <class T>
struct Operand {
  const T* data = nullptr;
  std::int64_t ld = 0;
  bool trans = false;
};
template <class T>
struct Product {
  std::int64_t m = 0, n = 0, k = 0;
  float alpha = 1.0F;
  Operand<T> a, b;
  float beta = 0.0F;
  float* c = nullptr;
  std::int64_t ldc = 0;
};

Product<float> as_is(const GemmProduct& p) {
  if (p.a.data == nullptr || p.b.data == nullptr) {
    throw std::logic_error(
        "cpu::gemm: an operand given only rounded to bfloat16 at float32 precision");
  }
  return {p.m,    p.n, p.k,  p.alpha, {p.a.data, p.a.ld, p.a.trans}, {p.b.data, p.b.ld, p.b.trans},
          p.beta, p.c, p.ldc};
}

// C = beta C, for k == 0.
void scale_only(std::int64_t m, std::int64_t n, float beta, float* c, std::int64_t ldc) {
  for (std::int64_t i = 0; i < m; ++i) {
    float* row = c + i * ldc;
    if (beta == 0.0F) {
      std::fill(row, row + n, 0.0F);
    } else {
      for (std::int64_t j = 0; j < n; ++j) row[j] *= beta;
    }
  }
}

void kernel(const Product<float>& p) {
  if (gemm_dnnl(p.m, p.n, p.k, p.alpha, p.a.data, p.a.ld, p.a.trans, p.b.data, p.b.ld, p.b.trans,
                p.beta, p.c, p.ldc)) {
    return;
  }
  cblas_sgemm(CblasRowMajor, p.a.trans ? CblasTrans : CblasNoTrans,
              p.b.trans ? CblasTrans : CblasNoTrans, static_cast<blasint>(p.m),
              static_cast<blasint>(p.n), static_cast<blasint>(p.k), p.alpha, p.a.data,
              static_cast<blasint>(std::max<std::int64_t>(1, p.a.ld)), p.b.data,
              static_cast<blasint>(std::max<std::int64_t>(1, p.b.ld)), p.beta, p.c,
              static_cast<blasint>(std::max<std::int64_t>(1, p.ldc)));
}

void kernel(const Product<Bf16>& p) {
  gemm_dnnl_bf16(p.m, p.n, p.k, p.alpha, p.a.data, p.a.ld, p.a.trans, p.b.data, p.b.ld, p.b.trans,
                 p.beta, p.c, p.ldc);
}

// One product on the calling thread.
template <class T>
void blas(const Product<T>& p) {
  if (p.m == 0 || p.n == 0) return;
  if (p.k == 0) return scale_only(p.m, p.n, p.beta, p.c, p.ldc);
  kernel(p);
}

// The matrix an operand stores: op(x) is [rows, cols], so x holds [cols, rows] when transposed.
struct Stored {
  std::int64_t rows = 0, cols = 0;
};
Stored stored_shape(const GemmOperand& x, std::int64_t rows, std::int64_t cols) {
  return x.trans ? Stored{cols, rows} : Stored{rows, cols};
}

// The stored matrix at `src` (leading dimension ld) converted into a dense
// [rows, cols] `dst` (bf16 rounded to nearest even, or widened back to f32).
void convert(Stored s, const void* src, std::int64_t ld, DType from, void* dst, DType to) {
  copy_strided({s.rows, s.cols}, dst, {s.cols, 1}, to, src, {ld, 1}, from);
}

// bfloat16 precision: the operands of one call rounded to bf16 (as bits for
// the bf16 kernels, T = Bf16, or as f32 values, T = float), each distinct
// operand once: a layer's dX = dY W and dW = dY^T X share dY.
template <class T>
class RoundedOperands {
 public:
  // The copy keeps x's orientation, densely packed.
  Operand<T> get(const GemmOperand& x, std::int64_t rows, std::int64_t cols) {
    const Stored s = stored_shape(x, rows, cols);
    if constexpr (std::is_same_v<T, Bf16>) {
      if (x.bf16 != nullptr) return {x.bf16, s.cols, x.trans};
    }
    for (std::size_t i = 0; i < count_; ++i) {
      const Entry& e = entries_[i];
      if (e.source == x.data && e.bf16 == x.bf16 && e.ld == x.ld && e.shape.rows == s.rows &&
          e.shape.cols == s.cols) {
        return {e.storage.template as<const T>(), s.cols, x.trans};
      }
    }
    Entry& e = entries_.at(count_++);
    e = {x.data, x.bf16, x.ld, s,
         dnnl_util::buffer(static_cast<std::size_t>(s.rows * s.cols) * sizeof(T))};
    void* out = e.storage.data();
    if constexpr (std::is_same_v<T, Bf16>) {
      convert(s, x.data, x.ld, DType::f32, out, DType::bf16);
    } else if (x.bf16 != nullptr) {
      convert(s, x.bf16, s.cols, DType::bf16, out, DType::f32);
    } else {
      // Without bf16 kernels: rounded to bf16, then widened back (exactly) for the f32 GEMM.
      const Scratch bits = dnnl_util::buffer(static_cast<std::size_t>(s.rows * s.cols) * 2);
      convert(s, x.data, x.ld, DType::f32, bits.data(), DType::bf16);
      convert(s, bits.data(), s.cols, DType::bf16, out, DType::f32);
    }
    return {reinterpret_cast<const T*>(out), s.cols, x.trans};
  }

  Product<T> of(const GemmProduct& p) {
    return {p.m, p.n, p.k, p.alpha, get(p.a, p.m, p.k), get(p.b, p.k, p.n), p.beta, p.c, p.ldc};
  }

 private:
  struct Entry {
    const float* source = nullptr;
    const Bf16* bf16 = nullptr;
    std::int64_t ld = 0;
    Stored shape;
    Scratch storage;  // the rounded copy
  };
  std::array<Entry, 4> entries_;  // two products' operands
  std::size_t count_ = 0;
};

// Whether a product at bfloat16 precision runs on the bf16 kernels (else its
// rounded operands go through the f32 GEMM: the same products, no faster).
bool native_bf16(const GemmProduct& p) {
  return gemm_dnnl_bf16_available() && p.m * p.n * p.k >= kGemmDnnlMinWork;
}

// Calls run(products...) at `precision`: as they are, or with their operands
// rounded to bfloat16.
template <class Run, class... Products>
void at_precision(GemmPrecision precision, Run&& run, const Products&... products) {
  if (precision == GemmPrecision::f32) {
    run(as_is(products)...);
  } else if ((native_bf16(products) && ...)) {
    RoundedOperands<Bf16> operands;
    run(operands.of(products)...);
  } else {
    RoundedOperands<float> operands;
    run(operands.of(products)...);
  }
}

std::int64_t offset(const GemmBatchOffsets& o, const std::int64_t* strides, std::int64_t index) {
  std::int64_t result = 0;
  for (int d = o.ndim - 1; d >= 0; --d) {
    result += (index % o.shape[d]) * strides[d];
    index /= o.shape[d];
  }
  return result;
}

// A product's C cut into `count` panels along its longer side, each a
// multiple of 16 rows or columns (the kernels' tiles).
struct Panels {
  bool rows = true;
  std::int64_t extent = 0, size = 0, count = 0;
};

template <class T>
Panels panels_of(const Product<T>& p, int parts) {
  Panels panels;
  panels.rows = p.m >= p.n;
  panels.extent = panels.rows ? p.m : p.n;
  panels.size = ((panels.extent + parts - 1) / parts + 15) / 16 * 16;
  panels.count = (panels.extent + panels.size - 1) / panels.size;
  return panels;
}

template <class T>
void run_panel(const Product<T>& p, const Panels& panels, std::int64_t index) {
  const std::int64_t lo = index * panels.size;
  const std::int64_t len = std::min(panels.extent, lo + panels.size) - lo;
  Product<T> panel = p;
  if (panels.rows) {
    panel.m = len;
    panel.a.data = p.a.data + (p.a.trans ? lo : lo * p.a.ld);
    panel.c = p.c + lo * p.ldc;
  } else {
    panel.n = len;
    panel.b.data = p.b.data + (p.b.trans ? lo * p.b.ld : lo);
    panel.c = p.c + lo;
  }
  blas(panel);
}

// One product, split into panels across the pool when it is large enough.
template <class T>
void run_split(const Product<T>& p) {
  const int threads = num_threads();
  if (threads == 1 || p.m * p.n * p.k < kSplitWork) {
    blas(p);
    return;
  }
  const Panels panels = panels_of(p, threads);
  FirstError errors;
  parallel_for(panels.count, 1, [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t i = begin; i < end; ++i) errors.run([&] { run_panel(p, panels, i); });
  });
  errors.rethrow();
}

// Two products at once, each cut into panels for half the pool.
template <class T>
void run_pair(const Product<T>& first, const Product<T>& second) {
  const int parts = (num_threads() + 1) / 2;
  const Panels first_panels = panels_of(first, parts);
  const Panels second_panels = panels_of(second, parts);
  FirstError errors;
  parallel_for(first_panels.count + second_panels.count, 1,
               [&](std::int64_t begin, std::int64_t end) {
                 for (std::int64_t i = begin; i < end; ++i) {
                   errors.run([&] {
                     if (i < first_panels.count) {
                       run_panel(first, first_panels, i);
                     } else {
                       run_panel(second, second_panels, i - first_panels.count);
                     }
                   });
                 }
               });
  errors.rethrow();
}

// A tall product with A transposed, like a weight gradient dY^T X with many
// more output rows than columns (the 8192 x 256 gradient of a shared
// embedding): oneDNN's kernels run it 12-20 % slower than its transpose
// C^T = X^T dY (measured single- and two-threaded on the Transformer's
// shapes), so that is computed into scratch and copied back transposed, a
// tiled pass that costs a few percent of the product.
template <class T>
bool tall_transposed_a(const Product<T>& p) {
  return p.a.trans && !p.b.trans && p.m >= 8 * p.n && p.m * p.n * p.k >= (std::int64_t{1} << 24) &&
         (p.beta == 0.0F || p.beta == 1.0F);
}

template <class T>
void run_tall_transposed_a(const Product<T>& p) {
  const Scratch scratch = dnnl_util::buffer(static_cast<std::size_t>(p.n * p.m) * sizeof(float));
  auto* t = scratch.as<float>();
  run_split(Product<T>{
      p.n, p.m, p.k, p.alpha, {p.b.data, p.b.ld, true}, {p.a.data, p.a.ld, false}, 0.0F, t, p.m});
  const Shape shape{p.m, p.n};
  const Strides c_strides{p.ldc, 1}, t_strides{1, p.m};
  if (p.beta == 0.0F) {
    copy_strided(shape, p.c, c_strides, DType::f32, t, t_strides, DType::f32);
  } else {
    add_strided(shape, p.c, c_strides, DType::f32, t, t_strides, DType::f32);
  }
}

// One product: split across the pool, or the tall transposed way.
template <class T>
void run_one(const Product<T>& p) {
  if (tall_transposed_a(p)) {
    run_tall_transposed_a(p);
  } else {
    run_split(p);
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
          const GemmOperand& b, float beta, float* c, std::int64_t ldc, GemmPrecision precision) {
  single_threaded_blas();
  at_precision(
      precision, [](const auto& p) { run_one(p); },
      GemmProduct{m, n, k, alpha, a, b, beta, c, ldc});
}

void gemm_pair(const GemmProduct& first, const GemmProduct& second, GemmPrecision precision) {
  single_threaded_blas();
  // Both products' operands are rounded first (a shared one once), then run
  // together, or one after the other when small or tall.
  at_precision(
      precision,
      [](const auto& p, const auto& q) {
        const auto small = [](const auto& x) { return x.m * x.n * x.k < kSplitWork; };
        if (num_threads() == 1 || small(p) || small(q) || tall_transposed_a(p) ||
            tall_transposed_a(q)) {
          run_one(p);
          run_one(q);
        } else {
          run_pair(p, q);
        }
      },
      first, second);
}

void round_bf16(const GemmOperand& x, std::int64_t rows, std::int64_t cols, std::uint16_t* dst) {
  convert(stored_shape(x, rows, cols), x.data, x.ld, DType::f32, dst, DType::bf16);
}

void gemm_batched(std::int64_t batch, std::int64_t m, std::int64_t n, std::int64_t k, float alpha,
                  const GemmOperand& a, const GemmOperand& b, const GemmBatchOffsets& offsets,
                  float beta, float* c, std::int64_t ldc, std::int64_t c_stride,
                  GemmPrecision precision) {
  single_threaded_blas();
  const int threads = num_threads();
  const std::int64_t work = m * n * k;
  const auto product = [&](std::int64_t i) {
    return GemmProduct{m,
                       n,
                       k,
                       alpha,
                       {a.data + offsets.offset_a(i), a.ld, a.trans},
                       {b.data + offsets.offset_b(i), b.ld, b.trans},
                       beta,
                       c + i * c_stride,
                       ldc};
  };
  if (batch < 2 * threads && work >= kSplitWork) {
    // Few large products: split each one across the pool.
    for (std::int64_t i = 0; i < batch; ++i) gemm(product(i), precision);
    return;
  }
  const std::int64_t grain =
      std::max<std::int64_t>(1, kSplitWork / std::max<std::int64_t>(1, work) / 4);
  FirstError errors;
  parallel_for(batch, grain, [&](std::int64_t begin, std::int64_t end) {
    errors.run([&] {
      for (std::int64_t i = begin; i < end; ++i) {
        at_precision(
            precision, [](const auto& p) { blas(p); }, product(i));
      }
    });
  });
  errors.rethrow();
}

}  // namespace rig::cpu
