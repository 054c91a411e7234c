// Conformance of the CUDA back end's entry points (core/cuda/backend,
// KernelBackend) with the CPU back end: every composed entry point runs on
// the SIMT-emulated device (cuda::make_emulated_backend: the same
// KernelBackend, kernels in the emulator, cuBLASLt interpreted on the CPU)
// and on backend::cpu_backend() with the same random inputs (fixed seeds),
// and the results are compared bit for bit where the kernels' headers say
// they equal the CPU's, else within the tolerance stated at the test.
// Shapes are tiny: the emulator runs one fiber per GPU thread. The same
// tests run on a GPU's back end in rig_gpu_tests (tests/gpu/test_gpu_backend.cpp).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <new>
#include <optional>
#include <random>
#include <stdexcept>
#include <string>
#include <tuple>
#include <vector>

#include "backend/backend.hpp"
#include "backend/strided_plan.hpp"
#include "cuda/emulated/emulated_device.hpp"
#ifdef RIG_KERNEL_BACKEND_ON_GPU
#include "../gpu/gpu_test.hpp"
#endif
#include "rig/half.hpp"

namespace rig {
namespace {

using backend::Backend;

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

Backend& cpu() {
  return backend::cpu_backend();
}

#ifdef RIG_KERNEL_BACKEND_ON_GPU
// tests/gpu/test_gpu_backend.cpp: the same tests on the GPU's back end.
Backend& emu() {
  return backend::cuda_backend(rig_gpu_test::kDevice);
}
// Each test skips, saying why, where no GPU can be used: TEST with the GPU
// tests' fixture as its base (what TEST_F expands to).
#undef TEST
#define TEST(suite, name)                           \
  GTEST_TEST_(suite, name, ::rig_gpu_test::GpuTest, \
              ::testing::internal::GetTypeId<::rig_gpu_test::GpuTest>())
#else
Backend& emu() {
  static const std::unique_ptr<Backend> backend = cuda::make_emulated_backend(0);
  return *backend;
}
#endif

// The back ends whose 16-bit convolutions are checked: the emulator both with
// its device's 16-bit convolutions and without them (the f32 ones on f32
// copies, as for a shape cuDNN does not plan); the GPU as it is.
std::vector<Backend*> conv16_backends() {
#ifdef RIG_KERNEL_BACKEND_ON_GPU
  return {&emu()};
#else
  static const std::unique_ptr<Backend> f32_only =
      cuda::make_emulated_backend(0, cuda::EmulatedConvolutions::f32_only);
  return {&emu(), f32_only.get()};
#endif
}

// Outputs start as 0xFF bytes (NaN floats, -1 integers) on both back ends,
// so an element that one of them fails to write shows up.
template <class T>
std::vector<T> poisoned(std::size_t n) {
  std::vector<T> v(n);
  if (n != 0) std::memset(static_cast<void*>(v.data()), 0xFF, n * sizeof(T));
  return v;
}

// A buffer of the emulated device (its memory pool) holding a copy of host data.
template <class T>
class Dev {
 public:
  explicit Dev(const std::vector<T>& host) : n_(host.size()) {
    block_ = emu().memory(Device::cuda(0)).allocate(std::max<std::size_t>(bytes(), 1));
    emu().from_host(block_.data, host.data(), bytes());
  }
  explicit Dev(std::size_t n) : Dev(poisoned<T>(n)) {}
  ~Dev() { emu().memory(Device::cuda(0)).deallocate(block_); }
  Dev(const Dev&) = delete;
  Dev& operator=(const Dev&) = delete;

  T* get() const { return reinterpret_cast<T*>(block_.data); }
  std::vector<T> host() const {
    std::vector<T> v(n_);
    emu().to_host(v.data(), block_.data, bytes());
    return v;
  }

 private:
  std::size_t bytes() const { return n_ * sizeof(T); }
  std::size_t n_ = 0;
  backend::Block block_;
};

std::vector<float> uniform(std::size_t n, std::uint32_t seed, float lo = -1.0F, float hi = 1.0F) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(n);
  for (float& f : v) f = dist(gen);
  return v;
}

template <class T>
std::vector<T> integers(std::size_t n, std::uint32_t seed, std::int64_t lo, std::int64_t hi) {
  std::mt19937 gen(seed);
  std::uniform_int_distribution<std::int64_t> dist(lo, hi);
  std::vector<T> v(n);
  for (T& x : v) x = static_cast<T>(dist(gen));
  return v;
}

float round_bf16(float x) {
  return bfloat16_bits_to_float(float_to_bfloat16_bits(x));
}

// |got - want| <= abs_tol + rel_tol |want|; equal values (infinities) and two NaNs pass.
::testing::AssertionResult close(const std::vector<float>& got, const std::vector<float>& want,
                                 float abs_tol, float rel_tol) {
  if (got.size() != want.size()) {
    return ::testing::AssertionFailure() << "sizes " << got.size() << " and " << want.size();
  }
  for (std::size_t i = 0; i < got.size(); ++i) {
    const float a = got[i], b = want[i];
    if (a == b || (std::isnan(a) && std::isnan(b))) continue;
    if (!std::isfinite(a) || !std::isfinite(b) ||
        std::fabs(a - b) > abs_tol + rel_tol * std::fabs(b)) {
      return ::testing::AssertionFailure()
             << "element " << i << ": got " << a << ", want " << b << " (diff " << a - b << ")";
    }
  }
  return ::testing::AssertionSuccess();
}

template <class T>
::testing::AssertionResult same(const std::vector<T>& got, const std::vector<T>& want) {
  if (got.size() != want.size()) {
    return ::testing::AssertionFailure() << "sizes " << got.size() << " and " << want.size();
  }
  for (std::size_t i = 0; i < got.size(); ++i) {
    if (std::memcmp(&got[i], &want[i], sizeof(T)) != 0) {
      if constexpr (sizeof(T) == 1) {
        return ::testing::AssertionFailure()
               << "element " << i << ": got " << int{got[i]} << ", want " << int{want[i]};
      } else {
        return ::testing::AssertionFailure()
               << "element " << i << ": got " << got[i] << ", want " << want[i];
      }
    }
  }
  return ::testing::AssertionSuccess();
}

// Byte buffers of DTYPE equal element by element, any NaN equal to any NaN:
// the GPU's conversions and arithmetic return its canonical NaN (all payload
// bits set) where the CPU keeps the operand's payload.
::testing::AssertionResult same_values(DType dtype, const std::vector<std::uint8_t>& got,
                                       const std::vector<std::uint8_t>& want) {
  const std::size_t size = dtype_size(dtype);
  if (got.size() != want.size()) {
    return ::testing::AssertionFailure() << "sizes " << got.size() << " and " << want.size();
  }
  const auto is_nan = [&](const std::uint8_t* at) {
    switch (dtype) {
      case DType::f32: {
        std::uint32_t b = 0;
        std::memcpy(&b, at, 4);
        return (b & 0x7F800000U) == 0x7F800000U && (b & 0x007FFFFFU) != 0;
      }
      case DType::f16: {
        std::uint16_t b = 0;
        std::memcpy(&b, at, 2);
        return (b & 0x7C00U) == 0x7C00U && (b & 0x03FFU) != 0;
      }
      case DType::bf16: {
        std::uint16_t b = 0;
        std::memcpy(&b, at, 2);
        return (b & 0x7F80U) == 0x7F80U && (b & 0x007FU) != 0;
      }
      default:
        return false;
    }
  };
  for (std::size_t i = 0; i < got.size(); i += size) {
    const std::uint8_t* g = got.data() + i;
    const std::uint8_t* w = want.data() + i;
    if (std::memcmp(g, w, size) == 0 || (is_nan(g) && is_nan(w))) continue;
    return ::testing::AssertionFailure()
           << dtype_name(dtype) << " element " << i / size << " differs (byte " << i << ")";
  }
  return ::testing::AssertionSuccess();
}

// ---- Matrix products -------------------------------------------------------------------

// A matrix operand over its own host storage.
struct Mat {
  std::vector<float> data;
  Shape shape;
  Strides strides;
  bool transpose = false;
};

Mat dense_mat(const Shape& shape, std::uint32_t seed, bool transpose = false) {
  return {uniform(static_cast<std::size_t>(shape_numel(shape)), seed), shape,
          contiguous_strides(shape), transpose};
}

// A strided view over `storage` floats of random data.
Mat view_mat(std::size_t storage, const Shape& shape, const Strides& strides, std::uint32_t seed,
             bool transpose = false) {
  return {uniform(storage, seed), shape, strides, transpose};
}

// op(x)[i, j] of batch element `at` (indices over the output's batch axes).
float element(const Mat& x, const std::vector<std::int64_t>& at, std::int64_t i, std::int64_t j) {
  const std::size_t nd = x.shape.size();
  const std::size_t lead = at.size() - (nd - 2);
  std::int64_t off = 0;
  for (std::size_t d = 0; d + 2 < nd; ++d) {
    if (x.shape[d] != 1) off += at[lead + d] * x.strides[d];
  }
  const std::int64_t r = x.transpose ? j : i, c = x.transpose ? i : j;
  off += r * x.strides[nd - 2] + c * x.strides[nd - 1];
  return x.data[static_cast<std::size_t>(off)];
}

// The product by definition, in f64 (operands rounded to bf16 at bf16 precision).
std::vector<float> naive_matmul(const Mat& a, const Mat& b, const Shape& out_shape,
                                MatmulPrecision precision) {
  const std::size_t rank = out_shape.size();
  const std::int64_t m = out_shape[rank - 2], n = out_shape[rank - 1];
  const std::int64_t k = a.shape[a.shape.size() - (a.transpose ? 2 : 1)];
  const Shape batch(out_shape.begin(), out_shape.end() - 2);
  std::vector<float> out;
  std::vector<std::int64_t> at(batch.size(), 0);
  auto op = [&](float x) { return precision == MatmulPrecision::bf16 ? round_bf16(x) : x; };
  for (std::int64_t e = 0; e < shape_numel(batch); ++e) {
    for (std::int64_t i = 0; i < m; ++i) {
      for (std::int64_t j = 0; j < n; ++j) {
        double total = 0.0;
        for (std::int64_t t = 0; t < k; ++t) {
          total += double{op(element(a, at, i, t))} * double{op(element(b, at, t, j))};
        }
        out.push_back(static_cast<float>(total));
      }
    }
    for (std::size_t d = batch.size(); d-- > 0;) {
      if (++at[d] < batch[d]) break;
      at[d] = 0;
    }
  }
  return out;
}

// f32 sums of at most 16 products of values in [-1, 1]: the order of the
// additions (and bf16 products are exact in f32) leaves about 1e-6.
constexpr float kGemmAbs = 1e-5F, kGemmRel = 1e-5F;

void check_matmul(const Mat& a, const Mat& b, const Shape& out_shape) {
  for (const MatmulPrecision precision : {MatmulPrecision::f32, MatmulPrecision::bf16}) {
    SCOPED_TRACE(precision == MatmulPrecision::f32 ? "f32" : "bf16");
    const auto count = static_cast<std::size_t>(shape_numel(out_shape));
    std::vector<float> want = poisoned<float>(count);
    cpu().matmul({a.data.data(), a.shape, a.strides, a.transpose},
                 {b.data.data(), b.shape, b.strides, b.transpose}, want.data(), out_shape,
                 precision);
    const Dev<float> da(a.data), db(b.data), out(count);
    emu().matmul({da.get(), a.shape, a.strides, a.transpose},
                 {db.get(), b.shape, b.strides, b.transpose}, out.get(), out_shape, precision);
    const std::vector<float> got = out.host();
    EXPECT_TRUE(close(got, want, kGemmAbs, kGemmRel)) << "against the CPU back end";
    EXPECT_TRUE(close(got, naive_matmul(a, b, out_shape, precision), kGemmAbs, kGemmRel))
        << "against the definition";
  }
}

// The device's memory for the message of an allocation that fails
// (cudaMemGetInfo on a GPU; RIG_CUDA_EMULATOR_MEMORY_MB, 80 GiB unset, on the
// emulator), and a request beyond it refused as std::bad_alloc, after which
// the pool serves as before.
TEST(KernelBackendMemory, KnowsTheDevicesSizeAndRefusesMoreThanIt) {
  backend::MemoryPool& pool = emu().memory(Device::cuda(0));
  const std::optional<backend::DeviceCapacity> capacity = pool.capacity();
  ASSERT_TRUE(capacity.has_value());
  EXPECT_GT(capacity->total, std::size_t{1} << 30U);
  EXPECT_LE(capacity->available, capacity->total);
  EXPECT_THROW((void)pool.allocate(2 * capacity->total), std::bad_alloc);
  const backend::Block block = pool.allocate(4096);
  EXPECT_NE(block.data, nullptr);
  pool.deallocate(block);
}

TEST(KernelBackendMatmul, BroadcastBatchOnEitherSide) {
  // a's batch [2, 1] against b's [3]: out [2, 3, 3, 5].
  check_matmul(dense_mat({2, 1, 3, 4}, 1), dense_mat({3, 4, 5}, 2), {2, 3, 3, 5});
  // a without batch axes, b batched (not the fold: b is not shared).
  check_matmul(dense_mat({3, 4}, 3), dense_mat({2, 4, 5}, 4), {2, 3, 5});
  // b's batch broadcast inside a's.
  check_matmul(dense_mat({2, 3, 3, 4}, 5), dense_mat({2, 1, 4, 5}, 6), {2, 3, 3, 5});
}

TEST(KernelBackendMatmul, TransposedOperands) {
  check_matmul(dense_mat({2, 4, 3}, 7, true), dense_mat({2, 4, 5}, 8), {2, 3, 5});
  check_matmul(dense_mat({2, 3, 4}, 9), dense_mat({2, 5, 4}, 10, true), {2, 3, 5});
  check_matmul(dense_mat({2, 4, 3}, 11, true), dense_mat({1, 5, 4}, 12, true), {2, 3, 5});
}

TEST(KernelBackendMatmul, NonContiguousOperandIsCopied) {
  // Every other column: neither row- nor column-major, the backend copies.
  check_matmul(view_mat(48, {2, 3, 4}, {24, 8, 2}, 13), dense_mat({2, 4, 5}, 14), {2, 3, 5});
  // A transposed view of b (column-major matrices, read in place) with a
  // gap between batches, and a permuted batch axis of a.
  check_matmul(view_mat(72, {3, 2, 4}, {4, 36, 1}, 15), view_mat(60, {3, 4, 5}, {20, 1, 4}, 16),
               {3, 2, 5});
}

TEST(KernelBackendMatmul, BatchAxesThatDoNotMerge) {
  // Heads split from a [B, T, H, D] tensor, viewed as [B, H, T, D]: B and H
  // do not merge into one batch stride. One batched product over the longer
  // axis, a loop over the other: B (3) batched, H (2) looped, then H (3)
  // batched, B (2) looped; the output's batch strides follow.
  check_matmul(view_mat(120, {3, 2, 4, 5}, {40, 5, 10, 1}, 37), dense_mat({3, 2, 5, 6}, 38),
               {3, 2, 4, 6});
  check_matmul(view_mat(120, {2, 3, 4, 5}, {60, 5, 15, 1}, 39), dense_mat({2, 3, 5, 6}, 40),
               {2, 3, 4, 6});
  // Both operands so, b transposed ([B, T, H, D] keys read as K^T).
  check_matmul(view_mat(120, {3, 2, 4, 5}, {40, 5, 10, 1}, 41),
               view_mat(120, {3, 2, 4, 5}, {40, 5, 10, 1}, 42, true), {3, 2, 4, 4});
}

TEST(KernelBackendMatmul, FoldedBatchWithSharedB) {
  // [B, T, K] x [K, N]: one product of B*T rows.
  check_matmul(dense_mat({2, 3, 4}, 17), dense_mat({4, 5}, 18), {2, 3, 5});
  check_matmul(dense_mat({2, 2, 3, 4}, 19), dense_mat({1, 4, 5}, 20), {2, 2, 3, 5});
  // Rows 6 apart (a slice of wider rows), batches 18 apart: still one product.
  check_matmul(view_mat(36, {2, 3, 4}, {18, 6, 1}, 21), dense_mat({4, 5}, 22), {2, 3, 5});
  // Batches 20 apart: not foldable, one product per batch.
  check_matmul(view_mat(40, {2, 3, 4}, {20, 6, 1}, 23), dense_mat({4, 5}, 24), {2, 3, 5});
  // b transposed.
  check_matmul(dense_mat({2, 3, 4}, 25), dense_mat({5, 4}, 26, true), {2, 3, 5});
}

TEST(KernelBackendMatmul, OneRowMatrices) {
  check_matmul(dense_mat({3, 1, 4}, 27), dense_mat({3, 4, 5}, 28), {3, 1, 5});
  // m = 1 folded: the batch stride is the row stride.
  check_matmul(dense_mat({3, 1, 4}, 29), dense_mat({4, 5}, 30), {3, 1, 5});
  // n = 1 and k = 1.
  check_matmul(dense_mat({2, 3, 4}, 31), dense_mat({2, 4, 1}, 32), {2, 3, 1});
  check_matmul(dense_mat({2, 3, 1}, 33), dense_mat({1, 5}, 34), {2, 3, 5});
  // A single-row stored matrix with an odd row stride.
  check_matmul(view_mat(40, {2, 1, 4}, {20, 3, 1}, 35), dense_mat({2, 4, 3}, 36), {2, 1, 3});
}

// A row axis of stride 0 (an expand over the rows, [2, 1, 4] -> [2, 3, 4],
// strides [4, 0, 1]) times a shared b must not take the fold path (one
// product over equally spaced rows): it once took the batch stride for the
// row stride and read rows 0..5 of a 2-row tensor (both back ends).
TEST(KernelBackendMatmul, FoldWithBroadcastRows) {
  Mat a = view_mat(8, {2, 3, 4}, {4, 0, 1}, 37);
  a.data.resize(64, 1e6F);  // what the fold wrongly reads: far from the right rows
  const Mat b = dense_mat({4, 5}, 38);
  const Shape out_shape{2, 3, 5};
  const auto count = static_cast<std::size_t>(shape_numel(out_shape));
  const Dev<float> da(a.data), db(b.data), out(count);
  emu().matmul({da.get(), a.shape, a.strides, false}, {db.get(), b.shape, b.strides, false},
               out.get(), out_shape, MatmulPrecision::f32);
  const std::vector<float> want = naive_matmul(a, b, out_shape, MatmulPrecision::f32);
  EXPECT_TRUE(close(out.host(), want, kGemmAbs, kGemmRel))
      << "the fold path of matmul took a stride-0 row axis for an unset one";
  std::vector<float> cpu_out = poisoned<float>(count);
  cpu().matmul({a.data.data(), a.shape, a.strides, false},
               {b.data.data(), b.shape, b.strides, false}, cpu_out.data(), out_shape,
               MatmulPrecision::f32);
  EXPECT_TRUE(close(cpu_out, want, kGemmAbs, kGemmRel))
      << "the CPU back end's fold path took a stride-0 row axis for an unset one";
}

// ---- gemm ----------------------------------------------------------------------------

struct GemmCase {
  std::int64_t m = 3, n = 5, k = 4;
  float alpha = 1.0F, beta = 0.0F;
  bool trans_a = false, trans_b = false;
  std::int64_t pad_a = 0, pad_b = 0, ldc = 5;
  float c_init = 0.0F;  // NaN: C poisoned (beta 0 must not read it)
};

void check_gemm(const GemmCase& g, MatmulPrecision precision, bool pre_round) {
  const std::int64_t a_rows = g.trans_a ? g.k : g.m, a_cols = g.trans_a ? g.m : g.k;
  const std::int64_t b_rows = g.trans_b ? g.n : g.k, b_cols = g.trans_b ? g.k : g.n;
  const std::int64_t lda = a_cols + g.pad_a, ldb = b_cols + g.pad_b;
  // At least one element: a null data pointer says "given only rounded".
  const std::vector<float> a =
      uniform(static_cast<std::size_t>(std::max<std::int64_t>(a_rows * lda, 1)), 41);
  const std::vector<float> b =
      uniform(static_cast<std::size_t>(std::max<std::int64_t>(b_rows * ldb, 1)), 42);
  std::vector<float> c = uniform(static_cast<std::size_t>(g.m * g.ldc), 43);
  if (std::isnan(g.c_init)) std::fill(c.begin(), c.end(), kNaN);
  // The columns past n of each row of C must be left alone.
  std::vector<float> want = c;
  const Dev<float> da(a), db(b), dc(c);
  std::vector<std::uint16_t> a16(static_cast<std::size_t>(a_rows * a_cols));
  std::vector<std::uint16_t> b16(static_cast<std::size_t>(b_rows * b_cols));
  const Dev<std::uint16_t> da16(a16.size()), db16(b16.size());
  backend::GemmProduct cp{
      g.m,    g.n,         g.k,  g.alpha, {a.data(), lda, g.trans_a}, {b.data(), ldb, g.trans_b},
      g.beta, want.data(), g.ldc};
  backend::GemmProduct ep{
      g.m,    g.n,      g.k,  g.alpha, {da.get(), lda, g.trans_a}, {db.get(), ldb, g.trans_b},
      g.beta, dc.get(), g.ldc};
  if (pre_round) {
    cpu().round_bf16(cp.a, g.m, g.k, a16.data());
    cpu().round_bf16(cp.b, g.k, g.n, b16.data());
    emu().round_bf16(ep.a, g.m, g.k, da16.get());
    emu().round_bf16(ep.b, g.k, g.n, db16.get());
    EXPECT_TRUE(same(da16.host(), a16)) << "round_bf16 of a";
    EXPECT_TRUE(same(db16.host(), b16)) << "round_bf16 of b";
    cp.a = {nullptr, lda, g.trans_a, a16.data()};
    cp.b = {nullptr, ldb, g.trans_b, b16.data()};
    ep.a = {nullptr, lda, g.trans_a, da16.get()};
    ep.b = {nullptr, ldb, g.trans_b, db16.get()};
  }
  cpu().gemm(cp, precision);
  emu().gemm(ep, precision);
  EXPECT_TRUE(close(dc.host(), want, kGemmAbs, kGemmRel));
}

TEST(KernelBackendGemm, AlphaBetaAccumulateWithPaddedC) {
  for (const bool ta : {false, true}) {
    for (const bool tb : {false, true}) {
      SCOPED_TRACE(::testing::Message() << "trans_a " << ta << " trans_b " << tb);
      GemmCase g;
      g.alpha = 0.5F;
      g.beta = 1.5F;
      g.trans_a = ta;
      g.trans_b = tb;
      g.pad_a = 2;
      g.pad_b = 1;
      g.ldc = 7;
      check_gemm(g, MatmulPrecision::f32, false);
      check_gemm(g, MatmulPrecision::bf16, false);
      check_gemm(g, MatmulPrecision::bf16, true);
    }
  }
}

TEST(KernelBackendGemm, BetaZeroDoesNotReadC) {
  GemmCase g;
  g.ldc = 6;
  g.c_init = kNaN;
  check_gemm(g, MatmulPrecision::f32, false);
  check_gemm(g, MatmulPrecision::bf16, true);
}

TEST(KernelBackendGemm, EmptyInnerDimension) {
  for (const float beta : {0.0F, 0.5F, 1.0F}) {
    SCOPED_TRACE(::testing::Message() << "beta " << beta);
    GemmCase g;
    g.k = 0;
    g.beta = beta;
    g.ldc = 8;
    check_gemm(g, MatmulPrecision::f32, false);
    check_gemm(g, MatmulPrecision::bf16, false);
  }
}

TEST(KernelBackendGemm, PairRunsBothProducts) {
  const std::vector<float> a = uniform(12, 44), b = uniform(20, 45), x = uniform(8, 46),
                           y = uniform(6, 47);
  std::vector<float> c1 = poisoned<float>(15), c2 = uniform(12, 48);
  const Dev<float> da(a), db(b), dx(x), dy(y), dc1(c1), dc2(c2);
  // c1 [3, 5] = a [3, 4] b [4, 5]; c2 [4, 3] = 2 x^T [4, 2] y [2, 3] + c2.
  cpu().gemm_pair({3, 5, 4, 1.0F, {a.data(), 4}, {b.data(), 5}, 0.0F, c1.data(), 5},
                  {4, 3, 2, 2.0F, {x.data(), 4, true}, {y.data(), 3}, 1.0F, c2.data(), 3},
                  MatmulPrecision::f32);
  emu().gemm_pair({3, 5, 4, 1.0F, {da.get(), 4}, {db.get(), 5}, 0.0F, dc1.get(), 5},
                  {4, 3, 2, 2.0F, {dx.get(), 4, true}, {dy.get(), 3}, 1.0F, dc2.get(), 3},
                  MatmulPrecision::f32);
  EXPECT_TRUE(close(dc1.host(), c1, kGemmAbs, kGemmRel));
  EXPECT_TRUE(close(dc2.host(), c2, kGemmAbs, kGemmRel));
}

// ---- Attention ---------------------------------------------------------------------------

struct AttentionCase {
  std::int64_t b = 2, h = 2, tq = 3, tk = 3, d = 4;
  bool packed = false;       // q, k, v slices of one [B, T, 3, H, D] buffer (tq == tk)
  bool mask = false;         // a [B, 1, 1, Tk] keep-mask broadcast over heads and queries
  bool mask_batch1 = false;  // the mask hides every key of batch 1 (its queries get zeros)
  bool causal = false;
  bool dropout = false;
  bool bf16 = false;
  bool probs = true;
};

// f32: the softmax's exp differs in its last bits between the back ends. bf16
// products round the weights (computed by each back end) to bf16: one bf16
// step (2^-8 relative) of a weight moves an output by up to about 1e-2.
float attention_tol(const AttentionCase& c) {
  return c.bf16 ? 2e-2F : 2e-5F;
}

// Where a case's operands lie: q at 0, k at `k_at`, v at `v_at` of one
// buffer of qkv_size elements; the output in [B, Tq, H, D] order (head
// stride D); the keep-mask and the dropout's keep of its planes.
struct AttentionLayout {
  backend::AttentionShape shape;
  std::size_t qkv_size = 0, out_size = 0, planes = 0;
  std::int64_t k_at = 0, v_at = 0;
  backend::HeadStrides qs, ks, vs, os;
  std::vector<std::uint8_t> mask, keep;
};

AttentionLayout layout_of(const AttentionCase& c) {
  AttentionLayout l;
  backend::AttentionShape& s = l.shape;
  s.b = c.b;
  s.h = c.h;
  s.tq = c.tq;
  s.tk = c.tk;
  s.d = c.d;
  s.scale = 0.7F;
  s.causal = c.causal;
  s.bf16_products = c.bf16;
  const std::int64_t hd = c.h * c.d;
  if (c.packed) {
    l.qkv_size = static_cast<std::size_t>(c.b * c.tq * 3 * hd);
    l.qs = l.ks = l.vs = {c.tq * 3 * hd, c.d, 3 * hd};
    l.k_at = hd;
    l.v_at = 2 * hd;
  } else {
    const std::int64_t q_size = c.b * c.h * c.tq * c.d, kv_size = c.b * c.h * c.tk * c.d;
    l.qkv_size = static_cast<std::size_t>(q_size + 2 * kv_size);
    l.qs = {c.h * c.tq * c.d, c.tq * c.d, c.d};
    l.ks = l.vs = {c.h * c.tk * c.d, c.tk * c.d, c.d};
    l.k_at = q_size;
    l.v_at = q_size + kv_size;
  }
  l.os = {c.tq * hd, c.d, hd};
  l.out_size = static_cast<std::size_t>(c.b * c.tq * hd);
  l.planes = static_cast<std::size_t>(c.b * c.h * c.tq * c.tk);
  l.mask.assign(static_cast<std::size_t>(c.b * c.tk), 1);
  l.mask[1] = 0;                                          // batch 0 never sees key 1
  l.mask[static_cast<std::size_t>(c.tk + c.tk - 1)] = 0;  // batch 1 never sees its last key
  if (c.mask_batch1) std::fill(l.mask.begin() + c.tk, l.mask.end(), std::uint8_t{0});
  l.keep = integers<std::uint8_t>(l.planes, 52, 0, 1);
  return l;
}

// The layout's shape with its mask and keep (host or device copies) as the case asks.
backend::AttentionShape shape_with(const AttentionCase& c, const AttentionLayout& l,
                                   const std::uint8_t* mask, const std::uint8_t* keep) {
  backend::AttentionShape s = l.shape;
  if (c.mask) {
    s.mask = mask;
    s.mask_strides = {c.tk, 0, 0, 1};
  }
  if (c.dropout) {
    s.keep = keep;
    s.keep_scale = 1.25F;
  }
  return s;
}

void check_attention(const AttentionCase& c) {
  const AttentionLayout l = layout_of(c);
  const std::size_t qkv_size = l.qkv_size, out_size = l.out_size, planes = l.planes;
  const std::int64_t k_at = l.k_at, v_at = l.v_at;
  const backend::HeadStrides qs = l.qs, ks = l.ks, vs = l.vs, os = l.os;
  const std::vector<float> qkv = uniform(qkv_size, 51, -2.0F, 2.0F);
  const Dev<std::uint8_t> dmask(l.mask), dkeep(l.keep);
  const backend::AttentionShape cs = shape_with(c, l, l.mask.data(), l.keep.data()),
                                es = shape_with(c, l, dmask.get(), dkeep.get());
  const float tol = attention_tol(c);

  // Forward.
  std::vector<float> out = poisoned<float>(out_size), probs = poisoned<float>(planes);
  const float* q = qkv.data();
  cpu().attention_forward(cs, q, qs, q + k_at, ks, q + v_at, vs, out.data(), os, probs.data());
  const Dev<float> dqkv(qkv), dout(out_size), dprobs(planes);
  const float* eq = dqkv.get();
  emu().attention_forward(es, eq, qs, eq + k_at, ks, eq + v_at, vs, dout.get(), os,
                          c.probs ? dprobs.get() : nullptr);
  EXPECT_TRUE(close(dout.host(), out, tol, tol)) << "out";
  if (c.probs) {
    EXPECT_TRUE(close(dprobs.host(), probs, 1e-6F, 1e-5F)) << "probs";
  }

  // Backward, from the CPU's probabilities on both, into gradients laid out
  // like the operands (the packed buffer's slices, zeros between them).
  const std::vector<float> grad_out = uniform(out_size, 53);
  const Dev<float> dgrad_out(grad_out), dcprobs(probs);
  for (int which = 0; which < 3; ++which) {  // all, dq + dk only, dv only
    SCOPED_TRACE(::testing::Message() << "backward variant " << which);
    const bool want_qk = which != 2, want_v = which != 1;
    std::vector<float> grads(qkv_size, 0.0F);
    float* g = grads.data();
    cpu().attention_backward(cs, q, qs, q + k_at, ks, q + v_at, vs, probs.data(), grad_out.data(),
                             os, want_qk ? g : nullptr, qs, want_qk ? g + k_at : nullptr, ks,
                             want_v ? g + v_at : nullptr, vs);
    const Dev<float> dgrads(std::vector<float>(qkv_size, 0.0F));
    float* eg = dgrads.get();
    emu().attention_backward(es, eq, qs, eq + k_at, ks, eq + v_at, vs, dcprobs.get(),
                             dgrad_out.get(), os, want_qk ? eg : nullptr, qs,
                             want_qk ? eg + k_at : nullptr, ks, want_v ? eg + v_at : nullptr, vs);
    EXPECT_TRUE(close(dgrads.host(), grads, tol, tol));
  }
}

TEST(KernelBackendAttention, Plain) {
  check_attention({});
  AttentionCase c;
  c.probs = false;
  c.tk = 5;
  check_attention(c);
}

TEST(KernelBackendAttention, PackedHeadsWithBroadcastMask) {
  AttentionCase c;
  c.packed = true;
  c.mask = true;
  check_attention(c);
  // More batch elements than heads (the heads' products looped, each
  // batched over the batch elements), and more heads than batch elements.
  c.b = 3;
  check_attention(c);
  c.b = 2;
  c.h = 3;
  check_attention(c);
  c.h = 2;
  c.probs = false;
  check_attention(c);
  c.probs = true;
  c.mask_batch1 = true;
  check_attention(c);
}

TEST(KernelBackendAttention, Causal) {
  AttentionCase c;
  c.causal = true;
  c.packed = true;
  check_attention(c);  // tq == tk
  c.packed = false;
  c.tq = 2;
  c.tk = 5;
  check_attention(c);  // tq < tk: query i sees keys j <= i + 3
  c.mask = true;
  check_attention(c);
}

TEST(KernelBackendAttention, DropoutKeepMask) {
  AttentionCase c;
  c.dropout = true;
  c.mask = true;
  c.tk = 5;
  check_attention(c);
  c.probs = false;
  c.causal = true;
  check_attention(c);
}

TEST(KernelBackendAttention, Bf16Products) {
  AttentionCase c;
  c.bf16 = true;
  c.packed = true;
  c.mask = true;
  check_attention(c);
  c.packed = false;
  c.dropout = true;
  c.causal = true;
  c.tq = 2;
  c.tk = 5;
  check_attention(c);
}

// Fused attention: the emulator has none (its attention is composed, as
// above); a GPU's back end runs cuDNN's, compared here with the CPU's f32
// attention on the same bf16 values: [B, T, H, D] memory viewed as [B, H, T,
// D] (the split-heads layout), key padding by lengths, causal, forward and
// backward.
void check_fused_attention(bool causal) {
  const std::int64_t b = 2, h = 4, t = 24, d = 16;
  const std::vector<std::int32_t> lengths{24, 17};
  const auto n = static_cast<std::size_t>(b * t * h * d);
  const backend::HeadStrides split{t * h * d, d, h * d};
  backend::FusedAttention a;
  a.b = b;
  a.h = h;
  a.tq = a.tk = t;
  a.d = d;
  a.type = DType::bf16;
  a.scale = 0.25F;
  a.causal = causal;
  a.qs = a.ks = a.vs = a.os = split;
  const Dev<std::int32_t> dlengths(lengths);
  if (!causal) a.key_lengths = dlengths.get();
  const Dev<float> dstats(static_cast<std::size_t>(b * h * t));
  a.stats = dstats.get();
#ifndef RIG_KERNEL_BACKEND_ON_GPU
  EXPECT_FALSE(emu().fused_attention_supported(a)) << "the emulated device composes attention";
  EXPECT_FALSE(cpu().fused_attention_supported(a));
  EXPECT_THROW(cpu().fused_attention_forward(a), std::logic_error);
  return;
#endif
  ASSERT_TRUE(emu().fused_attention_supported(a)) << "cuDNN's fused attention on this GPU";
  // bf16 inputs and their f32 values.
  const auto bits_of = [](const std::vector<float>& x) {
    std::vector<std::uint16_t> out(x.size());
    for (std::size_t i = 0; i < x.size(); ++i) out[i] = float_to_bfloat16_bits(x[i]);
    return out;
  };
  const auto values_of = [](const std::vector<std::uint16_t>& x) {
    std::vector<float> out(x.size());
    for (std::size_t i = 0; i < x.size(); ++i) out[i] = bfloat16_bits_to_float(x[i]);
    return out;
  };
  const std::vector<std::uint16_t> qb = bits_of(uniform(n, 301)), kb = bits_of(uniform(n, 302)),
                                   vb = bits_of(uniform(n, 303)), gb = bits_of(uniform(n, 304));
  const std::vector<float> q = values_of(qb), k = values_of(kb), v = values_of(vb),
                           g = values_of(gb);
  const Dev<std::uint16_t> dq(qb), dk(kb), dv(vb), dg(gb), dout(n), ddq(n), ddk(n), ddv(n);
  a.q = dq.get();
  a.k = dk.get();
  a.v = dv.get();
  a.out = dout.get();
  emu().fused_attention_forward(a);
  a.dout = dg.get();
  a.dq = ddq.get();
  a.dk = ddk.get();
  a.dv = ddv.get();
  emu().fused_attention_backward(a);

  backend::AttentionShape s;
  s.b = b;
  s.h = h;
  s.tq = s.tk = t;
  s.d = d;
  s.scale = a.scale;
  s.causal = causal;
  s.bf16_products = true;
  std::vector<std::uint8_t> mask(static_cast<std::size_t>(b * t));
  for (std::int64_t i = 0; i < b; ++i) {
    for (std::int64_t j = 0; j < t; ++j)
      mask[static_cast<std::size_t>(i * t + j)] = j < lengths[static_cast<std::size_t>(i)];
  }
  if (!causal) {
    s.mask = mask.data();
    s.mask_strides = {t, 0, 0, 1};
  }
  std::vector<float> out(n), probs(static_cast<std::size_t>(b * h * t * t)), gq(n), gk(n), gv(n);
  cpu().attention_forward(s, q.data(), split, k.data(), split, v.data(), split, out.data(), split,
                          probs.data());
  cpu().attention_backward(s, q.data(), split, k.data(), split, v.data(), split, probs.data(),
                           g.data(), split, gq.data(), split, gk.data(), split, gv.data(), split);
  // bf16 outputs: 2^-8 relative, and the products' bf16 rounding of the weights.
  EXPECT_TRUE(close(values_of(dout.host()), out, 2e-2F, 2e-2F)) << "out";
  EXPECT_TRUE(close(values_of(ddq.host()), gq, 2e-2F, 3e-2F)) << "dq";
  EXPECT_TRUE(close(values_of(ddk.host()), gk, 2e-2F, 3e-2F)) << "dk";
  EXPECT_TRUE(close(values_of(ddv.host()), gv, 2e-2F, 3e-2F)) << "dv";
}

TEST(KernelBackendAttention, FusedWithKeyLengths) {
  check_fused_attention(false);
}

TEST(KernelBackendAttention, FusedCausal) {
  check_fused_attention(true);
}

// ---- 16-bit storage ---------------------------------------------------------------------
// binary_16 and layer_norm_*_16 read and write f16 / bf16 as it is: their
// results must be the same back end's f32 results rounded, bit for bit.

std::uint16_t to_bits(float x, DType type) {
  return type == DType::bf16 ? float_to_bfloat16_bits(x) : float_to_half_bits(x);
}
float from_bits(std::uint16_t x, DType type) {
  return type == DType::bf16 ? bfloat16_bits_to_float(x) : half_bits_to_float(x);
}
std::vector<std::uint16_t> bits_of(const std::vector<float>& x, DType type) {
  std::vector<std::uint16_t> out(x.size());
  for (std::size_t i = 0; i < x.size(); ++i) out[i] = to_bits(x[i], type);
  return out;
}
std::vector<float> values_of(const std::vector<std::uint16_t>& x, DType type) {
  std::vector<float> out(x.size());
  for (std::size_t i = 0; i < x.size(); ++i) out[i] = from_bits(x[i], type);
  return out;
}
// Values stored as `type` (f32, f16 or bf16) in 16-bit words (f32: two a
// value, its bits), and back.
std::vector<std::uint16_t> stored_words(const std::vector<float>& x, DType type) {
  if (type != DType::f32) return bits_of(x, type);
  std::vector<std::uint16_t> out(2 * x.size());
  std::memcpy(out.data(), x.data(), x.size() * sizeof(float));
  return out;
}
std::vector<float> word_values(const std::vector<std::uint16_t>& x, DType type) {
  if (type != DType::f32) return values_of(x, type);
  std::vector<float> out(x.size() / 2);
  std::memcpy(out.data(), x.data(), out.size() * sizeof(float));
  return out;
}

// Composed attention on 16-bit q, k, v as they are (attention_forward_16 /
// attention_backward_16). bf16: on the emulator, the bits of the same back
// end's f32 path on the same values with bf16 products (which round the
// weights and dScores to bf16 as the 16-bit path stores them), each result
// rounded once; the same probabilities. f16 has no such twin (its products
// take f16 weights and dScores), and a GPU's products sum in their own
// order: both are compared with the CPU's f32 attention on the same values,
// within the 16-bit roundings.
void check_attention_16(AttentionCase c, DType type) {
  c.bf16 = type == DType::bf16;
  SCOPED_TRACE(::testing::Message()
               << dtype_name(type) << " packed " << c.packed << " mask " << c.mask << " causal "
               << c.causal << " dropout " << c.dropout << " tq " << c.tq << " tk " << c.tk);
  ASSERT_TRUE(emu().composes_attention_16(type));
  EXPECT_FALSE(cpu().composes_attention_16(type));
  const AttentionLayout l = layout_of(c);
  const std::vector<std::uint16_t> qkv16 = bits_of(uniform(l.qkv_size, 51, -2.0F, 2.0F), type);
  const std::vector<std::uint16_t> grad16 = bits_of(uniform(l.out_size, 53), type);
  const std::vector<float> qkv = values_of(qkv16, type), grad = values_of(grad16, type);
  const Dev<std::uint8_t> dmask(l.mask), dkeep(l.keep);
  const backend::AttentionShape es = shape_with(c, l, dmask.get(), dkeep.get());
  backend::AttentionShape cs = shape_with(c, l, l.mask.data(), l.keep.data());
  cs.bf16_products = false;  // the reference: f32 products on the 16-bit values

  const Dev<std::uint16_t> dqkv(qkv16), dgrad(grad16), dout(l.out_size);
  const Dev<float> dprobs(l.planes);
  const std::uint16_t* q = dqkv.get();
  emu().attention_forward_16(es, type, q, l.qs, q + l.k_at, l.ks, q + l.v_at, l.vs, dout.get(),
                             l.os, c.probs ? dprobs.get() : nullptr);
  const Dev<std::uint16_t> dgrads(std::vector<std::uint16_t>(l.qkv_size, 0));
  std::uint16_t* g = dgrads.get();
  const Dev<float> dref_probs(l.planes);  // the back end's own f32 probabilities
  std::vector<float> ref_probs(l.planes), out(l.out_size), grads(l.qkv_size, 0.0F);
  cpu().attention_forward(cs, qkv.data(), l.qs, qkv.data() + l.k_at, l.ks, qkv.data() + l.v_at,
                          l.vs, out.data(), l.os, ref_probs.data());
  cpu().attention_backward(cs, qkv.data(), l.qs, qkv.data() + l.k_at, l.ks, qkv.data() + l.v_at,
                           l.vs, ref_probs.data(), grad.data(), l.os, grads.data(), l.qs,
                           grads.data() + l.k_at, l.ks, grads.data() + l.v_at, l.vs);
  const std::vector<float> cpu_probs = ref_probs;
  if (c.probs) {
    EXPECT_TRUE(close(dprobs.host(), cpu_probs, 1e-6F, 1e-5F)) << "probs";
    // The backward from the back end's own probabilities.
    ref_probs = dprobs.host();
  }
  const Dev<float> dbackward_probs(c.probs ? ref_probs : cpu_probs);
  emu().attention_backward_16(es, type, q, l.qs, q + l.k_at, l.ks, q + l.v_at, l.vs,
                              dbackward_probs.get(), dgrad.get(), l.os, g, l.qs, g + l.k_at, l.ks,
                              g + l.v_at, l.vs);
  const std::vector<float> got_out = values_of(dout.host(), type);
  const std::vector<float> got_grads = values_of(dgrads.host(), type);
  // 16-bit results (2^-8 bf16, 2^-11 f16 relative) of products whose other
  // operands were rounded too (bf16: as at check_attention's bf16 products).
  const float tol = type == DType::bf16 ? 3e-2F : 5e-3F;
  EXPECT_TRUE(close(got_out, out, tol, tol)) << "out";
  EXPECT_TRUE(close(got_grads, grads, tol, tol)) << "dq, dk, dv";
#ifndef RIG_KERNEL_BACKEND_ON_GPU
  if (type != DType::bf16) return;
  // The emulator's f32 path with bf16 products on the same values and probabilities.
  const Dev<float> dqkv32(qkv), dgrad32(grad), dout32(l.out_size), dprobs32(l.planes),
      dgrads32(std::vector<float>(l.qkv_size, 0.0F));
  const float* q32 = dqkv32.get();
  float* g32 = dgrads32.get();
  emu().attention_forward(es, q32, l.qs, q32 + l.k_at, l.ks, q32 + l.v_at, l.vs, dout32.get(), l.os,
                          dprobs32.get());
  if (c.probs) {
    EXPECT_TRUE(same(dprobs32.host(), dprobs.host())) << "probs";
  }
  emu().attention_backward(es, q32, l.qs, q32 + l.k_at, l.ks, q32 + l.v_at, l.vs,
                           dbackward_probs.get(), dgrad32.get(), l.os, g32, l.qs, g32 + l.k_at,
                           l.ks, g32 + l.v_at, l.vs);
  const auto rounded = [&](const std::vector<float>& x) {
    return values_of(bits_of(x, type), type);
  };
  EXPECT_TRUE(same(got_out, rounded(dout32.host()))) << "out";
  EXPECT_TRUE(same(got_grads, rounded(dgrads32.host()))) << "dq, dk, dv";
#endif
}

TEST(KernelBackendAttention, Composed16BitIsTheF32PathOnItsValues) {
  for (const DType type : {DType::bf16, DType::f16}) {
    AttentionCase c;
    c.packed = true;
    c.mask = true;
    check_attention_16(c, type);
    c.b = 3;  // more batch elements than heads
    c.dropout = true;
    check_attention_16(c, type);
    c.mask_batch1 = true;
    c.probs = false;
    check_attention_16(c, type);
    AttentionCase d;
    d.causal = true;
    d.tq = 2;
    d.tk = 5;
    d.d = 8;
    check_attention_16(d, type);
    d.dropout = true;
    d.mask = true;
    check_attention_16(d, type);
  }
}

TEST(KernelBackendGemm, BiasAndReluInTheEpilogue) {
  // GemmProduct::bias and relu (gemm_adds_bias): y = relu(x W^T + b) from the
  // product's epilogue, into an f32 C or (bf16, f16 operands) a bf16 / f16 C
  // with a bias of that type: on the emulator the bits of the product,
  // bias_activation and (16-bit) the rounding; on a GPU within the products'
  // own accumulation order.
  ASSERT_TRUE(emu().gemm_adds_bias(nullptr));
  alignas(16) static const float aligned[8] = {};
  EXPECT_TRUE(emu().gemm_adds_bias(&aligned[4]));
  EXPECT_FALSE(emu().gemm_adds_bias(&aligned[1])) << "cuBLASLt wants a 16-byte aligned bias";
  const std::int64_t m = 6, n = 10, k = 12;
#ifdef RIG_KERNEL_BACKEND_ON_GPU
  const float tol16 = 1e-2F, tol32 = kGemmAbs;
#else
  const float tol16 = 0.0F, tol32 = 0.0F;
#endif
  const std::vector<float> xv = uniform(static_cast<std::size_t>(m * k), 471);
  const std::vector<float> wv = uniform(static_cast<std::size_t>(n * k), 472);
  const std::vector<float> bv = uniform(static_cast<std::size_t>(n), 473);
  const auto mn = static_cast<std::size_t>(m * n);
  for (const bool relu : {false, true}) {
    for (const bool with_bias : {true, false}) {
      if (!relu && !with_bias) continue;
      SCOPED_TRACE(::testing::Message() << "relu " << relu << " bias " << with_bias);
      const Activation act = relu ? Activation::relu : Activation::none;
      {  // f32
        const Dev<float> x(xv), w(wv), b(bv), y(mn), want(mn);
        emu().gemm({m, n, k, 1.0F, {x.get(), k, false}, {w.get(), k, true}, 0.0F, want.get(), n},
                   MatmulPrecision::f32);
        emu().bias_activation(want.get(), nullptr, with_bias ? b.get() : nullptr, m, n, act);
        backend::GemmProduct p{m,    n,       k, 1.0F, {x.get(), k, false}, {w.get(), k, true},
                               0.0F, y.get(), n};
        p.bias = with_bias ? b.get() : nullptr;
        p.relu = relu;
        emu().gemm(p, MatmulPrecision::f32);
        EXPECT_TRUE(close(y.host(), want.host(), tol32, tol32)) << "f32";
      }
      {  // bf16 operands, bias and C
        const std::vector<std::uint16_t> xb = bits_of(xv, DType::bf16),
                                         wb = bits_of(wv, DType::bf16),
                                         bb = bits_of(bv, DType::bf16);
        const Dev<std::uint16_t> x(xb), w(wb), b(bb), y(mn);
        const Dev<float> b32(values_of(bb, DType::bf16)), want(mn);
        emu().gemm({m,
                    n,
                    k,
                    1.0F,
                    {nullptr, k, false, x.get()},
                    {nullptr, k, true, w.get()},
                    0.0F,
                    want.get(),
                    n},
                   MatmulPrecision::bf16);
        emu().bias_activation(want.get(), nullptr, with_bias ? b32.get() : nullptr, m, n, act);
        backend::GemmProduct p{
            m,    n,       k, 1.0F,   {nullptr, k, false, x.get()}, {nullptr, k, true, w.get()},
            0.0F, nullptr, n, y.get()};
        p.bias = with_bias ? b.get() : nullptr;
        p.relu = relu;
        emu().gemm(p, MatmulPrecision::bf16);
        const std::vector<float> rounded =
            values_of(bits_of(want.host(), DType::bf16), DType::bf16);
        EXPECT_TRUE(close(values_of(y.host(), DType::bf16), rounded, tol16, tol16)) << "bf16";
      }
      {  // f16 operands, bias and C (a float16 model's layers)
        const std::vector<std::uint16_t> xb = bits_of(xv, DType::f16), wb = bits_of(wv, DType::f16),
                                         bb = bits_of(bv, DType::f16);
        const Dev<std::uint16_t> x(xb), w(wb), b(bb), y(mn);
        const Dev<float> b32(values_of(bb, DType::f16)), want(mn);
        emu().gemm({m,
                    n,
                    k,
                    1.0F,
                    {nullptr, k, false, nullptr, x.get()},
                    {nullptr, k, true, nullptr, w.get()},
                    0.0F,
                    want.get(),
                    n},
                   MatmulPrecision::f32);
        emu().bias_activation(want.get(), nullptr, with_bias ? b32.get() : nullptr, m, n, act);
        backend::GemmProduct p{m,
                               n,
                               k,
                               1.0F,
                               {nullptr, k, false, nullptr, x.get()},
                               {nullptr, k, true, nullptr, w.get()},
                               0.0F,
                               nullptr,
                               n};
        p.c_f16 = y.get();
        p.bias = with_bias ? b.get() : nullptr;
        p.relu = relu;
        emu().gemm(p, MatmulPrecision::f32);
        const std::vector<float> rounded = values_of(bits_of(want.host(), DType::f16), DType::f16);
        EXPECT_TRUE(close(values_of(y.host(), DType::f16), rounded, tol16, tol16)) << "f16";
      }
    }
  }
  // Not with beta 1 (the epilogue's C would be added after the bias).
  const Dev<float> x(xv), w(wv), b(bv), y(mn);
  backend::GemmProduct p{m, n, k, 1.0F, {x.get(), k, false}, {w.get(), k, true}, 1.0F, y.get(), n};
  p.bias = b.get();
  EXPECT_THROW(emu().gemm(p, MatmulPrecision::f32), std::invalid_argument);
}

#ifndef RIG_KERNEL_BACKEND_ON_GPU
// A device whose cuBLASLt has no algorithm for the mask and bias-gradient
// epilogues (as an older GPU's may): the back end finds out with its probe
// products, says no for both 16-bit types, and the ops keep relu's output.
TEST(KernelBackendGemm, NoReluMasksWhereTheProductsRefuseThem) {
  const std::unique_ptr<Backend> refusing = cuda::make_emulated_backend(
      0, cuda::EmulatedConvolutions::with_16bit, cuda::EmulatedAttention::composed,
      cuda::EmulatedWork::computed, cuda::EmulatedEpilogues::without_masks_and_bias_gradients);
  EXPECT_FALSE(refusing->gemm_relu_masks(DType::bf16));
  EXPECT_FALSE(refusing->gemm_relu_masks(DType::f16));
  EXPECT_FALSE(refusing->gemm_relu_masks(DType::bf16)) << "the second answer, remembered";
}
#endif

TEST(KernelBackendGemm, ReluMaskAndBiasGradientInTheEpilogue) {
  // gemm_relu_masks: relu_mask writes the mask of h > 0 (after an unscaled
  // dropout in place where given a key); a product with that mask gives
  // alpha P where the bit is set, else 0 (cuBLASLt's DRELU), and one with
  // bias_grad the row sums of op(A) beside its C (BGRADA). On the emulator
  // the mask and the masked product have the bits of the dropout, the
  // product and its rounding; the bias gradient is summed in its own order.
  ASSERT_TRUE(emu().gemm_relu_masks(DType::bf16));
  ASSERT_TRUE(emu().gemm_relu_masks(DType::f16));
  EXPECT_FALSE(emu().gemm_relu_masks(DType::f32));
  EXPECT_FALSE(cpu().gemm_relu_masks(DType::bf16));
  const std::int64_t rows = 6, hidden = 16, out = 5, in = 7, ld = 128;
  const RandomKey key{21, 22, 0, 23};
  const auto rn = static_cast<std::size_t>(rows * hidden);
#ifdef RIG_KERNEL_BACKEND_ON_GPU
  const float tol = 1e-2F;
#else
  const float tol = 0.0F;
#endif
  for (const DType type : {DType::bf16, DType::f16}) {
    for (const bool dropped : {false, true}) {
      SCOPED_TRACE(::testing::Message() << dtype_name(type) << (dropped ? " dropout" : ""));
      const MatmulPrecision precision =
          type == DType::bf16 ? MatmulPrecision::bf16 : MatmulPrecision::f32;
      const auto operand = [type](const std::uint16_t* data, std::int64_t ld, bool trans) {
        backend::GemmOperand o{nullptr, ld, trans};
        (type == DType::bf16 ? o.bf16 : o.f16) = data;
        return o;
      };
      const auto write = [type](backend::GemmProduct& p, std::uint16_t* c) {
        (type == DType::bf16 ? p.c_bf16 : p.c_f16) = c;
      };
      std::vector<float> hv = uniform(rn, 481);
      for (float& v : hv) v = std::max(v, 0.0F);  // a relu's output
      const std::vector<std::uint16_t> h0 = bits_of(hv, type);
      std::vector<std::uint16_t> want_h = h0;
      if (dropped)
        cpu().dropout_forward(key, 0.3F, 1.0F, type, h0.data(), want_h.data(),
                              static_cast<std::int64_t>(rn), nullptr);
      const Dev<std::uint16_t> h(h0);
      const Dev<std::uint8_t> mask(static_cast<std::size_t>(rows * ld / 8));
      emu().relu_mask(dropped ? &key : nullptr, 0.3F, type, h.get(), rows, hidden, mask.get(), ld);
      EXPECT_EQ(h.host(), want_h) << "h after the dropout";
      const std::vector<float> hk = values_of(want_h, type);
      const std::vector<std::uint8_t> bits = mask.host();
      for (std::int64_t r = 0; r < rows; ++r) {
        for (std::int64_t c = 0; c < hidden; ++c) {
          const std::int64_t b = r * ld + c;
          EXPECT_EQ(((bits[static_cast<std::size_t>(b / 8)] >> (b % 8)) & 1U) != 0,
                    hk[static_cast<std::size_t>(r * hidden + c)] > 0.0F)
              << "mask bit of " << r << ", " << c;
        }
      }
      // dz [rows, hidden] = 1.25 g W where the mask is set.
      const std::vector<std::uint16_t> gb = bits_of(
                                           uniform(static_cast<std::size_t>(rows * out), 482),
                                           type),
                                       wb = bits_of(
                                           uniform(static_cast<std::size_t>(out * hidden), 483),
                                           type);
      const Dev<std::uint16_t> g(gb), w(wb), dz(rn), plain(rn);
      backend::GemmProduct p{
          rows, hidden, out, 1.25F, operand(g.get(), out, false), operand(w.get(), hidden, false)};
      p.ldc = hidden;
      write(p, plain.get());
      emu().gemm(p, precision);
      write(p, dz.get());
      p.relu_mask = mask.get();
      p.relu_mask_ld = ld;
      emu().gemm(p, precision);
      std::vector<float> want_dz = values_of(plain.host(), type);
      for (std::size_t i = 0; i < rn; ++i) {
        if (!(hk[i] > 0.0F)) want_dz[i] = 0.0F;
      }
      EXPECT_TRUE(close(values_of(dz.host(), type), want_dz, tol, tol)) << "dz";
      // dW [hidden, in] = dz^T x with db = the row sums of dz^T.
      const std::vector<std::uint16_t> xb =
          bits_of(uniform(static_cast<std::size_t>(rows * in), 484), type);
      const Dev<std::uint16_t> x(xb), dw(static_cast<std::size_t>(hidden * in)),
          dw_plain(static_cast<std::size_t>(hidden * in)), db(static_cast<std::size_t>(hidden));
      const std::vector<float> dzv = values_of(dz.host(), type);
      std::vector<float> want_db(static_cast<std::size_t>(hidden), 0.0F);
      for (std::int64_t r = 0; r < rows; ++r) {
        for (std::int64_t c = 0; c < hidden; ++c) {
          want_db[static_cast<std::size_t>(c)] += dzv[static_cast<std::size_t>(r * hidden + c)];
        }
      }
      const std::vector<float> rounded_db = values_of(bits_of(want_db, type), type);
      // Beta 1: added into a gradient already there (a weight's .grad), db written all the same.
      for (const float beta : {0.0F, 1.0F}) {
        backend::GemmProduct q{
            hidden, in, rows, 1.0F, operand(dz.get(), hidden, true), operand(x.get(), in, false),
            beta};
        q.ldc = in;
        write(q, dw_plain.get());
        emu().gemm(q, precision);
        write(q, dw.get());
        q.bias_grad = db.get();
        emu().gemm(q, precision);
        EXPECT_TRUE(close(values_of(dw.host(), type), values_of(dw_plain.host(), type), tol, tol))
            << "dW beside its bias gradient, beta " << beta;
        EXPECT_TRUE(close(values_of(db.host(), type), rounded_db, 1e-2F, 1e-2F))
            << "db, beta " << beta;
      }
      // A mask and a bias gradient at once are refused.
      p.bias_grad = db.get();
      EXPECT_THROW(emu().gemm(p, precision), std::invalid_argument);
    }
  }
}

TEST(KernelBackendGemm, F16OperandsAsTheyAre) {
  // f16 values (exact in f32) multiplied on the f16 path, C in f32 and in
  // f16: on the emulator, the bits of its own f32 product of the same values
  // (the same accumulation); on a GPU, the CPU's f32 product within the
  // tolerances of the tensor cores' order of summation.
  const std::int64_t m = 37, n = 41, k = 29;
  for (const bool ta : {false, true}) {
    for (const bool tb : {false, true}) {
      SCOPED_TRACE(::testing::Message() << "trans_a " << ta << " trans_b " << tb);
      const std::vector<std::uint16_t> ab =
          bits_of(uniform(static_cast<std::size_t>(m * k), 461), DType::f16);
      const std::vector<std::uint16_t> bb =
          bits_of(uniform(static_cast<std::size_t>(k * n), 462), DType::f16);
      const std::vector<float> a = values_of(ab, DType::f16), b = values_of(bb, DType::f16);
      // Stored as op(A) [m, k] and op(B) [k, n] say, densely.
      const std::int64_t lda = ta ? m : k, ldb = tb ? k : n;
      std::vector<float> want = poisoned<float>(static_cast<std::size_t>(m * n));
      cpu().gemm({m, n, k, 1.0F, {a.data(), lda, ta}, {b.data(), ldb, tb}, 0.0F, want.data(), n},
                 MatmulPrecision::f32);
      const Dev<std::uint16_t> da(ab), db(bb), c16(static_cast<std::size_t>(m * n));
      const Dev<float> c32(static_cast<std::size_t>(m * n));
      backend::GemmProduct p{m,
                             n,
                             k,
                             1.0F,
                             {nullptr, lda, ta, nullptr, da.get()},
                             {nullptr, ldb, tb, nullptr, db.get()},
                             0.0F,
                             c32.get(),
                             n};
      emu().gemm(p, MatmulPrecision::f32);
      p.c = nullptr;
      p.c_f16 = c16.get();
      emu().gemm(p, MatmulPrecision::f32);
#ifdef RIG_KERNEL_BACKEND_ON_GPU
      EXPECT_TRUE(close(c32.host(), want, kGemmAbs, kGemmRel));
      EXPECT_TRUE(close(values_of(c16.host(), DType::f16), want, 2e-3F, 2e-3F));
#else
      const Dev<float> a32(a), b32(b), f32(static_cast<std::size_t>(m * n));
      emu().gemm({m, n, k, 1.0F, {a32.get(), lda, ta}, {b32.get(), ldb, tb}, 0.0F, f32.get(), n},
                 MatmulPrecision::f32);
      EXPECT_TRUE(close(f32.host(), want, kGemmAbs, kGemmRel));
      EXPECT_EQ(c32.host(), f32.host());
      EXPECT_EQ(c16.host(), bits_of(f32.host(), DType::f16));
#endif
    }
  }
  EXPECT_TRUE(emu().f16_products());
  EXPECT_FALSE(cpu().f16_products());
}

TEST(KernelBackend16Bit, BinaryIsTheF32PathRounded) {
  ASSERT_TRUE(emu().reads_16bit_storage());
  EXPECT_FALSE(cpu().reads_16bit_storage());
  // out [3, 5] = a [3, 5] op b [5] (b broadcast over the rows).
  const Shape shape{3, 5};
  const Strides so{5, 1}, sa{5, 1}, sb{0, 1};
  const auto plan = backend::make_strided_plan<3>(shape, {&so, &sa, &sb});
  for (const DType type : {DType::bf16, DType::f16}) {
    const std::vector<std::uint16_t> ab = bits_of(uniform(15, 401, -4.0F, 4.0F), type);
    const std::vector<std::uint16_t> bb = bits_of(uniform(5, 402, 0.5F, 3.0F), type);
    const Dev<std::uint16_t> a16(ab), b16(bb), out16(15);
    const Dev<float> a32(values_of(ab, type)), b32(values_of(bb, type)), out32(15);
    for (const backend::Binary op :
         {backend::Binary::add, backend::Binary::sub, backend::Binary::mul, backend::Binary::div}) {
      SCOPED_TRACE(::testing::Message() << dtype_name(type) << " op " << static_cast<int>(op));
      emu().binary(op, plan, a32.get(), b32.get(), out32.get());
      emu().binary_16(op, plan, type, a16.get(), b16.get(), out16.get());
      EXPECT_EQ(out16.host(), bits_of(out32.host(), type));
    }
  }
  EXPECT_THROW(cpu().binary_16(backend::Binary::add, plan, DType::bf16, nullptr, nullptr, nullptr),
               std::logic_error);
}

TEST(KernelBackend16Bit, AddReluIsAddThenRelu) {
  // out [3, 5] = relu(a [3, 5] + b [5]) against binary_16 add then unary_16 relu.
  const Shape shape{3, 5};
  const Strides so{5, 1}, sa{5, 1}, sb{0, 1};
  const auto plan = backend::make_strided_plan<3>(shape, {&so, &sa, &sb});
  for (const DType type : {DType::bf16, DType::f16}) {
    SCOPED_TRACE(dtype_name(type));
    const Dev<std::uint16_t> a(bits_of(uniform(15, 481, -2.0F, 2.0F), type)),
        b(bits_of(uniform(5, 482), type)), sum(15), relu(15), fused(15);
    emu().binary_16(backend::Binary::add, plan, type, a.get(), b.get(), sum.get());
    emu().unary_16(backend::Unary::relu, type, sum.get(), relu.get(), 15, 0.0F);
    emu().add_relu(plan, type, a.get(), b.get(), fused.get());
    EXPECT_EQ(fused.host(), relu.host());
  }
  const Dev<float> a(uniform(15, 483, -2.0F, 2.0F)), b(uniform(5, 484)), sum(15), relu(15),
      fused(15);
  emu().binary(backend::Binary::add, plan, a.get(), b.get(), sum.get());
  emu().unary(backend::Unary::relu, sum.get(), relu.get(), 15, 0.0F);
  emu().add_relu(plan, DType::f32, a.get(), b.get(), fused.get());
  EXPECT_EQ(fused.host(), relu.host()) << "f32";
  EXPECT_FALSE(cpu().fuses_relu());
}

TEST(KernelBackend16Bit, UnaryIsTheF32PathRounded) {
  // relu, gelu (its derivative reads x) and mul_scalar: forward and backward.
  const std::size_t n = 300;
  for (const DType type : {DType::bf16, DType::f16}) {
    const std::vector<std::uint16_t> xb = bits_of(uniform(n, 431, -3.0F, 3.0F), type);
    const std::vector<std::uint16_t> gb = bits_of(uniform(n, 432), type);
    const Dev<std::uint16_t> x16(xb), g16(gb), y16(n), dx16(n);
    const Dev<float> x32(values_of(xb, type)), g32(values_of(gb, type)), y32(n), dx32(n);
    for (const backend::Unary op :
         {backend::Unary::relu, backend::Unary::gelu, backend::Unary::mul_scalar}) {
      SCOPED_TRACE(::testing::Message() << dtype_name(type) << " op " << static_cast<int>(op));
      emu().unary(op, x32.get(), y32.get(), static_cast<std::int64_t>(n), 0.75F);
      emu().unary_16(op, type, x16.get(), y16.get(), static_cast<std::int64_t>(n), 0.75F);
      EXPECT_EQ(y16.host(), bits_of(y32.host(), type));
      const bool relu = op == backend::Unary::relu;
      emu().unary_backward(op, g32.get(), relu ? nullptr : x32.get(), relu ? y32.get() : nullptr,
                           dx32.get(), static_cast<std::int64_t>(n), 0.75F);
      emu().unary_backward_16(op, type, g16.get(), relu ? nullptr : x16.get(),
                              relu ? y16.get() : nullptr, dx16.get(), static_cast<std::int64_t>(n),
                              0.75F);
      EXPECT_EQ(dx16.host(), bits_of(dx32.host(), type));
    }
  }
}

TEST(KernelBackend16Bit, ActivationBackward16IsTheF32Path) {
  // 70 rows: db's two stages; 50 rows: one. g and saved in bf16 against the
  // same values in f32; db in f32, and in bf16: the f32 db rounded once.
  for (const std::int64_t rows : {70, 50}) {
    const std::int64_t cols = 24;
    const auto n = static_cast<std::size_t>(rows * cols);
    const std::vector<std::uint16_t> gb = bits_of(uniform(n, 421), DType::bf16);
    const std::vector<std::uint16_t> sb = bits_of(uniform(n, 422), DType::bf16);
    const Dev<std::uint16_t> g16(gb), saved16(sb), dz_a(n), dz_b(n);
    const Dev<float> g32(values_of(gb, DType::bf16)), saved32(values_of(sb, DType::bf16));
    const Dev<float> db_a(static_cast<std::size_t>(cols)), db_b(static_cast<std::size_t>(cols));
    const Dev<std::uint16_t> db_16(static_cast<std::size_t>(cols));
    for (const Activation act : {Activation::none, Activation::relu, Activation::gelu}) {
      for (const DType g_type : {DType::f32, DType::bf16}) {
        for (const DType saved_type : {DType::f32, DType::bf16}) {
          SCOPED_TRACE(::testing::Message()
                       << rows << " rows " << static_cast<int>(act) << " g " << dtype_name(g_type)
                       << " saved " << dtype_name(saved_type));
          emu().activation_backward_bf16(act, g32.get(), saved32.get(), dz_a.get(), db_a.get(),
                                         rows, cols, 1.25F);
          const void* g = g_type == DType::bf16 ? static_cast<const void*>(g16.get()) : g32.get();
          const void* saved =
              saved_type == DType::bf16 ? static_cast<const void*>(saved16.get()) : saved32.get();
          emu().activation_backward_16(act, g_type, g, saved_type, saved, DType::bf16, dz_b.get(),
                                       DType::f32, db_b.get(), rows, cols, 1.25F, false);
          EXPECT_EQ(dz_b.host(), dz_a.host());
          EXPECT_EQ(db_b.host(), db_a.host());
          emu().activation_backward_16(act, g_type, g, saved_type, saved, DType::bf16, dz_b.get(),
                                       DType::bf16, db_16.get(), rows, cols, 1.25F, false);
          EXPECT_EQ(dz_b.host(), dz_a.host());
          EXPECT_EQ(db_16.host(), bits_of(db_a.host(), DType::bf16));
          // Again, added into that db (in f32, rounded once).
          std::vector<float> twice = values_of(db_16.host(), DType::bf16);
          const std::vector<float> db_f32 = db_a.host();
          for (std::size_t i = 0; i < twice.size(); ++i) twice[i] += db_f32[i];
          emu().activation_backward_16(act, g_type, g, saved_type, saved, DType::bf16, dz_b.get(),
                                       DType::bf16, db_16.get(), rows, cols, 1.25F, true);
          EXPECT_EQ(dz_b.host(), dz_a.host());
          EXPECT_EQ(db_16.host(), bits_of(twice, DType::bf16)) << "db accumulated";
        }
      }
    }
    EXPECT_THROW(emu().activation_backward_16(Activation::relu, DType::f16, g16.get(), DType::f32,
                                              saved32.get(), DType::bf16, dz_b.get(), DType::f32,
                                              nullptr, rows, cols, 1.0F, false),
                 std::invalid_argument);
    EXPECT_THROW(emu().activation_backward_16(Activation::relu, DType::bf16, g16.get(), DType::f32,
                                              saved32.get(), DType::bf16, dz_b.get(), DType::f16,
                                              db_16.get(), rows, cols, 1.0F, false),
                 std::invalid_argument);
  }
}

TEST(KernelBackend16Bit, BiasActivation16IsBiasActivationDropoutAndACast) {
  const std::int64_t rows = 9, cols = 37;
  const auto n = static_cast<std::size_t>(rows * cols);
  const std::vector<float> y = uniform(n, 423, -2.0F, 2.0F);
  const std::vector<float> bias = uniform(static_cast<std::size_t>(cols), 424);
  const Dev<float> y_dev(y), composed(n);
  const Dev<std::uint16_t> fused(n);
  const RandomKey key{5, 11, 0, 3};
  for (const Activation act : {Activation::none, Activation::relu}) {
    for (const bool dropped : {false, true}) {
      for (const DType type : {DType::bf16, DType::f16}) {
        // The bias in f32, or in `type` (read as it is: its f32 values' bits).
        for (const DType bias_type : {DType::f32, type}) {
          SCOPED_TRACE(::testing::Message()
                       << static_cast<int>(act) << " dropped " << dropped << " " << dtype_name(type)
                       << " bias " << dtype_name(bias_type));
          const std::vector<std::uint16_t> bias_bits = bits_of(bias, type);
          const Dev<float> bias32(bias_type == DType::f32 ? bias : values_of(bias_bits, type));
          const Dev<std::uint16_t> bias16(bias_bits);
          const Dev<float> work(y);
          emu().bias_activation(work.get(), nullptr, bias32.get(), rows, cols, act);
          if (dropped) {
            emu().dropout_forward(key, 0.25F, 4.0F / 3.0F, DType::f32, work.get(), work.get(),
                                  rows * cols, nullptr);
          }
          const void* b =
              bias_type == DType::f32 ? static_cast<const void*>(bias32.get()) : bias16.get();
          emu().bias_activation_16(type, y_dev.get(), bias_type, b, rows, cols, act,
                                   dropped ? &key : nullptr, 0.25F, 4.0F / 3.0F, fused.get());
          EXPECT_EQ(fused.host(), bits_of(work.host(), type));
        }
      }
    }
  }
  EXPECT_THROW(emu().bias_activation_16(DType::bf16, y_dev.get(), DType::f32, nullptr, rows, cols,
                                        Activation::gelu, nullptr, 0.0F, 1.0F, fused.get()),
               std::invalid_argument);
  const Dev<std::uint16_t> f16_bias(bits_of(bias, DType::f16));
  EXPECT_THROW(emu().bias_activation_16(DType::bf16, y_dev.get(), DType::f16, f16_bias.get(), rows,
                                        cols, Activation::relu, nullptr, 0.0F, 1.0F, fused.get()),
               std::invalid_argument);
}

TEST(KernelBackend16Bit, BatchNormIsTheF32PathRounded) {
  // [n, c, inner] with more than one chunk per channel.
  const backend::BatchNormShape s{5, 3, 700};
  const auto n = static_cast<std::size_t>(s.n * s.c * s.inner);
  const auto c = static_cast<std::size_t>(s.c);
  const Dev<float> scale(uniform(c, 441, 0.5F, 1.5F)), shift(uniform(c, 442));
  const Dev<float> invstd(uniform(c, 443, 0.5F, 2.0F)), gamma(uniform(c, 444, 0.5F, 1.5F));
  for (const DType type : {DType::bf16, DType::f16}) {
    SCOPED_TRACE(dtype_name(type));
    const std::vector<std::uint16_t> xb = bits_of(uniform(n, 445, -2.0F, 4.0F), type);
    const std::vector<std::uint16_t> gb = bits_of(uniform(n, 446), type);
    const Dev<std::uint16_t> x16(xb), g16(gb), y16(n), dx16(n);
    const Dev<float> x32(values_of(xb, type)), g32(values_of(gb, type)), y32(n), dx32(n);
    const Dev<float> mean32(c), var32(c), mean16(c), var16(c);
    emu().batch_norm_stats(s, x32.get(), mean32.get(), var32.get());
    emu().batch_norm_stats_16(s, type, x16.get(), mean16.get(), var16.get());
    EXPECT_EQ(mean16.host(), mean32.host());
    EXPECT_EQ(var16.host(), var32.host());
    emu().batch_norm_apply(s, x32.get(), scale.get(), shift.get(), y32.get());
    emu().batch_norm_apply_16(s, type, x16.get(), scale.get(), shift.get(), y16.get());
    EXPECT_EQ(y16.host(), bits_of(y32.host(), type));
    const Dev<float> dg32(c), db32(c), dg16(c), db16(c);
    emu().batch_norm_backward(s, x32.get(), g32.get(), mean32.get(), invstd.get(), gamma.get(),
                              true, dx32.get(), dg32.get(), db32.get());
    emu().batch_norm_backward_16(s, type, x16.get(), g16.get(), mean16.get(), invstd.get(),
                                 DType::f32, gamma.get(), true, dx16.get(), dg16.get(), db16.get(),
                                 {});
    EXPECT_EQ(dx16.host(), bits_of(dx32.host(), type));
    EXPECT_EQ(dg16.host(), dg32.host());
    EXPECT_EQ(db16.host(), db32.host());
    // A 16-bit model's gamma read as it is, dgamma and dbeta written rounded.
    const std::vector<std::uint16_t> gamma_bits = bits_of(gamma.host(), type);
    const Dev<std::uint16_t> gamma16(gamma_bits), dgp(c), dbp(c), dxp(n), dxv(n);
    const Dev<float> gamma_values(values_of(gamma_bits, type)), dgv(c), dbv(c);
    emu().batch_norm_backward_16(s, type, x16.get(), g16.get(), mean16.get(), invstd.get(),
                                 DType::f32, gamma_values.get(), true, dxv.get(), dgv.get(),
                                 dbv.get(), {});
    emu().batch_norm_backward_16(s, type, x16.get(), g16.get(), mean16.get(), invstd.get(), type,
                                 gamma16.get(), true, dxp.get(), dgp.get(), dbp.get(), {});
    EXPECT_EQ(dxp.host(), dxv.host());
    EXPECT_EQ(dgp.host(), bits_of(dgv.host(), type));
    EXPECT_EQ(dbp.host(), bits_of(dbv.host(), type));
    // Again, dgamma and dbeta added into those (the sum in f32, rounded
    // once), with and without the fused relu's entry point.
    for (const bool fused : {false, true}) {
      SCOPED_TRACE(fused ? "batch_norm_backward_relu" : "batch_norm_backward_16");
      std::vector<float> dg_want = values_of(dgp.host(), type);
      std::vector<float> db_want = values_of(dbp.host(), type);
      const std::vector<float> dg_f32 = dgv.host(), db_f32 = dbv.host();
      for (std::size_t i = 0; i < c; ++i) {
        dg_want[i] += dg_f32[i];
        db_want[i] += db_f32[i];
      }
      const backend::NormGradAccumulation params{false, true, true};
      if (fused) {  // a mask that passes everything: the plain backward's sums
        const Dev<float> pass_scale(std::vector<float>(c, 0.0F)),
            pass_shift(std::vector<float>(c, 1.0F));
        emu().batch_norm_backward_relu(s, type, x16.get(),
                                       {nullptr, pass_scale.get(), pass_shift.get()}, g16.get(),
                                       mean16.get(), invstd.get(), type, gamma16.get(), true,
                                       nullptr, dgp.get(), dbp.get(), nullptr, params);
      } else {
        emu().batch_norm_backward_16(s, type, x16.get(), g16.get(), mean16.get(), invstd.get(),
                                     type, gamma16.get(), true, nullptr, dgp.get(), dbp.get(),
                                     params);
      }
      EXPECT_EQ(dgp.host(), bits_of(dg_want, type)) << "dgamma accumulated";
      EXPECT_EQ(dbp.host(), bits_of(db_want, type)) << "dbeta accumulated";
    }
    EXPECT_THROW(emu().batch_norm_backward_16(s, type, x16.get(), g16.get(), mean16.get(),
                                              invstd.get(), type, gamma16.get(), true, dxp.get(),
                                              dgp.get(), dbp.get(), {true, false, false}),
                 std::invalid_argument);
  }
}

// A training step's statistics and coefficients in one call (the CUDA back
// end prepares in the kernel that finishes the statistics): the bits of
// batch_norm_stats(_16) then batch_norm_prepare, running statistics too; on
// [n, c, inner] and channels-last rows, f32 and 16-bit x and parameters.
TEST(KernelBackendChecks, BatchNormStatsPrepareIsStatsThenPrepare) {
  for (const backend::BatchNormShape& s :
       {backend::BatchNormShape{5, 3, 700}, backend::BatchNormShape{900, 37, 1}}) {
    const auto n = static_cast<std::size_t>(s.n * s.c * s.inner);
    const auto c = static_cast<std::size_t>(s.c);
    for (const DType type : {DType::f32, DType::bf16}) {
      SCOPED_TRACE(::testing::Message() << dtype_name(type) << " inner " << s.inner);
      const std::vector<float> x = uniform(n, 461, -2.0F, 4.0F);
      const std::vector<std::uint16_t> x_bits = bits_of(x, DType::bf16);
      const Dev<float> x32(x);
      const Dev<std::uint16_t> x16(x_bits);
      const void* xd = type == DType::f32 ? static_cast<const void*>(x32.get()) : x16.get();
      const std::vector<std::uint16_t> gamma_bits = bits_of(uniform(c, 462, 0.5F, 1.5F), type);
      const Dev<std::uint16_t> gamma16(gamma_bits), beta16(bits_of(uniform(c, 463), type));
      const Dev<float> gamma32(uniform(c, 462, 0.5F, 1.5F)), beta32(uniform(c, 463));
      std::vector<std::vector<float>> results;
      for (const bool fused : {false, true}) {
        const Dev<float> mean(c), var(c), invstd(c), scale(c), shift(c);
        const Dev<float> rm(uniform(c, 464)), rv(uniform(c, 465, 0.5F, 2.0F));
        backend::BatchNormPrepare args;
        args.c = s.c;
        args.momentum = 0.1F;
        args.unbias = 1.5F;
        args.mean = mean.get();
        args.running_mean = rm.get();
        args.running_var = rv.get();
        args.gamma = type == DType::f32 ? static_cast<const void*>(gamma32.get()) : gamma16.get();
        args.beta = type == DType::f32 ? static_cast<const void*>(beta32.get()) : beta16.get();
        args.param_type = type;
        args.invstd = invstd.get();
        args.scale = scale.get();
        args.shift = shift.get();
        if (fused) {
          emu().batch_norm_stats_prepare(s, type, xd, var.get(), args);
        } else {
          if (type == DType::f32) {
            emu().batch_norm_stats(s, x32.get(), mean.get(), var.get());
          } else {
            emu().batch_norm_stats_16(s, type, xd, mean.get(), var.get());
          }
          args.var = var.get();
          emu().batch_norm_prepare(args);
        }
        for (const Dev<float>* out : {&mean, &var, &invstd, &scale, &shift, &rm, &rv}) {
          results.push_back(out->host());
        }
      }
      for (std::size_t i = 0; i < 7; ++i) EXPECT_EQ(results[i + 7], results[i]) << "output " << i;
    }
  }
}

TEST(KernelBackend16Bit, BatchNormPrepareReads16BitGammaAndBeta) {
  const std::size_t c = 37;
  const std::vector<float> mean = uniform(c, 451), var = uniform(c, 452, 0.5F, 2.0F);
  for (const DType type : {DType::bf16, DType::f16}) {
    SCOPED_TRACE(dtype_name(type));
    const std::vector<std::uint16_t> gb = bits_of(uniform(c, 453, 0.5F, 1.5F), type),
                                     bb = bits_of(uniform(c, 454), type);
    const Dev<std::uint16_t> gamma16(gb), beta16(bb);
    const Dev<float> gamma32(values_of(gb, type)), beta32(values_of(bb, type));
    std::vector<std::vector<float>> results;
    for (const bool sixteen : {false, true}) {
      const Dev<float> m(mean), v(var), rm(uniform(c, 455)), rv(uniform(c, 456, 0.5F, 2.0F));
      const Dev<float> invstd(c), scale(c), shift(c);
      backend::BatchNormPrepare args;
      args.c = static_cast<std::int64_t>(c);
      args.unbias = 1.5F;
      args.mean = m.get();
      args.var = v.get();
      args.running_mean = rm.get();
      args.running_var = rv.get();
      args.gamma = sixteen ? static_cast<const void*>(gamma16.get()) : gamma32.get();
      args.beta = sixteen ? static_cast<const void*>(beta16.get()) : beta32.get();
      args.param_type = sixteen ? type : DType::f32;
      args.invstd = invstd.get();
      args.scale = scale.get();
      args.shift = shift.get();
      emu().batch_norm_prepare(args);
      for (const Dev<float>* out : {&invstd, &scale, &shift, &rm, &rv}) {
        results.push_back(out->host());
      }
    }
    for (std::size_t i = 0; i < 5; ++i) EXPECT_EQ(results[i + 5], results[i]) << "output " << i;
  }
  backend::BatchNormPrepare bad;
  bad.param_type = DType::bf16;
  EXPECT_THROW(cpu().batch_norm_prepare(bad), std::logic_error);
}

// A 3 x 3 convolution of 8 into 16 channels on 2 images of 10 x 10, padded 1.
backend::Conv2dShape padded_3x3_conv() {
  backend::Conv2dShape s;
  s.n = 2;
  s.c_in = 8;
  s.h = s.w = 10;
  s.c_out = 16;
  s.kernel_h = s.kernel_w = 3;
  s.pad_h = s.pad_w = 1;
  s.out_h = s.out_w = 10;
  return s;
}

TEST(KernelBackend16Bit, Conv2dMatchesTheF32Path) {
  // The emulated device converts to f32 (the same bits), inside its 16-bit
  // convolutions or, without them, in the back end's copies; a GPU runs cuDNN's
  // bf16 / f16 convolutions, which accumulate in f32 in their own order. A
  // second backward adds its dx into the first's.
  backend::Conv2dShape s = padded_3x3_conv();
  const auto nx = static_cast<std::size_t>(s.x_elements());
  const auto nw = static_cast<std::size_t>(s.w_elements());
  const auto ny = static_cast<std::size_t>(s.y_elements());
#ifdef RIG_KERNEL_BACKEND_ON_GPU
  const float tol = 1e-2F;
#else
  const float tol = 0.0F;
#endif
  for (const bool channels_last : {false, true})
    for (Backend* conv : conv16_backends())
      for (const DType type : {DType::bf16, DType::f16}) {
        s.channels_last = channels_last;
        SCOPED_TRACE(std::string(dtype_name(type)) + (conv == &emu() ? "" : ", f32 convolutions") +
                     (channels_last ? ", channels last" : ""));
        const std::vector<std::uint16_t> xb = bits_of(uniform(nx, 451), type);
        const std::vector<std::uint16_t> wb = bits_of(uniform(nw, 452), type);
        const std::vector<std::uint16_t> gb = bits_of(uniform(ny, 453), type);
        const Dev<std::uint16_t> x16(xb), w16(wb), g16(gb), y16(ny), dx16(nx), dw16(nw);
        const Dev<float> x32(values_of(xb, type)), w32(values_of(wb, type)),
            g32(values_of(gb, type));
        const Dev<float> y32(ny), dx32(nx), dw32(nw);
        emu().conv2d_forward(s, x32.get(), w32.get(), nullptr, y32.get());
        conv->conv2d_forward_16(s, type, x16.get(), w16.get(), y16.get());
        emu().conv2d_backward(s, x32.get(), w32.get(), g32.get(), dx32.get(), dw32.get(), nullptr);
        conv->conv2d_backward_16(s, type, x16.get(), w16.get(), g16.get(), dx16.get(), dw16.get(),
                                 {});
        const auto rounded = [&](const std::vector<float>& v) {
          return values_of(bits_of(v, type), type);
        };
        EXPECT_TRUE(close(values_of(y16.host(), type), rounded(y32.host()), tol, tol)) << "y";
        EXPECT_TRUE(close(values_of(dx16.host(), type), rounded(dx32.host()), tol, tol)) << "dx";
        EXPECT_TRUE(close(values_of(dw16.host(), type), rounded(dw32.host()), tol, tol)) << "dW";
        // Again, dx and then dW added into those (in f32, rounded once; beta 1
        // on a GPU).
        std::vector<float> twice = values_of(dx16.host(), type);
        const std::vector<float> dx_f32 = dx32.host();
        for (std::size_t i = 0; i < twice.size(); ++i) twice[i] += dx_f32[i];
        conv->conv2d_backward_16(s, type, x16.get(), w16.get(), g16.get(), dx16.get(), nullptr,
                                 {true, false});
        EXPECT_TRUE(close(values_of(dx16.host(), type), rounded(twice), tol, tol))
            << "dx accumulated";
        std::vector<float> dw_twice = values_of(dw16.host(), type);
        const std::vector<float> dw_f32 = dw32.host();
        for (std::size_t i = 0; i < dw_twice.size(); ++i) dw_twice[i] += dw_f32[i];
        conv->conv2d_backward_16(s, type, x16.get(), w16.get(), g16.get(), nullptr, dw16.get(),
                                 {false, true});
        EXPECT_TRUE(close(values_of(dw16.host(), type), rounded(dw_twice), tol, tol))
            << "dW accumulated";
      }
}

TEST(KernelBackend16Bit, Conv2dOnF32StorageAddsItsGradients) {
  // The ops send f32 convolutions without bias through the same entry
  // points (type f32): y, dx and dW as the f32 path's, and dx / dW added
  // into what their buffers hold (beta 1 on a GPU: one f32 add, an add's
  // bits on the emulated device), with or without the device's own.
  backend::Conv2dShape s = padded_3x3_conv();
  const auto nx = static_cast<std::size_t>(s.x_elements());
  const auto nw = static_cast<std::size_t>(s.w_elements());
  const auto ny = static_cast<std::size_t>(s.y_elements());
#ifdef RIG_KERNEL_BACKEND_ON_GPU
  const float tol = 1e-4F;
#else
  const float tol = 0.0F;
#endif
  for (const bool channels_last : {false, true})
    for (Backend* conv : conv16_backends()) {
      s.channels_last = channels_last;
      SCOPED_TRACE(std::string(conv == &emu() ? "" : "f32 convolutions") +
                   (channels_last ? ", channels last" : ""));
      const std::vector<float> xv = uniform(nx, 461), wv = uniform(nw, 462), gv = uniform(ny, 463);
      const std::vector<float> held_x = uniform(nx, 464), held_w = uniform(nw, 465);
      const Dev<float> x(xv), w(wv), g(gv), y(ny), dx(nx), dw(nw);
      const Dev<float> y_want(ny), dx_want(nx), dw_want(nw);
      emu().conv2d_forward(s, x.get(), w.get(), nullptr, y_want.get());
      emu().conv2d_backward(s, x.get(), w.get(), g.get(), dx_want.get(), dw_want.get(), nullptr);
      conv->conv2d_forward_16(s, DType::f32, x.get(), w.get(), y.get());
      conv->conv2d_backward_16(s, DType::f32, x.get(), w.get(), g.get(), dx.get(), dw.get(), {});
      EXPECT_TRUE(close(y.host(), y_want.host(), tol, tol)) << "y";
      EXPECT_TRUE(close(dx.host(), dx_want.host(), tol, tol)) << "dx";
      EXPECT_TRUE(close(dw.host(), dw_want.host(), tol, tol)) << "dW";
      const Dev<float> dx_held(held_x), dw_held(held_w);
      conv->conv2d_backward_16(s, DType::f32, x.get(), w.get(), g.get(), dx_held.get(),
                               dw_held.get(), {true, true});
      std::vector<float> sum_x = held_x, sum_w = held_w;
      const std::vector<float> px = dx_want.host(), pw = dw_want.host();
      for (std::size_t i = 0; i < nx; ++i) sum_x[i] += px[i];
      for (std::size_t i = 0; i < nw; ++i) sum_w[i] += pw[i];
      EXPECT_TRUE(close(dx_held.host(), sum_x, tol, tol)) << "dx added";
      EXPECT_TRUE(close(dw_held.host(), sum_w, tol, tol)) << "dW added";
    }
}

TEST(KernelBackend16Bit, BatchNormReluIsBatchNormThenRelu) {
  // The fused entry points against batch norm's and relu's own, bit for bit,
  // on 16-bit storage (a relu of a 16-bit value is exact) and on f32; [n, c,
  // inner] and channels-last rows (inner 1). The backward also with relu's
  // backward of dy stored (masked_dy, batch_norm_add_relu's residual
  // gradient), with and without the sums (dgamma / dbeta / batch statistics)
  // whose pass stores it.
  for (const backend::BatchNormShape s :
       {backend::BatchNormShape{5, 3, 700}, backend::BatchNormShape{300, 37, 1}})
    for (const DType type : {DType::f32, DType::bf16, DType::f16}) {
      SCOPED_TRACE(::testing::Message() << dtype_name(type) << " inner " << s.inner);
      const auto n = static_cast<std::size_t>(s.n * s.c * s.inner);
      const auto c = static_cast<std::size_t>(s.c);
      const Dev<float> scale(uniform(c, 471, 0.5F, 1.5F)), shift(uniform(c, 472));
      const Dev<float> invstd(uniform(c, 473, 0.5F, 2.0F)), gamma(uniform(c, 474, 0.5F, 1.5F));
      const Dev<float> mean(uniform(c, 475));
      const std::size_t bytes = type == DType::f32 ? 4 : 2;
      // Elements as raw bytes of `type` (f32 through its bits).
      const auto stored = [&](const std::vector<float>& v) {
        std::vector<std::uint16_t> out(v.size() * bytes / 2);
        if (type == DType::f32) {
          std::memcpy(out.data(), v.data(), v.size() * 4);
        } else {
          out = bits_of(v, type);
        }
        return out;
      };
      // Every 7th x near -shift / scale: batch norm's output about 0, where
      // rounding to the type decides the relu's mask (f16 flushes the
      // smallest to 0).
      std::vector<float> x_values = uniform(n, 476, -2.0F, 2.0F);
      const std::vector<float> scale_values = uniform(c, 471, 0.5F, 1.5F);
      const std::vector<float> shift_values = uniform(c, 472);
      for (std::size_t t = 0; t < n; t += 7) {
        const std::size_t ch = (t / static_cast<std::size_t>(s.inner)) % c;
        x_values[t] = -shift_values[ch] / scale_values[ch];
      }
      const Dev<std::uint16_t> x(stored(x_values)), g(stored(uniform(n, 477))), y_bn(n * bytes / 2),
          y_relu(n * bytes / 2), y_fused(n * bytes / 2), g_relu(n * bytes / 2), dx(n * bytes / 2),
          dx_fused(n * bytes / 2);
      if (type == DType::f32) {
        emu().batch_norm_apply(s, reinterpret_cast<const float*>(x.get()), scale.get(), shift.get(),
                               reinterpret_cast<float*>(y_bn.get()));
        emu().unary(backend::Unary::relu, reinterpret_cast<const float*>(y_bn.get()),
                    reinterpret_cast<float*>(y_relu.get()), static_cast<std::int64_t>(n), 0.0F);
      } else {
        emu().batch_norm_apply_16(s, type, x.get(), scale.get(), shift.get(), y_bn.get());
        emu().unary_16(backend::Unary::relu, type, y_bn.get(), y_relu.get(),
                       static_cast<std::int64_t>(n), 0.0F);
      }
      emu().batch_norm_apply_relu(s, type, x.get(), scale.get(), shift.get(), y_fused.get());
      EXPECT_EQ(y_fused.host(), y_relu.host()) << "y";

      const Dev<float> dg(c), db(c), dg_fused(c), db_fused(c);
      if (type == DType::f32) {
        emu().unary_backward(backend::Unary::relu, reinterpret_cast<const float*>(g.get()), nullptr,
                             reinterpret_cast<const float*>(y_relu.get()),
                             reinterpret_cast<float*>(g_relu.get()), static_cast<std::int64_t>(n),
                             0.0F);
        emu().batch_norm_backward(s, reinterpret_cast<const float*>(x.get()),
                                  reinterpret_cast<const float*>(g_relu.get()), mean.get(),
                                  invstd.get(), gamma.get(), true,
                                  reinterpret_cast<float*>(dx.get()), dg.get(), db.get());
      } else {
        emu().unary_backward_16(backend::Unary::relu, type, g.get(), nullptr, y_relu.get(),
                                g_relu.get(), static_cast<std::int64_t>(n), 0.0F);
        emu().batch_norm_backward_16(s, type, x.get(), g_relu.get(), mean.get(), invstd.get(),
                                     DType::f32, gamma.get(), true, dx.get(), dg.get(), db.get(),
                                     {});
      }
      emu().batch_norm_backward_relu(s, type, x.get(), {y_fused.get()}, g.get(), mean.get(),
                                     invstd.get(), DType::f32, gamma.get(), true, dx_fused.get(),
                                     dg_fused.get(), db_fused.get(), nullptr, {});
      EXPECT_EQ(dx_fused.host(), dx.host()) << "dx";
      EXPECT_EQ(dg_fused.host(), dg.host()) << "dgamma";
      EXPECT_EQ(db_fused.host(), db.host()) << "dbeta";

      const Dev<std::uint16_t> masked(n * bytes / 2), dx_masked(n * bytes / 2);
      const Dev<float> dg_masked(c), db_masked(c);
      emu().batch_norm_backward_relu(s, type, x.get(), {y_fused.get()}, g.get(), mean.get(),
                                     invstd.get(), DType::f32, gamma.get(), true, dx_masked.get(),
                                     dg_masked.get(), db_masked.get(), masked.get(), {});
      EXPECT_EQ(masked.host(), g_relu.host()) << "masked dy";
      EXPECT_EQ(dx_masked.host(), dx.host()) << "dx, masked dy stored";
      EXPECT_EQ(dg_masked.host(), dg.host()) << "dgamma, masked dy stored";
      EXPECT_EQ(db_masked.host(), db.host()) << "dbeta, masked dy stored";
      // No sums to take (dx only, running statistics): relu's backward alone.
      const Dev<std::uint16_t> masked_alone(n * bytes / 2), dx_alone(n * bytes / 2),
          dx_unfused(n * bytes / 2);
      emu().batch_norm_backward_relu(s, type, x.get(), {y_fused.get()}, g.get(), mean.get(),
                                     invstd.get(), DType::f32, gamma.get(), false, dx_alone.get(),
                                     nullptr, nullptr, masked_alone.get(), {});
      emu().batch_norm_backward_16(s, type, x.get(), g_relu.get(), mean.get(), invstd.get(),
                                   DType::f32, gamma.get(), false, dx_unfused.get(), nullptr,
                                   nullptr, {});
      EXPECT_EQ(masked_alone.host(), g_relu.host()) << "masked dy without the sums";
      EXPECT_EQ(dx_alone.host(), dx_unfused.host()) << "dx without the sums";

      // The mask recomputed from x with the forward's scale and shift (no
      // read of y): the same bits, with the sums and without.
      const backend::BatchNormReluMask from_x{nullptr, scale.get(), shift.get()};
      const Dev<std::uint16_t> dx_from_x(n * bytes / 2), dx_from_x_alone(n * bytes / 2);
      const Dev<float> dg_from_x(c), db_from_x(c);
      emu().batch_norm_backward_relu(s, type, x.get(), from_x, g.get(), mean.get(), invstd.get(),
                                     DType::f32, gamma.get(), true, dx_from_x.get(),
                                     dg_from_x.get(), db_from_x.get(), nullptr, {});
      EXPECT_EQ(dx_from_x.host(), dx.host()) << "dx, mask from x";
      EXPECT_EQ(dg_from_x.host(), dg.host()) << "dgamma, mask from x";
      EXPECT_EQ(db_from_x.host(), db.host()) << "dbeta, mask from x";
      emu().batch_norm_backward_relu(s, type, x.get(), from_x, g.get(), mean.get(), invstd.get(),
                                     DType::f32, gamma.get(), false, dx_from_x_alone.get(), nullptr,
                                     nullptr, nullptr, {});
      EXPECT_EQ(dx_from_x_alone.host(), dx_unfused.host()) << "dx without the sums, mask from x";
    }
}

TEST(KernelBackend16Bit, BatchNormAddReluIsApplyThenAddRelu) {
  // The fused entry point against batch norm's apply and then add_relu with
  // the residual, bit for bit, on 16-bit storage and on f32; [n, c, inner]
  // and channels-last rows (inner 1), in packs and element by element. Also
  // with the residual another batch norm's input (residual_scale and
  // _shift): against that batch norm's apply, stored, as the residual.
  for (const backend::BatchNormShape s :
       {backend::BatchNormShape{5, 3, 700}, backend::BatchNormShape{300, 37, 1},
        backend::BatchNormShape{5, 3, 704}, backend::BatchNormShape{300, 40, 1}}) {
    const auto n = static_cast<std::size_t>(s.n * s.c * s.inner);
    const auto c = static_cast<std::size_t>(s.c);
    const Dev<float> scale(uniform(c, 491, 0.5F, 1.5F)), shift(uniform(c, 492));
    const Dev<float> r_scale(uniform(c, 495, 0.5F, 1.5F)), r_shift(uniform(c, 496));
    const Shape shape{static_cast<std::int64_t>(n)};
    const Strides flat{1};
    const auto plan = backend::make_strided_plan<3>(shape, {&flat, &flat, &flat});
    for (const DType type : {DType::f32, DType::bf16, DType::f16}) {
      SCOPED_TRACE(::testing::Message()
                   << dtype_name(type) << " [" << s.n << ", " << s.c << ", " << s.inner << "]");
      const std::size_t words = type == DType::f32 ? 2 * n : n;  // in 16-bit words
      const Dev<std::uint16_t> x(stored_words(uniform(n, 493, -2.0F, 2.0F), type)),
          r(stored_words(uniform(n, 494, -1.0F, 1.0F), type)), y_bn(words), r_bn(words), y(words),
          y_fused(words), y_r(words), y_r_fused(words);
      const auto apply = [&](const Dev<std::uint16_t>& in, const Dev<float>& sc,
                             const Dev<float>& sh, const Dev<std::uint16_t>& out) {
        if (type == DType::f32) {
          emu().batch_norm_apply(s, reinterpret_cast<const float*>(in.get()), sc.get(), sh.get(),
                                 reinterpret_cast<float*>(out.get()));
        } else {
          emu().batch_norm_apply_16(s, type, in.get(), sc.get(), sh.get(), out.get());
        }
      };
      apply(x, scale, shift, y_bn);
      emu().add_relu(plan, type, y_bn.get(), r.get(), y.get());
      EXPECT_FALSE(emu().batch_norm_apply_add_relu(s, type, x.get(), scale.get(), shift.get(),
                                                   r.get(), nullptr, nullptr, y_fused.get(),
                                                   nullptr));
      EXPECT_EQ(y_fused.host(), y.host()) << "residual as read";
      apply(r, r_scale, r_shift, r_bn);
      emu().add_relu(plan, type, y_bn.get(), r_bn.get(), y_r.get());
      emu().batch_norm_apply_add_relu(s, type, x.get(), scale.get(), shift.get(), r.get(),
                                      r_scale.get(), r_shift.get(), y_r_fused.get(), nullptr);
      EXPECT_EQ(y_r_fused.host(), y_r.host()) << "residual normalised";
    }
  }
  EXPECT_THROW(cpu().batch_norm_apply_add_relu({2, 2, 1}, DType::f32, nullptr, nullptr, nullptr,
                                               nullptr, nullptr, nullptr, nullptr, nullptr),
               std::logic_error);
}

TEST(KernelBackend16Bit, BatchNormAddReluStoresTheReluMaskAsBits) {
  // Where the apply goes in packs ([n, c, inner] with inner % 8 == 0, or
  // channels last with c % 8 == 0), batch_norm_apply_add_relu also stores the
  // relu's mask, the stored y > 0, a bit per element; the backward from those
  // bits gives the backward from y bit for bit (masked dy, dx, dgamma,
  // dbeta), with the sums and without them (dx from running statistics
  // only). Elsewhere it stores none and says so.
  struct Case {
    backend::BatchNormShape s;
    bool packed;
  };
  for (const Case& k : {Case{{5, 3, 704}, true}, Case{{300, 40, 1}, true},
                        Case{{300, 37, 1}, false}, Case{{5, 3, 700}, false}}) {
    const backend::BatchNormShape s = k.s;
    const auto n = static_cast<std::size_t>(s.n * s.c * s.inner);
    const auto c = static_cast<std::size_t>(s.c);
    const std::vector<float> scale_values = uniform(c, 501, 0.5F, 1.5F);
    const std::vector<float> shift_values = uniform(c, 502);
    const Dev<float> scale(scale_values), shift(shift_values);
    const Dev<float> invstd(uniform(c, 503, 0.5F, 2.0F)), gamma(uniform(c, 504, 0.5F, 1.5F));
    const Dev<float> mean(uniform(c, 505));
    // Every 5th x at -shift / scale with no residual: the relu's input about
    // 0, where rounding to the type decides the mask.
    std::vector<float> x_values = uniform(n, 506, -2.0F, 2.0F);
    std::vector<float> r_values = uniform(n, 507, -1.0F, 1.0F);
    for (std::size_t t = 0; t < n; t += 5) {
      const std::size_t ch = (t / static_cast<std::size_t>(s.inner)) % c;
      x_values[t] = -shift_values[ch] / scale_values[ch];
      r_values[t] = 0.0F;
    }
    for (const DType type : {DType::f32, DType::bf16, DType::f16}) {
      SCOPED_TRACE(::testing::Message()
                   << dtype_name(type) << " [" << s.n << ", " << s.c << ", " << s.inner << "]");
      const std::size_t words = type == DType::f32 ? 2 * n : n;  // in 16-bit words
      const Dev<std::uint16_t> x(stored_words(x_values, type)), r(stored_words(r_values, type)),
          g(stored_words(uniform(n, 508), type));
      const Dev<std::uint16_t> y(words);
      const std::size_t bytes = (n + 7) / 8;
      const Dev<std::uint8_t> bits(bytes);
      const bool wrote =
          emu().batch_norm_apply_add_relu(s, type, x.get(), scale.get(), shift.get(), r.get(),
                                          nullptr, nullptr, y.get(), bits.get());
      EXPECT_EQ(wrote, k.packed);
      if (!wrote) {
        EXPECT_EQ(bits.host(), poisoned<std::uint8_t>(bytes)) << "bits written where not packed";
        continue;
      }
      const std::vector<float> yv = word_values(y.host(), type);
      std::vector<std::uint8_t> want(bytes, 0);
      std::size_t zeros = 0;
      for (std::size_t e = 0; e < n; ++e) {
        if (yv[e] > 0.0F) want[e / 8] = static_cast<std::uint8_t>(want[e / 8] | (1U << (e % 8)));
        if (yv[e] == 0.0F) ++zeros;
      }
      EXPECT_EQ(bits.host(), want);
      EXPECT_GT(zeros, n / 4) << "the relu cut too few elements to test its mask";

      backend::BatchNormReluMask from_bits;
      from_bits.bits = bits.get();
      for (const bool sums : {true, false}) {
        SCOPED_TRACE(sums ? "with the sums" : "dx from running statistics only");
        const Dev<std::uint16_t> masked_y(words), masked_b(words), dx_y(words), dx_b(words);
        const Dev<float> dg_y(c), db_y(c), dg_b(c), db_b(c);
        emu().batch_norm_backward_relu(s, type, x.get(), {y.get()}, g.get(), mean.get(),
                                       invstd.get(), DType::f32, gamma.get(), sums, dx_y.get(),
                                       sums ? dg_y.get() : nullptr, sums ? db_y.get() : nullptr,
                                       masked_y.get(), {});
        emu().batch_norm_backward_relu(s, type, x.get(), from_bits, g.get(), mean.get(),
                                       invstd.get(), DType::f32, gamma.get(), sums, dx_b.get(),
                                       sums ? dg_b.get() : nullptr, sums ? db_b.get() : nullptr,
                                       masked_b.get(), {});
        EXPECT_EQ(masked_b.host(), masked_y.host()) << "masked dy";
        EXPECT_EQ(dx_b.host(), dx_y.host()) << "dx";
        if (sums) {
          EXPECT_EQ(dg_b.host(), dg_y.host()) << "dgamma";
          EXPECT_EQ(db_b.host(), db_y.host()) << "dbeta";
        }
        // dx straight from dy and the bits (no masked dy stored): the same.
        const Dev<std::uint16_t> dx_direct(words);
        emu().batch_norm_backward_relu(s, type, x.get(), from_bits, g.get(), mean.get(),
                                       invstd.get(), DType::f32, gamma.get(), sums, dx_direct.get(),
                                       nullptr, nullptr, nullptr, {});
        EXPECT_EQ(dx_direct.host(), dx_y.host()) << "dx without masked dy";
      }
    }
  }
}

// Max pooling on 16-bit x (forward with its index, backward) against the f32
// path on the values, rounded: the same bits. x: `in` values in [-2, 2) with
// a tie (x[tie] = x[tie_with]) and a NaN at x[nan]; dy: `out` values.
void check_max_pool_16(const backend::Pool2dShape& s, std::size_t in, std::size_t out,
                       std::size_t tie, std::size_t tie_with, std::size_t nan, std::uint32_t seed) {
  std::vector<float> x = uniform(in, seed, -2.0F, 2.0F);
  x[tie] = x[tie_with];
  x[nan] = kNaN;
  for (const DType type : {DType::bf16, DType::f16}) {
    SCOPED_TRACE(dtype_name(type));
    const std::vector<std::uint16_t> xb = bits_of(x, type);
    const std::vector<std::uint16_t> gb = bits_of(uniform(out, seed + 1), type);
    const Dev<std::uint16_t> x16(xb), g16(gb), y16(out), dx16(in);
    const Dev<float> x32(values_of(xb, type)), g32(values_of(gb, type)), y32(out), dx32(in);
    const Dev<std::int32_t> index16(out), index32(out);
    emu().max_pool2d_forward(s, x32.get(), y32.get(), index32.get());
    emu().max_pool2d_forward_16(s, type, x16.get(), y16.get(), index16.get());
    EXPECT_EQ(y16.host(), bits_of(y32.host(), type)) << "max y";
    EXPECT_EQ(index16.host(), index32.host()) << "max index";
    emu().max_pool2d_backward(s, index32.get(), g32.get(), dx32.get());
    emu().max_pool2d_backward_16(s, type, index16.get(), g16.get(), dx16.get());
    EXPECT_EQ(dx16.host(), bits_of(dx32.host(), type)) << "max dx";
  }
}

TEST(KernelBackend16Bit, MaxPoolIsTheF32PathRounded) {
  // Overlapping 3x3 windows at stride 2 (dx sums several gradients), a tie and a NaN.
  backend::Pool2dShape s;
  s.planes = 4;
  s.h = 9;
  s.w = 10;
  s.kernel_h = s.kernel_w = 3;
  s.stride_h = s.stride_w = 2;
  s.pad_h = s.pad_w = 1;
  s.out_h = 5;
  s.out_w = 5;
  check_max_pool_16(s, 360, 100, 12, 13, 50, 461);
}

// Channels last (NHWC): max and global average pooling on 16-bit storage give
// the f32 path's bits rounded, as NCHW does.
TEST(KernelBackend16Bit, ChannelsLastPoolsAreTheF32PathRounded) {
  // 2 images of 9 x 10 pixels, 37 channels; overlapping 3x3 windows at stride 2.
  backend::Pool2dShape s;
  s.channels_last = true;
  s.channels = 37;
  s.planes = 2 * 37;
  s.h = 9;
  s.w = 10;
  s.kernel_h = s.kernel_w = 3;
  s.stride_h = s.stride_w = 2;
  s.pad_h = s.pad_w = 1;
  s.out_h = 5;
  s.out_w = 5;
  const std::size_t in = 2 * 90 * 37, planes = 2 * 37;
  // A tie between neighbouring pixels.
  check_max_pool_16(s, in, 2 * 25 * 37, 12, 12 + 37, 500, 471);
  const std::vector<float> x = uniform(in, 474, -2.0F, 2.0F);
  for (const DType type : {DType::bf16, DType::f16}) {
    SCOPED_TRACE(dtype_name(type));
    // Global: [2, 90, 37] -> [2, 37].
    const std::vector<std::uint16_t> xb = bits_of(x, type);
    const Dev<std::uint16_t> x16(xb);
    const Dev<float> x32(values_of(xb, type));
    const std::vector<std::uint16_t> pb = bits_of(uniform(planes, 473), type);
    const Dev<std::uint16_t> p16(pb), m16(planes), gdx16(in);
    const Dev<float> p32(values_of(pb, type)), m32(planes), gdx32(in);
    emu().global_avg_pool_forward(planes, 90, 37, x32.get(), m32.get());
    emu().global_avg_pool_forward_16(planes, 90, 37, type, x16.get(), m16.get());
    EXPECT_EQ(m16.host(), bits_of(m32.host(), type)) << "global y";
    emu().global_avg_pool_backward(planes, 90, 37, p32.get(), gdx32.get());
    emu().global_avg_pool_backward_16(planes, 90, 37, type, p16.get(), gdx16.get());
    EXPECT_EQ(gdx16.host(), bits_of(gdx32.host(), type)) << "global dx";
  }
}

TEST(KernelBackend16Bit, LayerNormIsTheF32PathRounded) {
  // 70 rows: the parameter gradients' two stages (64-row blocks); 50: one.
  // gamma and beta in f32, or in the activations' type (their values as f32
  // on the f32 path), whose gradients are the f32 ones rounded once. Run
  // again accumulating, each gradient is the first's plus the f32 one,
  // rounded once.
  const std::int64_t d = 40;
  for (const auto& [rows, type, param_type] :
       std::vector<std::tuple<std::int64_t, DType, DType>>{{70, DType::bf16, DType::f32},
                                                           {70, DType::f16, DType::f32},
                                                           {70, DType::bf16, DType::bf16},
                                                           {50, DType::bf16, DType::bf16},
                                                           {70, DType::f16, DType::f16},
                                                           {50, DType::f16, DType::f16}}) {
    SCOPED_TRACE(::testing::Message() << rows << " rows " << dtype_name(type) << " parameters "
                                      << dtype_name(param_type));
    const auto n = static_cast<std::size_t>(rows * d);
    const auto ds = static_cast<std::size_t>(d);
    const bool p16 = param_type != DType::f32;
    const std::vector<std::uint16_t> gamma_bits =
        bits_of(uniform(ds, 411, 0.5F, 1.5F), p16 ? param_type : DType::bf16);
    const std::vector<std::uint16_t> beta_bits =
        bits_of(uniform(ds, 412), p16 ? param_type : DType::bf16);
    const Dev<float> gamma(p16 ? values_of(gamma_bits, param_type) : uniform(ds, 411, 0.5F, 1.5F));
    const Dev<float> beta(p16 ? values_of(beta_bits, param_type) : uniform(ds, 412));
    const Dev<std::uint16_t> gamma16(gamma_bits), beta16(beta_bits), dgamma_p16(ds), dbeta_p16(ds);
    const void* gamma_p = p16 ? static_cast<const void*>(gamma16.get()) : gamma.get();
    const void* beta_p = p16 ? static_cast<const void*>(beta16.get()) : beta.get();
    const std::vector<std::uint16_t> xb = bits_of(uniform(n, 413, -3.0F, 3.0F), type);
    const std::vector<std::uint16_t> gb = bits_of(uniform(n, 414), type);
    const Dev<std::uint16_t> x16(xb), g16(gb), y16(n), dx16(n);
    const Dev<float> x32(values_of(xb, type)), g32(values_of(gb, type)), y32(n), dx32(n);
    const auto rs = static_cast<std::size_t>(rows);
    const Dev<float> mean32(rs), rstd32(rs), mean16(rs), rstd16(rs);
    const Dev<float> dgamma32(static_cast<std::size_t>(d)), dbeta32(static_cast<std::size_t>(d)),
        dgamma16(static_cast<std::size_t>(d)), dbeta16(static_cast<std::size_t>(d));
    const Dev<float> scratch(static_cast<std::size_t>(emu().layer_norm_scratch_size(rows, d)) + 1);
    emu().layer_norm_forward(x32.get(), gamma.get(), beta.get(), y32.get(), mean32.get(),
                             rstd32.get(), rows, d, 1e-6F);
    emu().layer_norm_forward_16(type, x16.get(), param_type, gamma_p, beta_p, y16.get(),
                                mean16.get(), rstd16.get(), rows, d, 1e-6F);
    EXPECT_EQ(y16.host(), bits_of(y32.host(), type));
    EXPECT_EQ(mean16.host(), mean32.host());
    EXPECT_EQ(rstd16.host(), rstd32.host());
    emu().layer_norm_backward(x32.get(), gamma.get(), mean32.get(), rstd32.get(), g32.get(),
                              dx32.get(), dgamma32.get(), dbeta32.get(), rows, d, scratch.get());
    emu().layer_norm_backward_16(
        type, x16.get(), param_type, gamma_p, mean16.get(), rstd16.get(), g16.get(), dx16.get(),
        p16 ? static_cast<void*>(dgamma_p16.get()) : dgamma16.get(),
        p16 ? static_cast<void*>(dbeta_p16.get()) : dbeta16.get(), rows, d, scratch.get(), {});
    EXPECT_EQ(dx16.host(), bits_of(dx32.host(), type));
    if (p16) {
      EXPECT_EQ(dgamma_p16.host(), bits_of(dgamma32.host(), param_type));
      EXPECT_EQ(dbeta_p16.host(), bits_of(dbeta32.host(), param_type));
    } else {
      EXPECT_EQ(dgamma16.host(), dgamma32.host());
      EXPECT_EQ(dbeta16.host(), dbeta32.host());
    }
    // The same again, added into those results.
    const auto twice = [](const std::vector<float>& once_rounded, const std::vector<float>& f32) {
      std::vector<float> sum(once_rounded.size());
      for (std::size_t i = 0; i < sum.size(); ++i) sum[i] = once_rounded[i] + f32[i];
      return sum;
    };
    const std::vector<float> want_dx = twice(values_of(dx16.host(), type), dx32.host());
    const std::vector<float> want_dgamma =
        twice(p16 ? values_of(dgamma_p16.host(), param_type) : dgamma16.host(), dgamma32.host());
    const std::vector<float> want_dbeta =
        twice(p16 ? values_of(dbeta_p16.host(), param_type) : dbeta16.host(), dbeta32.host());
    emu().layer_norm_backward_16(type, x16.get(), param_type, gamma_p, mean16.get(), rstd16.get(),
                                 g16.get(), dx16.get(),
                                 p16 ? static_cast<void*>(dgamma_p16.get()) : dgamma16.get(),
                                 p16 ? static_cast<void*>(dbeta_p16.get()) : dbeta16.get(), rows, d,
                                 scratch.get(), {true, true, true});
    EXPECT_EQ(dx16.host(), bits_of(want_dx, type)) << "dx accumulated";
    if (p16) {
      EXPECT_EQ(dgamma_p16.host(), bits_of(want_dgamma, param_type)) << "dgamma accumulated";
      EXPECT_EQ(dbeta_p16.host(), bits_of(want_dbeta, param_type)) << "dbeta accumulated";
    } else {
      EXPECT_EQ(dgamma16.host(), want_dgamma) << "dgamma accumulated";
      EXPECT_EQ(dbeta16.host(), want_dbeta) << "dbeta accumulated";
    }
  }
  // Parameters of another 16-bit type than x are refused.
  const Dev<std::uint16_t> x16(40), y16(40), p16(40);
  const Dev<float> mean(1), rstd(1);
  EXPECT_THROW(emu().layer_norm_forward_16(DType::bf16, x16.get(), DType::f16, p16.get(), nullptr,
                                           y16.get(), mean.get(), rstd.get(), 1, 40, 1e-6F),
               std::invalid_argument);
}

// ---- Softmax ------------------------------------------------------------------------------

// exp differs in its last bits between the back ends.
constexpr float kSoftmaxAbs = 1e-6F, kSoftmaxRel = 1e-5F;

TEST(KernelBackendSoftmax, StridedXWithBroadcastMask) {
  // x [2, 3, 5] rows 7 apart (a slice of [2, 3, 7]); the mask [2, 1, 5]
  // broadcast over the middle axis, or [2, 3, 1] broadcast along the rows.
  const std::int64_t n = 5;
  const std::vector<float> storage = uniform(42, 61, -3.0F, 3.0F);
  std::vector<float> x(30);
  for (std::size_t r = 0; r < 6; ++r) {
    for (std::size_t j = 0; j < 5; ++j) x[r * 5 + j] = storage[r * 7 + j];
  }
  const std::vector<std::uint8_t> row_mask{1, 0, 1, 1, 0, 0, 0, 0, 0, 0};  // batch 1: nothing kept
  const std::vector<std::uint8_t> scalar_mask{1, 0, 1, 1, 1, 0};
  const Shape lead{2, 3};
  const Strides x_strided{21, 7}, x_dense{15, 5};
  struct MaskCase {
    const std::vector<std::uint8_t>* mask;
    Strides lead;
    std::int64_t inner;
  };
  const MaskCase cases[] = {
      {nullptr, {0, 0}, 0}, {&row_mask, {5, 0}, 1}, {&scalar_mask, {3, 1}, 0}};
  for (const MaskCase& m : cases) {
    for (const bool log : {false, true}) {
      SCOPED_TRACE(::testing::Message() << "mask " << (m.mask != nullptr) << " inner stride "
                                        << m.inner << " log " << log);
      // The CPU reads x at the plan's offsets and writes y at the same ones:
      // its reference is computed from a contiguous copy of x.
      const auto want_plan = backend::make_row_plan<2>(lead, {&x_dense, &m.lead}, n, {1, m.inner});
      std::vector<float> want = poisoned<float>(30);
      cpu().softmax_forward(want_plan, x.data(), m.mask ? m.mask->data() : nullptr, want.data(),
                            log);
      const auto plan = backend::make_row_plan<2>(lead, {&x_strided, &m.lead}, n, {1, m.inner});
      const Dev<float> dx(storage), dy(30);
      const Dev<std::uint8_t> dmask(m.mask ? *m.mask : std::vector<std::uint8_t>{});
      emu().softmax_forward(plan, dx.get(), m.mask ? dmask.get() : nullptr, dy.get(), log);
      EXPECT_TRUE(close(dy.host(), want, kSoftmaxAbs, kSoftmaxRel));
    }
  }
}

TEST(KernelBackendSoftmax, InPlaceWithMask) {
  // y may be x: the backend copies x first when a mask is set.
  const std::vector<float> x = uniform(12, 62);
  const std::vector<std::uint8_t> mask{1, 1, 0, 1, 0, 1, 1, 1, 1, 0, 0, 1};
  const Strides x_lead{4}, m_lead{4};
  const auto plan = backend::make_row_plan<2>({3}, {&x_lead, &m_lead}, 4, {1, 1});
  std::vector<float> want = poisoned<float>(12);
  cpu().softmax_forward(plan, x.data(), mask.data(), want.data(), false);
  const Dev<float> dx(x);
  const Dev<std::uint8_t> dmask(mask);
  emu().softmax_forward(plan, dx.get(), dmask.get(), dx.get(), false);
  EXPECT_TRUE(close(dx.host(), want, kSoftmaxAbs, kSoftmaxRel));
}

TEST(KernelBackendSoftmax, Backward) {
  const std::int64_t rows = 4, n = 7;
  const std::vector<float> x = uniform(28, 63, -2.0F, 2.0F), g = uniform(28, 64);
  std::vector<std::uint8_t> mask = integers<std::uint8_t>(28, 65, 0, 1);
  mask[0] = 1;
  for (const bool log : {false, true}) {
    SCOPED_TRACE(::testing::Message() << "log " << log);
    const Strides x_lead{n}, m_lead{n};
    const auto plan = backend::make_row_plan<2>({rows}, {&x_lead, &m_lead}, n, {1, 1});
    std::vector<float> y(28);
    cpu().softmax_forward(plan, x.data(), mask.data(), y.data(), log);  // -inf where masked
    std::vector<float> want = poisoned<float>(28);
    cpu().softmax_backward(y.data(), g.data(), want.data(), rows, n, log);
    const Dev<float> dy(y), dg(g), ddx(28);
    emu().softmax_backward(dy.get(), dg.get(), ddx.get(), rows, n, log);
    EXPECT_TRUE(close(ddx.host(), want, 1e-6F, 1e-5F));
  }
}

// ---- Convolution ---------------------------------------------------------------------------

backend::Conv2dShape conv_shape(bool bias, bool channels_last = false) {
  backend::Conv2dShape s;
  s.channels_last = channels_last;
  s.n = 2;
  s.c_in = 4;
  s.h = s.w = 5;
  s.c_out = 6;
  s.kernel_h = s.kernel_w = 3;
  s.stride_h = s.stride_w = 2;
  s.pad_h = s.pad_w = 1;
  s.out_h = s.out_w = 3;
  s.groups = 2;
  s.bias = bias;
  return s;
}

constexpr std::size_t kConvX = 2 * 4 * 25, kConvW = 6 * 2 * 9, kConvY = 2 * 6 * 9;

// The emulated device runs the CPU's convolutions: only the bias and its
// gradient are the CUDA back end's own (db: 18 terms in another order).
void check_conv_forward(bool bias, bool channels_last = false) {
  const backend::Conv2dShape s = conv_shape(bias, channels_last);
  const std::vector<float> x = uniform(kConvX, 71), w = uniform(kConvW, 72), b = uniform(6, 73);
  const Dev<float> ex(x), ew(w), eb(b);
  std::vector<float> y = poisoned<float>(kConvY);
  cpu().conv2d_forward(s, x.data(), w.data(), bias ? b.data() : nullptr, y.data());
  const Dev<float> ey(kConvY);
  emu().conv2d_forward(s, ex.get(), ew.get(), bias ? eb.get() : nullptr, ey.get());
  EXPECT_TRUE(close(ey.host(), y, 1e-6F, 1e-6F));
}

TEST(KernelBackendConv, ForwardWithoutBias) {
  check_conv_forward(false);
}

TEST(KernelBackendConv, ChannelsLastForward) {
  // NHWC: the bias is added along the innermost axis.
  check_conv_forward(false, true);
  check_conv_forward(true, true);
}

// dx, dW and db, each asked for alone and with the others, against the CPU.
void check_conv_backward_pieces(const backend::Conv2dShape& s) {
  const std::vector<float> x = uniform(kConvX, 71), w = uniform(kConvW, 72),
                           dy = uniform(kConvY, 74);
  const Dev<float> ex(x), ew(w), edy(dy);
  for (int pieces = 1; pieces < 8; ++pieces) {  // bits: dx, dw, db
    SCOPED_TRACE(::testing::Message() << "dx " << (pieces & 1) << " dw " << (pieces >> 1 & 1)
                                      << " db " << (pieces >> 2 & 1));
    std::vector<float> dx = poisoned<float>(kConvX), dw = poisoned<float>(kConvW),
                       db = poisoned<float>(6);
    cpu().conv2d_backward(s, x.data(), w.data(), dy.data(), (pieces & 1) ? dx.data() : nullptr,
                          (pieces & 2) ? dw.data() : nullptr, (pieces & 4) ? db.data() : nullptr);
    const Dev<float> edx(kConvX), edw(kConvW), edb(6);
    emu().conv2d_backward(s, ex.get(), ew.get(), edy.get(), (pieces & 1) ? edx.get() : nullptr,
                          (pieces & 2) ? edw.get() : nullptr, (pieces & 4) ? edb.get() : nullptr);
    // Pieces not asked for stay poisoned on both.
    EXPECT_TRUE(close(edx.host(), dx, 1e-6F, 1e-6F)) << "dx";
    EXPECT_TRUE(close(edw.host(), dw, 1e-6F, 1e-6F)) << "dw";
    EXPECT_TRUE(close(edb.host(), db, 1e-5F, 1e-5F)) << "db";
  }
}

// A plain TEST (not TEST_P): in the gpu build TEST gives the GPU tests'
// fixture, which skips where no GPU can be used.
TEST(KernelBackendConv, BackwardPieces) {
  for (const bool channels_last : {false, true}) {
    SCOPED_TRACE(channels_last ? "channels last" : "channels first");
    check_conv_backward_pieces(conv_shape(true, channels_last));
  }
}

// ---- Layer norm, activations ---------------------------------------------------------------

TEST(KernelBackendLayerNorm, ForwardAndBackward) {
  // 150 rows: three row blocks of the parameter gradients' partials.
  for (const std::int64_t rows : {std::int64_t{5}, std::int64_t{150}}) {
    SCOPED_TRACE(::testing::Message() << rows << " rows");
    const std::int64_t d = 37;
    const std::size_t size = rows * d;
    const std::vector<float> x = uniform(size, 81, -2.0F, 3.0F), gamma = uniform(d, 82),
                             beta = uniform(d, 83), g = uniform(size, 84);
    for (const bool affine : {true, false}) {
      SCOPED_TRACE(::testing::Message() << "affine " << affine);
      std::vector<float> y = poisoned<float>(size), mean = poisoned<float>(rows),
                         rstd = poisoned<float>(rows);
      cpu().layer_norm_forward(x.data(), affine ? gamma.data() : nullptr,
                               affine ? beta.data() : nullptr, y.data(), mean.data(), rstd.data(),
                               rows, d, 1e-5F);
      const Dev<float> ex(x), egamma(gamma), ebeta(beta), ey(size), emean(rows), erstd(rows);
      emu().layer_norm_forward(ex.get(), affine ? egamma.get() : nullptr,
                               affine ? ebeta.get() : nullptr, ey.get(), emean.get(), erstd.get(),
                               rows, d, 1e-5F);
      EXPECT_TRUE(close(ey.host(), y, 1e-5F, 1e-5F)) << "y";
      EXPECT_TRUE(close(emean.host(), mean, 1e-6F, 1e-6F)) << "mean";
      EXPECT_TRUE(close(erstd.host(), rstd, 1e-6F, 1e-5F)) << "rstd";

      // Backward from the CPU's statistics, dx separate and dx over g (in place).
      for (const bool in_place : {false, true}) {
        SCOPED_TRACE(::testing::Message() << "in place " << in_place);
        std::vector<float> scratch(
            static_cast<std::size_t>(cpu().layer_norm_scratch_size(rows, d)) + 1);
        std::vector<float> gc = g, dx = poisoned<float>(size), dgamma = poisoned<float>(d),
                           dbeta = poisoned<float>(d);
        cpu().layer_norm_backward(x.data(), affine ? gamma.data() : nullptr, mean.data(),
                                  rstd.data(), gc.data(), in_place ? gc.data() : dx.data(),
                                  dgamma.data(), dbeta.data(), rows, d, scratch.data());
        const Dev<float> escratch(static_cast<std::size_t>(emu().layer_norm_scratch_size(rows, d)) +
                                  1);
        const Dev<float> cmean(mean), crstd(rstd), eg(g), edx(size), edgamma(d), edbeta(d);
        emu().layer_norm_backward(ex.get(), affine ? egamma.get() : nullptr, cmean.get(),
                                  crstd.get(), eg.get(), in_place ? eg.get() : edx.get(),
                                  edgamma.get(), edbeta.get(), rows, d, escratch.get());
        EXPECT_TRUE(close(in_place ? eg.host() : edx.host(), in_place ? gc : dx, 1e-5F, 1e-5F))
            << "dx";
        EXPECT_TRUE(close(edgamma.host(), dgamma, 1e-5F, 1e-5F)) << "dgamma";
        EXPECT_TRUE(close(edbeta.host(), dbeta, 1e-5F, 1e-5F)) << "dbeta";
      }
    }
  }
}

// dz is the shared element math of rig/math and db sums in the CPU's order
// (blocks of rows, then the blocks): the CPU's bits for none, relu and
// sigmoid; gelu (exp) and tanh (the CPU contracts 1 - y * y) differ in the
// last bits, as tests/kernels/test_elementwise.cpp allows.
bool exact_activation(Activation act) {
  return act != Activation::gelu && act != Activation::tanh;
}

::testing::AssertionResult close_bf16(const std::vector<std::uint16_t>& got,
                                      const std::vector<std::uint16_t>& want) {
  std::vector<float> wide(got.size()), want_wide(want.size());
  for (std::size_t i = 0; i < got.size(); ++i) wide[i] = bfloat16_bits_to_float(got[i]);
  for (std::size_t i = 0; i < want.size(); ++i) want_wide[i] = bfloat16_bits_to_float(want[i]);
  return close(wide, want_wide, 1e-6F, 1e-2F);  // one bf16 step
}

// GemmProduct::c_bf16: C written rounded to bf16 (padding past n left
// alone), the CPU's f32 product rounded once; k = 0 writes zeros. With beta
// 1 the product is added to the bf16 C in f32 and rounded once (a gradient
// accumulated in place); k = 0 then leaves C as it was.
TEST(KernelBackendGemm, Bf16OutputIsTheProductRounded) {
  ASSERT_TRUE(emu().gemm_writes_bf16());
  EXPECT_FALSE(cpu().gemm_writes_bf16());
  const std::int64_t m = 6, n = 9, ldc = 11;
  for (const std::int64_t k : {std::int64_t{0}, std::int64_t{13}}) {
    for (const float beta : {0.0F, 1.0F}) {
      for (const bool ta : {false, true}) {
        for (const bool tb : {false, true}) {
          SCOPED_TRACE(::testing::Message()
                       << "k " << k << " beta " << beta << " trans_a " << ta << " trans_b " << tb);
          std::vector<std::uint16_t> a16(
              static_cast<std::size_t>(std::max<std::int64_t>(m * k, 1)));
          std::vector<std::uint16_t> b16(
              static_cast<std::size_t>(std::max<std::int64_t>(k * n, 1)));
          const std::vector<float> av = uniform(a16.size(), 47), bv = uniform(b16.size(), 48);
          for (std::size_t i = 0; i < a16.size(); ++i) a16[i] = float_to_bfloat16_bits(av[i]);
          for (std::size_t i = 0; i < b16.size(); ++i) b16[i] = float_to_bfloat16_bits(bv[i]);
          const std::int64_t lda = ta ? m : k, ldb = tb ? k : n;
          std::vector<float> want(static_cast<std::size_t>(m * ldc), 0.0F);
          cpu().gemm({m,
                      n,
                      k,
                      1.0F,
                      {nullptr, lda, ta, a16.data()},
                      {nullptr, ldb, tb, b16.data()},
                      0.0F,
                      want.data(),
                      ldc},
                     MatmulPrecision::bf16);
          const std::uint16_t poison = 0x7FC1;
          std::vector<std::uint16_t> c16(static_cast<std::size_t>(m * ldc), poison);
          if (beta != 0.0F) {
            const std::vector<float> cv = uniform(c16.size(), 49);
            for (std::int64_t r = 0; r < m; ++r) {
              for (std::int64_t j = 0; j < n; ++j) {
                const auto at = static_cast<std::size_t>(r * ldc + j);
                c16[at] = float_to_bfloat16_bits(cv[at]);
                want[at] += bfloat16_bits_to_float(c16[at]);
              }
            }
          }
          const Dev<std::uint16_t> ea(a16), eb(b16), ec(c16);
          emu().gemm({m,
                      n,
                      k,
                      1.0F,
                      {nullptr, lda, ta, ea.get()},
                      {nullptr, ldb, tb, eb.get()},
                      beta,
                      nullptr,
                      ldc,
                      ec.get()},
                     MatmulPrecision::bf16);
          const std::vector<std::uint16_t> got = ec.host();
          std::vector<std::uint16_t> got_c, want_c;
          for (std::int64_t r = 0; r < m; ++r) {
            for (std::int64_t j = 0; j < ldc; ++j) {
              const auto at = static_cast<std::size_t>(r * ldc + j);
              if (j >= n) {
                EXPECT_EQ(got[at], poison)
                    << "row " << r << " column " << j << " past n was written";
                continue;
              }
              got_c.push_back(got[at]);
              want_c.push_back(float_to_bfloat16_bits(want[at]));
            }
          }
          EXPECT_TRUE(close_bf16(got_c, want_c));
          if (k == 0) {
            EXPECT_EQ(got_c, want_c) << "beta C exactly";
          }
        }
      }
    }
  }
  // An f32 C beside the bf16 one is refused.
  const Dev<std::uint16_t> e1(std::vector<std::uint16_t>(4)), ec(4);
  const Dev<float> ef(4);
  EXPECT_THROW(emu().gemm({2,
                           2,
                           1,
                           1.0F,
                           {nullptr, 1, false, e1.get()},
                           {nullptr, 2, false, e1.get()},
                           0.0F,
                           ef.get(),
                           2,
                           ec.get()},
                          MatmulPrecision::bf16),
               std::invalid_argument);
}

TEST(KernelBackendActivation, BackwardWithColumnSums) {
  const std::int64_t rows = 70, cols = 9;
  const std::size_t size = rows * cols;
  const std::vector<float> g = uniform(size, 91), pre = uniform(size, 92, -3.0F, 3.0F);
  for (const Activation act : {Activation::none, Activation::relu, Activation::gelu,
                               Activation::tanh, Activation::sigmoid}) {
    SCOPED_TRACE(::testing::Message() << "activation " << static_cast<int>(act));
    // saved: the output for relu / tanh / sigmoid, the pre-activation for gelu.
    std::vector<float> saved = pre;
    if (act == Activation::relu) {
      for (float& v : saved) v = std::max(v, 0.0F);
    } else if (act == Activation::tanh) {
      for (float& v : saved) v = std::tanh(v);
    } else if (act == Activation::sigmoid) {
      for (float& v : saved) v = 1.0F / (1.0F + std::exp(-v));
    }
    const Dev<float> eg(g), esaved(saved);
    for (const bool want_db : {true, false}) {
      std::vector<float> dz = poisoned<float>(size), db = poisoned<float>(cols);
      cpu().activation_backward(act, g.data(), saved.data(), dz.data(),
                                want_db ? db.data() : nullptr, rows, cols, 2.0F);
      const Dev<float> edz(size), edb(cols);
      emu().activation_backward(act, eg.get(), esaved.get(), edz.get(),
                                want_db ? edb.get() : nullptr, rows, cols, 2.0F);
      // Activation::none writes no dz on either (the caller's g is the gradient).
      if (exact_activation(act)) {
        EXPECT_TRUE(same(edz.host(), dz)) << "dz, db " << want_db;
        EXPECT_TRUE(same(edb.host(), db)) << "db";
      } else {
        EXPECT_TRUE(close(edz.host(), dz, 1e-6F, 1e-5F)) << "dz, db " << want_db;
        EXPECT_TRUE(close(edb.host(), db, 1e-5F, 1e-5F)) << "db";
      }
    }
    if (act == Activation::none) continue;
    std::vector<std::uint16_t> dz16 = poisoned<std::uint16_t>(size);
    std::vector<float> db = poisoned<float>(cols);
    cpu().activation_backward_bf16(act, g.data(), saved.data(), dz16.data(), db.data(), rows, cols,
                                   1.0F);
    const Dev<std::uint16_t> edz16(size);
    const Dev<float> edb(cols);
    emu().activation_backward_bf16(act, eg.get(), esaved.get(), edz16.get(), edb.get(), rows, cols,
                                   1.0F);
    if (exact_activation(act)) {
      EXPECT_TRUE(same(edz16.host(), dz16)) << "dz bf16";
      EXPECT_TRUE(same(edb.host(), db)) << "db (bf16 variant)";
    } else {
      EXPECT_TRUE(close_bf16(edz16.host(), dz16)) << "dz bf16";
      EXPECT_TRUE(close(edb.host(), db, 1e-5F, 1e-5F)) << "db (bf16 variant)";
    }
  }
}

TEST(KernelBackendActivation, BiasGeluWritesPre) {
  const std::int64_t rows = 3, cols = 10;
  const std::vector<float> y = uniform(30, 93, -3.0F, 3.0F), bias = uniform(10, 94);
  for (const Activation act : {Activation::gelu, Activation::relu, Activation::none}) {
    SCOPED_TRACE(::testing::Message() << "activation " << static_cast<int>(act));
    std::vector<float> cy = y, pre = poisoned<float>(30);
    cpu().bias_activation(cy.data(), pre.data(), bias.data(), rows, cols, act);
    const Dev<float> ey(y), epre(30), ebias(bias);
    emu().bias_activation(ey.get(), epre.get(), ebias.get(), rows, cols, act);
    if (exact_activation(act)) {
      EXPECT_TRUE(same(ey.host(), cy)) << "y";
    } else {
      EXPECT_TRUE(close(ey.host(), cy, 1e-6F, 1e-5F)) << "y";
    }
    EXPECT_TRUE(same(epre.host(), pre)) << "pre";  // y + bias: exact
  }
}

// ---- Copies, fills, accumulation, comparisons, select --------------------------------------

// Host bytes of `n` random values of `dtype`, with specials for floats.
std::vector<std::uint8_t> random_bytes(DType dtype, std::size_t n, std::uint32_t seed) {
  std::vector<std::uint8_t> bytes(n * dtype_size(dtype));
  const std::vector<float> f = uniform(n, seed, -300.0F, 300.0F);
  for (std::size_t i = 0; i < n; ++i) {
    float v = f[i];
    if (i % 11 == 3) v = kNaN;
    if (i % 13 == 5) v = 3e9F;  // saturates i32
    if (i % 17 == 7) v = -kInf;
    std::uint8_t* at = bytes.data() + i * dtype_size(dtype);
    switch (dtype) {
      case DType::f32:
        std::memcpy(at, &v, 4);
        break;
      case DType::f16: {
        const std::uint16_t h = float_to_half_bits(v);
        std::memcpy(at, &h, 2);
        break;
      }
      case DType::bf16: {
        const std::uint16_t h = float_to_bfloat16_bits(v);
        std::memcpy(at, &h, 2);
        break;
      }
      case DType::i32: {
        const auto x = static_cast<std::int32_t>(f[i] * 1e6F);
        std::memcpy(at, &x, 4);
        break;
      }
      case DType::i64: {
        const std::int64_t x =
            static_cast<std::int64_t>(f[i] * 1e6F) * (1 << 20) + static_cast<std::int64_t>(i);
        std::memcpy(at, &x, 8);
        break;
      }
      case DType::u8:
        *at = static_cast<std::uint8_t>(static_cast<int>(f[i]) & 0xFF);
        break;
    }
  }
  return bytes;
}

TEST(KernelBackendCopy, StridedBetweenDtypes) {
  const DType dtypes[] = {DType::f32, DType::f16, DType::bf16, DType::i32, DType::i64, DType::u8};
  // src [3, 4, 5] read transposed ([5, 4, 3] view), dst with a gap after each row.
  const Shape shape{5, 4, 3};
  const Strides src_strides{1, 5, 20}, dst_strides{16, 4, 1};
  for (const DType from : dtypes) {
    for (const DType to : dtypes) {
      SCOPED_TRACE(::testing::Message() << dtype_name(from) << " -> " << dtype_name(to));
      const std::vector<std::uint8_t> src = random_bytes(from, 60, 101);
      std::vector<std::uint8_t> want(80 * dtype_size(to), 0xAB);
      cpu().copy_strided(shape, want.data(), dst_strides, to, src.data(), src_strides, from);
      const Dev<std::uint8_t> esrc(src), edst(std::vector<std::uint8_t>(want.size(), 0xAB));
      emu().copy_strided(shape, edst.get(), dst_strides, to, esrc.get(), src_strides, from);
      EXPECT_TRUE(same_values(to, edst.host(), want));
    }
  }
}

TEST(KernelBackendCopy, ContiguousFastPath) {
  // Same dtype, both dense: one byte copy, at odd offsets and lengths.
  const std::vector<std::uint8_t> src = random_bytes(DType::u8, 64, 102);
  for (const std::size_t offset : {std::size_t{0}, std::size_t{1}, std::size_t{3}}) {
    for (const std::int64_t n : {1, 13, 40}) {
      SCOPED_TRACE(::testing::Message() << "offset " << offset << " n " << n);
      std::vector<std::uint8_t> want(64, 0x5A);
      cpu().copy_strided({n}, want.data() + offset, {1}, DType::u8, src.data() + 2, {1}, DType::u8);
      const Dev<std::uint8_t> esrc(src), edst(std::vector<std::uint8_t>(64, 0x5A));
      emu().copy_strided({n}, edst.get() + offset, {1}, DType::u8, esrc.get() + 2, {1}, DType::u8);
      EXPECT_TRUE(same(edst.host(), want));
    }
  }
  // f32 [2, 3] dense in both (merged to one axis), and i64.
  for (const DType dtype : {DType::f32, DType::i64, DType::bf16}) {
    const std::vector<std::uint8_t> s = random_bytes(dtype, 6, 103);
    std::vector<std::uint8_t> want(s.size(), 0);
    cpu().copy_strided({2, 3}, want.data(), {3, 1}, dtype, s.data(), {3, 1}, dtype);
    const Dev<std::uint8_t> es(s), ed(std::vector<std::uint8_t>(s.size(), 0));
    emu().copy_strided({2, 3}, ed.get(), {3, 1}, dtype, es.get(), {3, 1}, dtype);
    EXPECT_TRUE(same(ed.host(), want)) << dtype_name(dtype);
  }
}

TEST(KernelBackendCopy, FillStrided) {
  for (const DType dtype :
       {DType::f32, DType::f16, DType::bf16, DType::i32, DType::i64, DType::u8}) {
    for (const float value : {2.7F, -1.5F, 1e10F, kNaN}) {
      SCOPED_TRACE(::testing::Message() << dtype_name(dtype) << " " << value);
      const std::size_t bytes = 24 * dtype_size(dtype);
      std::vector<std::uint8_t> want(bytes, 0xCD);
      // [3, 2] every other element of every other row of [6, 4].
      cpu().fill_strided({3, 2}, want.data(), {8, 2}, dtype, value);
      const Dev<std::uint8_t> ed(std::vector<std::uint8_t>(bytes, 0xCD));
      emu().fill_strided({3, 2}, ed.get(), {8, 2}, dtype, value);
      EXPECT_TRUE(same(ed.host(), want));
    }
  }
}

// Bit-exact with the CPU (kernels/accumulate.hpp): the CPU's order and roundings.
TEST(KernelBackendCopy, AddStridedWithBroadcastDst) {
  struct Case {
    DType dst, src;
    Shape shape;
    Strides dst_strides, src_strides;
    std::size_t dst_count, src_count;
  };
  const Case cases[] = {
      // dst [4] broadcast over the rows of src [3, 4]; then over its columns.
      {DType::f32, DType::f32, {3, 4}, {0, 1}, {4, 1}, 4, 12},
      {DType::f32, DType::f32, {3, 4}, {1, 0}, {4, 1}, 3, 12},
      {DType::bf16, DType::f32, {3, 4}, {0, 1}, {4, 1}, 4, 12},
      {DType::f16, DType::bf16, {2, 3, 4}, {4, 0, 1}, {12, 4, 1}, 8, 24},
      // Everything into one element, src transposed.
      {DType::bf16, DType::bf16, {4, 5}, {0, 0}, {1, 4}, 1, 20},
      // Plain dense accumulation.
      {DType::f32, DType::f16, {6, 5}, {5, 1}, {5, 1}, 30, 30},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(::testing::Message()
                 << dtype_name(c.dst) << " += " << dtype_name(c.src) << " " << to_string(c.shape));
    std::vector<std::uint8_t> src = random_bytes(c.src, c.src_count, 104);
    std::vector<std::uint8_t> dst = random_bytes(c.dst, c.dst_count, 105);
    // Finite values only.
    auto sanitize = [](std::vector<std::uint8_t>& bytes, DType dtype) {
      const std::size_t n = bytes.size() / dtype_size(dtype);
      const std::vector<float> f = uniform(n, 106 + static_cast<std::uint32_t>(n), -4.0F, 4.0F);
      for (std::size_t i = 0; i < n; ++i) {
        if (dtype == DType::f32) std::memcpy(bytes.data() + 4 * i, &f[i], 4);
        if (dtype == DType::f16) {
          const std::uint16_t h = float_to_half_bits(f[i]);
          std::memcpy(bytes.data() + 2 * i, &h, 2);
        }
        if (dtype == DType::bf16) {
          const std::uint16_t h = float_to_bfloat16_bits(f[i]);
          std::memcpy(bytes.data() + 2 * i, &h, 2);
        }
      }
    };
    sanitize(src, c.src);
    sanitize(dst, c.dst);
    std::vector<std::uint8_t> want = dst;
    cpu().add_strided(c.shape, want.data(), c.dst_strides, c.dst, src.data(), c.src_strides, c.src);
    const Dev<std::uint8_t> esrc(src), edst(dst);
    emu().add_strided(c.shape, edst.get(), c.dst_strides, c.dst, esrc.get(), c.src_strides, c.src);
    EXPECT_TRUE(same(edst.host(), want));
  }
}

TEST(KernelBackendCopy, ZeroBytes) {
  const std::vector<std::uint8_t> data = random_bytes(DType::u8, 40, 107);
  std::vector<std::uint8_t> want = data;
  cpu().zero_bytes(want.data() + 3, 29);
  const Dev<std::uint8_t> e(data);
  emu().zero_bytes(e.get() + 3, 29);
  emu().zero_bytes(e.get(), 0);
  EXPECT_TRUE(same(e.host(), want));
}

TEST(KernelBackendCompare, BroadcastOperands) {
  // a [3, 4] against b [4] (broadcast over rows) and a scalar.
  const Shape shape{3, 4};
  const Strides out_s{4, 1}, a_s{4, 1}, b_s{0, 1};
  const auto plan = backend::make_strided_plan<3>(shape, {&out_s, &a_s, &b_s});
  for (const DType dtype : {DType::f32, DType::i32, DType::i64, DType::u8}) {
    std::vector<std::uint8_t> a = random_bytes(dtype, 12, 111);
    std::vector<std::uint8_t> b(4 * dtype_size(dtype));
    std::memcpy(b.data(), a.data() + 4 * dtype_size(dtype), b.size());  // row 1 equal to b
    std::memcpy(b.data() + dtype_size(dtype), random_bytes(dtype, 1, 112).data(),
                dtype_size(dtype));
    for (const backend::Compare op :
         {backend::Compare::equal, backend::Compare::less, backend::Compare::not_equal_scalar}) {
      SCOPED_TRACE(::testing::Message() << dtype_name(dtype) << " op " << static_cast<int>(op));
      std::vector<std::uint8_t> want = poisoned<std::uint8_t>(12);
      cpu().compare(op, plan, dtype, a.data(), b.data(), 0.0, want.data());
      const Dev<std::uint8_t> ea(a), eb(b), eout(12);
      emu().compare(op, plan, dtype, ea.get(), eb.get(), 0.0, eout.get());
      EXPECT_TRUE(same(eout.host(), want));
    }
  }
}

TEST(KernelBackendSelect, BroadcastOperands) {
  // out [2, 3, 4]: cond [2, 1, 4], a a scalar, b [3, 4] (broadcast over axis 0).
  const Shape shape{2, 3, 4};
  const std::vector<std::uint8_t> cond = integers<std::uint8_t>(8, 121, 0, 1);
  for (const std::size_t bytes : {std::size_t{1}, std::size_t{2}, std::size_t{4}, std::size_t{8}}) {
    SCOPED_TRACE(::testing::Message() << bytes << "-byte elements");
    const std::vector<std::uint8_t> a = random_bytes(DType::u8, bytes, 122);
    const std::vector<std::uint8_t> b = random_bytes(DType::u8, 12 * bytes, 123);
    std::vector<std::uint8_t> want = poisoned<std::uint8_t>(24 * bytes);
    cpu().select(shape, bytes, {cond.data(), {4, 0, 1}}, {a.data(), {0, 0, 0}},
                 {b.data(), {0, 4, 1}}, want.data());
    const Dev<std::uint8_t> ec(cond), ea(a), eb(b), eout(24 * bytes);
    emu().select(shape, bytes, {ec.get(), {4, 0, 1}}, {ea.get(), {0, 0, 0}}, {eb.get(), {0, 4, 1}},
                 eout.get());
    EXPECT_TRUE(same(eout.host(), want));
  }
}

// ---- Reductions, loss scaling, checks ----------------------------------------------------------

TEST(KernelBackendReduce, SumAllAndSquares) {
  // Two chunks of the emulated reduction; f64 sums in other orders: about
  // 1e-7 of sum |x| (kernels/reduce.hpp).
  for (const std::int64_t n : {1, 300, 5000}) {
    SCOPED_TRACE(::testing::Message() << "n " << n);
    const std::vector<float> x = uniform(static_cast<std::size_t>(n), 131);
    const Dev<float> ex(x), eout(2);
    float want[2];
    cpu().sum_all(x.data(), n, 3.0, &want[0]);
    cpu().sum_squares(x.data(), n, 2.0, &want[1]);
    emu().sum_all(ex.get(), n, 3.0, eout.get());
    emu().sum_squares(ex.get(), n, 2.0, eout.get() + 1);
    const float scale = static_cast<float>(n) * 1e-7F;
    EXPECT_TRUE(close(eout.host(), {want[0], want[1]}, scale, 1e-6F));
  }
}

TEST(KernelBackendReduce, SumAxis) {
  const std::vector<float> x = uniform(2 * 70 * 3, 132);
  // inner > 1: the CPU's order, the same bits.
  {
    std::vector<float> want = poisoned<float>(6);
    cpu().sum_axis(x.data(), want.data(), 2, 70, 3, 0.5F);
    const Dev<float> ex(x), ey(6);
    emu().sum_axis(ex.get(), ey.get(), 2, 70, 3, 0.5F);
    EXPECT_TRUE(same(ey.host(), want)) << "inner 3";
  }
  // inner == 1: a block sum, another order.
  {
    std::vector<float> want = poisoned<float>(6);
    cpu().sum_axis(x.data(), want.data(), 6, 70, 1, 2.0F);
    const Dev<float> ex(x), ey(6);
    emu().sum_axis(ex.get(), ey.get(), 6, 70, 1, 2.0F);
    EXPECT_TRUE(close(ey.host(), want, 1e-5F, 1e-5F)) << "inner 1";
  }
}

TEST(KernelBackendReduce, MaxAxisAndBackward) {
  std::vector<float> x = uniform(2 * 5 * 3, 133);
  x[3] = x[0];   // a tie along r for output (0, 0)
  x[16] = kNaN;  // NaN counts as largest
  x[22] = kNaN;  // the first NaN wins
  x[28] = kNaN;
  for (const std::int64_t inner : {3, 1}) {
    const std::int64_t out_outer = 2, r = inner == 1 ? 15 : 5;
    SCOPED_TRACE(::testing::Message() << "inner " << inner);
    const std::size_t outs = static_cast<std::size_t>(out_outer * inner);
    std::vector<float> y = poisoned<float>(outs);
    std::vector<std::int64_t> index = poisoned<std::int64_t>(outs);
    cpu().max_axis(x.data(), y.data(), index.data(), out_outer, r, inner);
    const Dev<float> ex(x), ey(outs);
    const Dev<std::int64_t> eindex(outs);
    emu().max_axis(ex.get(), ey.get(), eindex.get(), out_outer, r, inner);
    EXPECT_TRUE(same(ey.host(), y));
    EXPECT_TRUE(same(eindex.host(), index));

    const std::vector<float> g = uniform(outs, 134);
    std::vector<float> dx = poisoned<float>(30);
    cpu().max_axis_backward(g.data(), index.data(), dx.data(), out_outer, r, inner);
    const Dev<float> eg(g), edx(30);
    emu().max_axis_backward(eg.get(), eindex.get(), edx.get(), out_outer, r, inner);
    EXPECT_TRUE(same(edx.host(), dx)) << "backward";
  }
}

TEST(KernelBackendReduce, Unscale) {
  for (const DType dtype : {DType::f32, DType::f16, DType::bf16}) {
    for (const bool with_inf : {false, true}) {
      for (const int master_mode : {0, 1, 2}) {  // separate, null, in place (f32)
        if (master_mode == 2 && dtype != DType::f32) continue;
        SCOPED_TRACE(::testing::Message()
                     << dtype_name(dtype) << " inf " << with_inf << " master " << master_mode);
        const std::size_t n = 1000;
        std::vector<std::uint8_t> src(n * dtype_size(dtype));
        std::vector<float> f = uniform(n, 141, -60000.0F, 60000.0F);
        if (with_inf) f[777] = -kInf;
        for (std::size_t i = 0; i < n; ++i) {
          if (dtype == DType::f32) std::memcpy(src.data() + 4 * i, &f[i], 4);
          if (dtype == DType::f16) {
            const std::uint16_t h = float_to_half_bits(f[i]);
            std::memcpy(src.data() + 2 * i, &h, 2);
          }
          if (dtype == DType::bf16) {
            const std::uint16_t h = float_to_bfloat16_bits(f[i]);
            std::memcpy(src.data() + 2 * i, &h, 2);
          }
        }
        std::vector<std::uint8_t> csrc = src;
        std::vector<float> master = poisoned<float>(n);
        float amax = 0.0F;
        float* cm = master_mode == 0   ? master.data()
                    : master_mode == 1 ? nullptr
                                       : reinterpret_cast<float*>(csrc.data());
        cpu().unscale(static_cast<std::int64_t>(n), dtype, csrc.data(), cm, 1.0F / 1024.0F, &amax);
        const Dev<std::uint8_t> esrc(src);
        const Dev<float> emaster(n), eamax(1);
        float* em = master_mode == 0   ? emaster.get()
                    : master_mode == 1 ? nullptr
                                       : reinterpret_cast<float*>(esrc.get());
        emu().unscale(static_cast<std::int64_t>(n), dtype, esrc.get(), em, 1.0F / 1024.0F,
                      eamax.get());
        EXPECT_TRUE(same(eamax.host(), {amax})) << "amax";
        if (with_inf) {
          EXPECT_EQ(eamax.host()[0], kInf);
        }
        EXPECT_TRUE(same(emaster.host(), master)) << "master";
        EXPECT_TRUE(same(esrc.host(), csrc)) << "src (in place)";
      }
    }
  }
}

// How busy the device has been: NVML's percentage on a GPU (it comes with
// the driver), nothing where the device cannot tell (the emulator, the CPU).
TEST(KernelBackendChecks, DeviceUtilisation) {
  const std::optional<double> u = emu().device_utilisation(Device::cuda(0));
#ifdef RIG_KERNEL_BACKEND_ON_GPU
  ASSERT_TRUE(u.has_value()) << "no NVML utilisation on a GPU machine";
  EXPECT_GE(*u, 0.0);
  EXPECT_LE(*u, 100.0);
#else
  EXPECT_FALSE(u.has_value()) << "the emulated device cannot tell";
#endif
  EXPECT_FALSE(cpu().device_utilisation(Device::cpu()).has_value());
}

TEST(KernelBackendChecks, GradientStats) {
  std::vector<float> grads = uniform(5000, 151, -3.0F, 3.0F);
  const Dev<float> eg(grads);
  const float losses[] = {1.5F, kNaN, kInf};
  const Dev<float> eloss(std::vector<float>(losses, losses + 3));
  for (int loss = -1; loss < 3; ++loss) {
    SCOPED_TRACE(::testing::Message() << "loss " << loss);
    const GradientStats want =
        cpu().gradient_stats(grads.data(), 5000, loss < 0 ? nullptr : &losses[loss]);
    const GradientStats got =
        emu().gradient_stats(eg.get(), 5000, loss < 0 ? nullptr : eloss.get() + loss);
    // f64 sums of the f32 squares here, f32 runs of 1024 on the CPU: about
    // 1e-6 relative (kernels/checks.hpp); amax is exact.
    EXPECT_NEAR(got.norm, want.norm, 2e-6 * want.norm);
    EXPECT_EQ(got.amax, want.amax);
    EXPECT_EQ(got.loss_finite, want.loss_finite);
    EXPECT_EQ(got.loss_finite, loss <= 0);
  }
  // A NaN gradient: both infinite.
  grads[4321] = kNaN;
  const Dev<float> enan(grads);
  const GradientStats want = cpu().gradient_stats(grads.data(), 5000, nullptr);
  const GradientStats got = emu().gradient_stats(enan.get(), 5000, nullptr);
  EXPECT_EQ(got.norm, want.norm);
  EXPECT_EQ(got.amax, want.amax);
  EXPECT_TRUE(std::isinf(got.norm));
  // Nothing.
  EXPECT_EQ(emu().gradient_stats(eg.get(), 0, nullptr).norm, 0.0);
}

TEST(KernelBackendChecks, FirstOutOfRange) {
  const std::int64_t n = 6000;  // two chunks
  for (const DType dtype : {DType::i32, DType::i64}) {
    SCOPED_TRACE(dtype_name(dtype));
    std::vector<std::int64_t> values = integers<std::int64_t>(n, 161, 0, 99);
    auto check = [&](std::int64_t expected) {
      std::vector<std::uint8_t> bytes(static_cast<std::size_t>(n) * dtype_size(dtype));
      for (std::size_t i = 0; i < values.size(); ++i) {
        if (dtype == DType::i32) {
          const auto v = static_cast<std::int32_t>(values[i]);
          std::memcpy(bytes.data() + 4 * i, &v, 4);
        } else {
          std::memcpy(bytes.data() + 8 * i, &values[i], 8);
        }
      }
      const Dev<std::uint8_t> e(bytes);
      EXPECT_EQ(cpu().first_out_of_range(bytes.data(), dtype, n, 100), expected);
      EXPECT_EQ(emu().first_out_of_range(e.get(), dtype, n, 100), expected);
    };
    check(-1);
    values[5500] = 100;
    check(5500);
    values[4200] = -1;
    check(4200);
    values[7] = 1000;
    check(7);
  }
  EXPECT_EQ(emu().first_out_of_range(nullptr, DType::i64, 0, 10), -1);
}

// check_index: the CPU throws at once; the CUDA back end queues the check and
// throws at its next read of the device, naming the first failed check's
// position and value, and then forgets the queue.
TEST(KernelBackendChecks, CheckIndexIsRaisedAtTheNextRead) {
  const auto message = [](const char* what) {
    return [what](std::int64_t position, std::int64_t value) {
      return std::string(what) + ": " + std::to_string(value) + " at " + std::to_string(position);
    };
  };
  std::vector<std::int64_t> good = integers<std::int64_t>(5000, 162, 0, 9);
  std::vector<std::int64_t> bad = good;
  bad[4321] = 12;
  std::vector<std::int32_t> bad32(bad.begin(), bad.end());
  bad32[17] = -3;
  EXPECT_NO_THROW(cpu().check_index(good.data(), DType::i64, 5000, 10, message("cpu")));
  try {
    cpu().check_index(bad.data(), DType::i64, 5000, 10, message("cpu"));
    ADD_FAILURE() << "the CPU did not throw";
  } catch (const std::invalid_argument& e) {
    EXPECT_STREQ(e.what(), "cpu: 12 at 4321");
  }

  const Dev<std::int64_t> eg(good), eb(bad);
  const Dev<std::int32_t> eb32(bad32);
  const Dev<float> scratch_value(std::vector<float>{1.5F});
  emu().check_index(eg.get(), DType::i64, 5000, 10, message("good"));
  emu().check_index(eb32.get(), DType::i32, 5000, 10, message("first"));  // queued, no throw
  emu().check_index(eb.get(), DType::i64, 5000, 10, message("second"));
  float host = 0.0F;
  try {
    emu().to_host(&host, scratch_value.get(), sizeof(float));
    ADD_FAILURE() << "the next read did not raise the queued check";
  } catch (const std::invalid_argument& e) {
    EXPECT_STREQ(e.what(), "first: -3 at 17");
  }
  EXPECT_NO_THROW(emu().to_host(&host, scratch_value.get(), sizeof(float)));  // queue cleared
  EXPECT_EQ(host, 1.5F);
  // synchronize() is a read too; and more checks than the queue holds are raised early.
  emu().check_index(eb.get(), DType::i64, 5000, 10, message("sync"));
  EXPECT_THROW(emu().synchronize(), std::invalid_argument);
  // (The queue holds 1024 checks; each good one here looks at one index.)
  for (int i = 0; i < 1024; ++i) emu().check_index(eg.get(), DType::i64, 1, 10, message("ok"));
  emu().check_index(eb.get(), DType::i64, 5000, 10, message("1025th"));  // raises the good ones
  EXPECT_THROW(emu().synchronize(), std::invalid_argument);
  EXPECT_NO_THROW(emu().synchronize());
  // gradient_stats brings the checks' results back with its statistics (one
  // copy): a failed check raises there, and good ones leave the statistics.
  const std::vector<float> grads = {3.0F, -4.0F};
  const Dev<float> eg2(grads);
  emu().check_index(eb.get(), DType::i64, 5000, 10, message("stats"));
  try {
    emu().gradient_stats(eg2.get(), 2, nullptr);
    ADD_FAILURE() << "gradient_stats did not raise the queued check";
  } catch (const std::invalid_argument& e) {
    EXPECT_STREQ(e.what(), "stats: 12 at 4321");
  }
  emu().check_index(eg.get(), DType::i64, 5000, 10, message("good"));
  const GradientStats stats = emu().gradient_stats(eg2.get(), 2, nullptr);
  EXPECT_EQ(stats.norm, 5.0);
  EXPECT_EQ(stats.amax, 4.0);
  EXPECT_TRUE(stats.loss_finite);
  EXPECT_NO_THROW(emu().synchronize());  // nothing left queued
}

// clip_by_norm: the CPU's bits, from a norm recorded on the device (above,
// below and at the limit).
TEST(KernelBackendChecks, ClipByRecordedNorm) {
  const std::vector<float> grads = uniform(5000, 181, -2.0F, 2.0F);
  GradientStats cpu_stats = cpu().gradient_stats(grads.data(), 5000, nullptr);
  const Dev<std::int64_t> record(std::vector<std::int64_t>(kGradientStatsWords, 0));
  auto* on_device = reinterpret_cast<GradientStats*>(record.get());
  for (const double max_norm : {1.0, cpu_stats.norm, 1e9}) {
    SCOPED_TRACE(::testing::Message() << "max_norm " << max_norm);
    std::vector<float> want = grads;
    cpu().clip_by_norm(want.data(), 5000, &cpu_stats, max_norm);
    const Dev<float> g(grads);
    emu().gradient_stats_to(g.get(), 5000, nullptr, on_device);
    emu().clip_by_norm(g.get(), 5000, on_device, max_norm);
    const std::vector<float> got = g.host();
    EXPECT_EQ(0, std::memcmp(got.data(), want.data(), want.size() * sizeof(float)));
    EXPECT_EQ(want == grads, max_norm >= cpu_stats.norm);
  }
  // A non-finite gradient records an infinite norm: the factor is 0 there too
  // (the step is then skipped or reported as diverged; NaN bits may differ).
  std::vector<float> overflowed = grads;
  overflowed[17] = kInf;
  std::vector<float> want = overflowed;
  cpu_stats = cpu().gradient_stats(want.data(), 5000, nullptr);
  cpu().clip_by_norm(want.data(), 5000, &cpu_stats, 1.0);
  const Dev<float> g(overflowed);
  emu().gradient_stats_to(g.get(), 5000, nullptr, on_device);
  emu().clip_by_norm(g.get(), 5000, on_device, 1.0);
  const std::vector<float> got = g.host();
  for (std::size_t i = 0; i < got.size(); ++i) {
    EXPECT_TRUE(std::isnan(want[i]) ? std::isnan(got[i]) : got[i] == want[i]) << i;
  }
  EXPECT_TRUE(std::isnan(got[17]));
  EXPECT_EQ(got[0], 0.0F);
}

// Uploads: copies made between begin_uploads and end_uploads (on a GPU, on
// the copy stream, their destinations allocated there) are what the work
// after use_uploads reads; a used or unknown ticket is nothing to wait for.
TEST(KernelBackendChecks, UploadsAreReadAfterUse) {
  const std::vector<float> values = uniform(1 << 20, 191, -1.0F, 1.0F);
  const Dev<float> busy(values);  // compute-stream work queued before the scope
  emu().unary(backend::Unary::mul_scalar, busy.get(), busy.get(), 1 << 20, 2.0F);
  emu().begin_uploads();
  const Dev<float> up(values);
  const std::uint64_t ticket = emu().end_uploads();
  emu().use_uploads(ticket);
  const Dev<float> twice(1 << 20);
  emu().unary(backend::Unary::mul_scalar, up.get(), twice.get(), 1 << 20, 2.0F);
  EXPECT_EQ(up.host(), values);
  EXPECT_EQ(twice.host(), busy.host());
  emu().use_uploads(ticket);
  emu().use_uploads(ticket + 1000);
}

// to_host_later: the bytes as of the copy queued then, whatever is queued
// after it; its staging buffer is kept from later copies until collected (on
// a GPU: 40 copies through the 32-buffer staging ring before it is), and a
// read dropped uncollected gives its buffer back.
TEST(KernelBackendChecks, ReadLaterGivesTheBytesAsOfItsCopy) {
  const Dev<float> a(std::vector<float>{1.0F, 2.0F, 3.0F});
  std::unique_ptr<backend::PendingRead> dropped = emu().to_host_later(a.get(), sizeof(float));
  std::unique_ptr<backend::PendingRead> later = emu().to_host_later(a.get(), 3 * sizeof(float));
  dropped.reset();
  const Dev<float> other(4096);
  for (int i = 0; i < 40; ++i) {
    const std::vector<float> filler(4096, static_cast<float>(i));
    emu().from_host(other.get(), filler.data(), filler.size() * sizeof(float));
  }
  const std::vector<float> overwrite = {7.0F, 8.0F, 9.0F};
  emu().from_host(a.get(), overwrite.data(), 3 * sizeof(float));
  std::vector<float> got(3, kNaN);
  later->wait_into(got.data());
  EXPECT_EQ(got, (std::vector<float>{1.0F, 2.0F, 3.0F}));
  EXPECT_EQ(a.host(), overwrite);
  EXPECT_EQ(other.host(), std::vector<float>(4096, 39.0F));
}

// gradient_stats_to queues the statistics into device records without a read;
// read_gradient_stats brings several back in one copy, raising the queued
// index checks as any read does.
TEST(KernelBackendChecks, GradientStatsQueuedIntoRecords) {
  const std::vector<float> grads = {3.0F, -4.0F, 0.0F};
  const std::vector<float> overflowed = {1.0F, kInf, 2.0F};
  const Dev<float> eg(grads), eo(overflowed);
  const Dev<float> losses(std::vector<float>{2.5F, kNaN});
  const Dev<std::int64_t> records(std::vector<std::int64_t>(3 * kGradientStatsWords, -1));
  auto* record = reinterpret_cast<GradientStats*>(records.get());
  emu().gradient_stats_to(eg.get(), 3, losses.get(), record);
  emu().gradient_stats_to(eg.get(), 3, losses.get() + 1, record + 1);
  emu().gradient_stats_to(eo.get(), 3, nullptr, record + 2);
  std::vector<GradientStats> host(3);
  emu().read_gradient_stats(record, 3, host.data());
  const float loss_values[] = {2.5F, kNaN};
  for (int i = 0; i < 2; ++i) {
    const GradientStats cpu_stats = cpu().gradient_stats(grads.data(), 3, &loss_values[i]);
    EXPECT_EQ(host[i].norm, cpu_stats.norm);
    EXPECT_EQ(host[i].amax, cpu_stats.amax);
    EXPECT_EQ(host[i].loss_finite, cpu_stats.loss_finite);
  }
  EXPECT_EQ(host[0].norm, 5.0);
  EXPECT_EQ(host[0].amax, 4.0);
  EXPECT_TRUE(host[0].loss_finite);
  EXPECT_EQ(host[0].loss, 2.5F);
  EXPECT_FALSE(host[1].loss_finite);
  EXPECT_TRUE(std::isnan(host[1].loss));
  EXPECT_EQ(host[2].norm, kInf);  // a non-finite gradient: both +inf
  EXPECT_EQ(host[2].amax, kInf);
  EXPECT_TRUE(host[2].loss_finite);  // no loss given

  std::vector<std::int64_t> bad(10, 1);
  bad[6] = 40;
  const Dev<std::int64_t> eb(bad);
  emu().check_index(eb.get(), DType::i64, 10, 10, [](std::int64_t position, std::int64_t value) {
    return "queued: " + std::to_string(value) + " at " + std::to_string(position);
  });
  try {
    emu().read_gradient_stats(record, 1, host.data());
    ADD_FAILURE() << "read_gradient_stats did not raise the queued check";
  } catch (const std::invalid_argument& e) {
    EXPECT_STREQ(e.what(), "queued: 40 at 6");
  }
  EXPECT_NO_THROW(emu().synchronize());  // nothing left queued
}

// ---- Losses ---------------------------------------------------------------------------------

TEST(KernelBackendLoss, PaddedLoss) {
  const std::int64_t rows = 10;
  const std::vector<float> xent = uniform(rows, 171, 0.0F, 5.0F);
  std::vector<float> w = uniform(rows, 172, 0.0F, 1.0F);
  w[3] = w[7] = 0.0F;
  const float upstream = 0.75F;
  for (const bool zero_weights : {false, true}) {
    SCOPED_TRACE(::testing::Message() << "zero weights " << zero_weights);
    if (zero_weights) std::fill(w.begin(), w.end(), 0.0F);
    float loss = kNaN;
    cpu().padded_loss(xent.data(), w.data(), rows, 0.25, &loss);
    const Dev<float> ex(xent), ew(w), eloss(1), eup(std::vector<float>{upstream});
    emu().padded_loss(ex.get(), ew.get(), rows, 0.25, eloss.get());
    // f64 sums in another order: the f32 result rarely differs in its last bit.
    EXPECT_TRUE(close(eloss.host(), {loss}, 0.0F, 2e-7F)) << "loss";
    for (const bool with_dw : {true, false}) {
      std::vector<float> row_scale = poisoned<float>(rows), dw = poisoned<float>(rows);
      float x_scale = kNaN;
      cpu().padded_loss_backward(xent.data(), w.data(), rows, 0.25, &upstream, row_scale.data(),
                                 &x_scale, with_dw ? dw.data() : nullptr);
      const Dev<float> erow(rows), edw(rows), exs(1);
      emu().padded_loss_backward(ex.get(), ew.get(), rows, 0.25, eup.get(), erow.get(), exs.get(),
                                 with_dw ? edw.get() : nullptr);
      EXPECT_TRUE(close(erow.host(), row_scale, 0.0F, 2e-7F)) << "row_scale";
      EXPECT_TRUE(close(exs.host(), {x_scale}, 0.0F, 2e-7F)) << "x_scale";
      EXPECT_TRUE(close(edw.host(), dw, 1e-7F, 2e-7F)) << "dw";
    }
  }
}

TEST(KernelBackendLoss, CrossEntropyWithSmoothing) {
  const std::int64_t rows = 6, c = 11;
  const std::vector<float> x = uniform(rows * c, 181, -4.0F, 4.0F);
  const std::vector<std::int64_t> labels{0, 10, 3, 3, 7, 5};
  const std::vector<float> row_scale = uniform(rows, 182, 0.0F, 2.0F);
  const float factor = 0.125F;
  const Dev<float> ex(x), erow(row_scale), efactor(std::vector<float>{factor});
  const Dev<std::int64_t> elabels(labels);
  const float on = 0.9F, off = 0.01F;
  for (const bool smoothing : {false, true}) {
    SCOPED_TRACE(::testing::Message() << "smoothing " << smoothing);
    const float von = smoothing ? on : 1.0F, voff = smoothing ? off : 0.0F;
    std::vector<float> loss = poisoned<float>(rows), lse = poisoned<float>(rows);
    cpu().cross_entropy_forward(x.data(), labels.data(), rows, c, von, voff, loss.data(),
                                lse.data());
    const Dev<float> eloss(rows), else_(rows);
    emu().cross_entropy_forward(ex.get(), elabels.get(), rows, c, von, voff, eloss.get(),
                                else_.get());
    EXPECT_TRUE(close(eloss.host(), loss, 1e-6F, 1e-5F)) << "loss";
    EXPECT_TRUE(close(else_.host(), lse, 1e-6F, 1e-6F)) << "lse";
    const Dev<float> clse(lse);
    for (int variant = 0; variant < 4; ++variant) {  // bits: row_scale, scale_factor
      const bool rs = (variant & 1) != 0, sf = (variant & 2) != 0;
      SCOPED_TRACE(::testing::Message() << "row_scale " << rs << " scale_factor " << sf);
      std::vector<float> dx = poisoned<float>(rows * c);
      cpu().cross_entropy_backward(x.data(), labels.data(), lse.data(),
                                   rs ? row_scale.data() : nullptr, 0.5F, sf ? &factor : nullptr,
                                   rows, c, von, voff, dx.data());
      const Dev<float> edx(rows * c);
      emu().cross_entropy_backward(ex.get(), elabels.get(), clse.get(), rs ? erow.get() : nullptr,
                                   0.5F, sf ? efactor.get() : nullptr, rows, c, von, voff,
                                   edx.get());
      EXPECT_TRUE(close(edx.host(), dx, 1e-7F, 1e-5F)) << "dx";
    }
  }
}

// 16-bit logits read as they are: the CPU's f32 results on the same values,
// dx rounded once to the logits' dtype (in place too).
TEST(KernelBackendLoss, CrossEntropyReads16BitLogits) {
  ASSERT_TRUE(emu().cross_entropy_reads_16bit());
  EXPECT_FALSE(cpu().cross_entropy_reads_16bit());
  const std::int64_t rows = 5, c = 300;
  const std::vector<std::int64_t> labels{0, 299, 17, 17, 150};
  const std::vector<float> row_scale = uniform(rows, 184, 0.0F, 2.0F);
  const Dev<std::int64_t> elabels(labels);
  const Dev<float> erow(row_scale);
  const float on = 0.9F, off = 0.1F / 299.0F;
  for (const DType dtype : {DType::bf16, DType::f16}) {
    SCOPED_TRACE(dtype_name(dtype));
    const auto to16 = [dtype](float v) {
      return dtype == DType::bf16 ? float_to_bfloat16_bits(v) : float_to_half_bits(v);
    };
    const auto from16 = [dtype](std::uint16_t b) {
      return dtype == DType::bf16 ? bfloat16_bits_to_float(b) : half_bits_to_float(b);
    };
    const std::vector<float> raw = uniform(rows * c, 183, -6.0F, 6.0F);
    std::vector<std::uint16_t> x16(raw.size());
    std::vector<float> x(raw.size());
    for (std::size_t i = 0; i < raw.size(); ++i) {
      x16[i] = to16(raw[i]);
      x[i] = from16(x16[i]);
    }
    std::vector<float> loss(rows), lse(rows), dx(x.size());
    cpu().cross_entropy_forward(x.data(), labels.data(), rows, c, on, off, loss.data(), lse.data());
    cpu().cross_entropy_backward(x.data(), labels.data(), lse.data(), row_scale.data(), 0.5F,
                                 nullptr, rows, c, on, off, dx.data());
    const Dev<std::uint16_t> ex(x16);
    const Dev<float> eloss(rows), else_(rows);
    emu().cross_entropy_forward_16(dtype, ex.get(), elabels.get(), rows, c, on, off, eloss.get(),
                                   else_.get());
    EXPECT_TRUE(close(eloss.host(), loss, 1e-6F, 1e-5F)) << "loss";
    EXPECT_TRUE(close(else_.host(), lse, 1e-6F, 1e-6F)) << "lse";
    for (const bool in_place : {false, true}) {
      SCOPED_TRACE(::testing::Message() << "in place " << in_place);
      const Dev<std::uint16_t> ex2(x16), edx(x16.size());
      emu().cross_entropy_backward_16(dtype, ex2.get(), elabels.get(), else_.get(), erow.get(),
                                      0.5F, nullptr, rows, c, on, off,
                                      in_place ? ex2.get() : edx.get());
      const std::vector<std::uint16_t> got16 = in_place ? ex2.host() : edx.host();
      std::vector<float> got(got16.size()), want(dx.size());
      for (std::size_t i = 0; i < got16.size(); ++i) {
        got[i] = from16(got16[i]);
        want[i] = from16(to16(dx[i]));  // the CPU's f32 gradient, rounded once
      }
      // One step of the 16-bit type where the f32 results round to neighbours.
      EXPECT_TRUE(close(got, want, 1e-7F, dtype == DType::bf16 ? 1e-2F : 1e-3F)) << "dx";
    }
  }
}

// ---- Dropout ----------------------------------------------------------------------------------

// Philox and the keep rule are shared (rig/math): the CPU's bits.
TEST(KernelBackendDropout, ForwardBackwardAndMask) {
  const RandomKey key{1234, 56, 1, 789};
  const float p = 0.3F, scale = 1.0F / 0.7F;
  const std::int64_t n = 1001;
  const std::size_t words = (n + 31) / 32;
  for (const DType dtype : {DType::f32, DType::f16, DType::bf16}) {
    SCOPED_TRACE(dtype_name(dtype));
    const std::vector<std::uint8_t> src = random_bytes(dtype, n, 191);
    const std::size_t bytes = src.size();
    for (const bool with_bits : {true, false}) {
      std::vector<std::uint8_t> dst = poisoned<std::uint8_t>(bytes);
      std::vector<std::uint32_t> bits = poisoned<std::uint32_t>(words);
      cpu().dropout_forward(key, p, scale, dtype, src.data(), dst.data(), n,
                            with_bits ? bits.data() : nullptr);
      const Dev<std::uint8_t> esrc(src), edst(bytes);
      const Dev<std::uint32_t> ebits(words);
      emu().dropout_forward(key, p, scale, dtype, esrc.get(), edst.get(), n,
                            with_bits ? ebits.get() : nullptr);
      EXPECT_TRUE(same_values(dtype, edst.host(), dst)) << "dst, bits " << with_bits;
      EXPECT_TRUE(same(ebits.host(), bits)) << "mask bits";
      if (!with_bits) continue;
      const std::vector<std::uint8_t> grad = random_bytes(dtype, n, 192);
      std::vector<std::uint8_t> dx = poisoned<std::uint8_t>(bytes);
      cpu().dropout_backward(bits.data(), scale, dtype, grad.data(), dx.data(), n);
      const Dev<std::uint8_t> egrad(grad), edx(bytes);
      emu().dropout_backward(ebits.get(), scale, dtype, egrad.get(), edx.get(), n);
      EXPECT_TRUE(same_values(dtype, edx.host(), dx)) << "backward";
    }
  }
  for (const std::uint64_t first : {std::uint64_t{0}, std::uint64_t{5}, std::uint64_t{4096}}) {
    SCOPED_TRACE(::testing::Message() << "mask from " << first);
    std::vector<std::uint8_t> mask = poisoned<std::uint8_t>(n + 3);
    cpu().dropout_mask(key, 0.25F, mask.data() + 1, n, first);
    const Dev<std::uint8_t> emask(n + 3);
    emu().dropout_mask(key, 0.25F, emask.get() + 1, n, first);
    EXPECT_TRUE(same(emask.host(), mask));
  }
}

// ---- Indexing and data movement -------------------------------------------------------------

TEST(KernelBackendIndexing, ConcatExtractZeroRows) {
  const std::int64_t rows = 5, row_bytes = 17;  // pieces of 4, 6 and 3 bytes, 4 bytes of gap
  const std::vector<std::uint8_t> p0 = random_bytes(DType::u8, 20, 201),
                                  p1 = random_bytes(DType::u8, 30, 202),
                                  p2 = random_bytes(DType::u8, 15, 203);
  const std::vector<std::uint8_t> base = random_bytes(DType::u8, rows * row_bytes, 204);
  std::vector<std::uint8_t> want = base;
  const backend::RowPiece cpieces[] = {{reinterpret_cast<const std::byte*>(p0.data()), 4, 0},
                                       {reinterpret_cast<const std::byte*>(p1.data()), 6, 9},
                                       {reinterpret_cast<const std::byte*>(p2.data()), 3, 4}};
  cpu().concat_rows(cpieces, 3, reinterpret_cast<std::byte*>(want.data()), row_bytes, rows);
  const Dev<std::uint8_t> e0(p0), e1(p1), e2(p2), edst(base);
  const backend::RowPiece epieces[] = {{reinterpret_cast<const std::byte*>(e0.get()), 4, 0},
                                       {reinterpret_cast<const std::byte*>(e1.get()), 6, 9},
                                       {reinterpret_cast<const std::byte*>(e2.get()), 3, 4}};
  emu().concat_rows(epieces, 3, reinterpret_cast<std::byte*>(edst.get()), row_bytes, rows);
  EXPECT_TRUE(same(edst.host(), want)) << "concat_rows";

  std::vector<std::uint8_t> extracted = poisoned<std::uint8_t>(rows * 7);
  cpu().extract_rows(reinterpret_cast<const std::byte*>(want.data()), row_bytes, 5,
                     reinterpret_cast<std::byte*>(extracted.data()), 7, rows);
  const Dev<std::uint8_t> eextracted(rows * 7);
  emu().extract_rows(reinterpret_cast<const std::byte*>(edst.get()), row_bytes, 5,
                     reinterpret_cast<std::byte*>(eextracted.get()), 7, rows);
  EXPECT_TRUE(same(eextracted.host(), extracted)) << "extract_rows";

  cpu().zero_rows(reinterpret_cast<std::byte*>(want.data()), row_bytes, 3, 11, rows);
  emu().zero_rows(reinterpret_cast<std::byte*>(edst.get()), row_bytes, 3, 11, rows);
  EXPECT_TRUE(same(edst.host(), want)) << "zero_rows";
}

TEST(KernelBackendIndexing, GatherAndBackward) {
  // x [3, 5, 2]; index [3, 4, 2] (fewer than x's 5 along the axis 1) and
  // [2, 5, 2] along axis 0 (fewer rows off the axis).
  const Shape x_shape{3, 5, 2};
  const std::vector<float> x = uniform(30, 211);
  std::vector<std::uint8_t> x64(30 * 8);
  for (std::size_t i = 0; i < 30; ++i) {
    const auto v = static_cast<std::int64_t>(x[i] * 1e9F);
    std::memcpy(x64.data() + 8 * i, &v, 8);
  }
  struct Case {
    std::int64_t axis;
    Shape index_shape;
    std::int64_t limit;
  };
  for (const Case& c : {Case{1, {3, 4, 2}, 5}, Case{0, {2, 5, 2}, 3}, Case{2, {3, 5, 3}, 2}}) {
    for (const DType index_type : {DType::i64, DType::i32}) {
      SCOPED_TRACE(::testing::Message() << "axis " << c.axis << " " << dtype_name(index_type));
      const auto count = static_cast<std::size_t>(shape_numel(c.index_shape));
      const std::vector<std::int64_t> idx = integers<std::int64_t>(count, 212, 0, c.limit - 1);
      std::vector<std::uint8_t> index(count * dtype_size(index_type));
      for (std::size_t i = 0; i < count; ++i) {
        if (index_type == DType::i32) {
          const auto v = static_cast<std::int32_t>(idx[i]);
          std::memcpy(index.data() + 4 * i, &v, 4);
        } else {
          std::memcpy(index.data() + 8 * i, &idx[i], 8);
        }
      }
      const Dev<std::uint8_t> eindex(index), ex64(x64);
      const Dev<float> ex(x);
      // f32 and i64 values.
      std::vector<float> out = poisoned<float>(count);
      cpu().gather({x.data(), DType::f32, x_shape}, c.axis,
                   {index.data(), index_type, c.index_shape}, out.data());
      const Dev<float> eout(count);
      emu().gather({ex.get(), DType::f32, x_shape}, c.axis,
                   {eindex.get(), index_type, c.index_shape}, eout.get());
      EXPECT_TRUE(same(eout.host(), out)) << "gather f32";
      std::vector<std::int64_t> out64 = poisoned<std::int64_t>(count);
      cpu().gather({x64.data(), DType::i64, x_shape}, c.axis,
                   {index.data(), index_type, c.index_shape}, out64.data());
      const Dev<std::int64_t> eout64(count);
      emu().gather({ex64.get(), DType::i64, x_shape}, c.axis,
                   {eindex.get(), index_type, c.index_shape}, eout64.get());
      EXPECT_TRUE(same(eout64.host(), out64)) << "gather i64";
      // Backward: repeated indices sum in the CPU's order.
      const std::vector<float> grad = uniform(count, 213);
      std::vector<float> dx(30, 0.0F);
      cpu().gather_backward(grad.data(), c.axis, {index.data(), index_type, c.index_shape},
                            dx.data(), x_shape);
      const Dev<float> egrad(grad), edx(std::vector<float>(30, 0.0F));
      emu().gather_backward(egrad.get(), c.axis, {eindex.get(), index_type, c.index_shape},
                            edx.get(), x_shape);
      EXPECT_TRUE(same(edx.host(), dx)) << "gather_backward";
    }
  }
}

TEST(KernelBackendIndexing, IndexSelectAndAdd) {
  // x [outer 2, n 5, inner 3]; index [7] with repeats.
  const std::int64_t outer = 2, n = 5, inner = 3, k = 7;
  const std::vector<std::int64_t> idx{4, 0, 4, 2, 4, 1, 0};
  std::vector<std::int32_t> idx32(idx.begin(), idx.end());
  const Dev<std::int64_t> e64(idx);
  const Dev<std::int32_t> e32(idx32);
  for (const DType index_type : {DType::i64, DType::i32}) {
    SCOPED_TRACE(dtype_name(index_type));
    const void* cindex =
        index_type == DType::i64 ? static_cast<const void*>(idx.data()) : idx32.data();
    const void* eindex = index_type == DType::i64 ? static_cast<const void*>(e64.get()) : e32.get();
    for (const std::size_t bytes : {std::size_t{2}, std::size_t{4}, std::size_t{8}}) {
      const std::vector<std::uint8_t> x = random_bytes(DType::u8, outer * n * inner * bytes, 221);
      std::vector<std::uint8_t> out = poisoned<std::uint8_t>(outer * k * inner * bytes);
      cpu().index_select(x.data(), bytes, outer, n, inner, {cindex, index_type, {k}}, out.data());
      const Dev<std::uint8_t> ex(x), eout(out.size());
      emu().index_select(ex.get(), bytes, outer, n, inner, {eindex, index_type, {k}}, eout.get());
      EXPECT_TRUE(same(eout.host(), out)) << "index_select, " << bytes << "-byte elements";
    }
    const std::vector<float> grad = uniform(outer * k * inner, 222);
    std::vector<float> dx = uniform(outer * n * inner, 223);  // accumulates
    const Dev<float> egrad(grad), edx(dx);
    cpu().index_add(grad.data(), outer, n, inner, {cindex, index_type, {k}}, dx.data());
    emu().index_add(egrad.get(), outer, n, inner, {eindex, index_type, {k}}, edx.get());
    EXPECT_TRUE(same(edx.host(), dx)) << "index_add";
  }
}

// index_add sorts the positions by row (kernels/index_add.hpp): the CPU's
// bits with many duplicates of one row, over several rank chunks (k > 1024),
// for k = 1 and k = 0, and out-of-range or negative rows adding nothing.
TEST(KernelBackendIndexing, IndexAddSortedByRow) {
  const std::int64_t outer = 2, n = 30, inner = 5;
  std::vector<std::int64_t> hot = integers<std::int64_t>(1500, 231, 0, n - 1);
  std::mt19937 gen(232);
  for (auto& v : hot) {
    if (gen() % 10 < 7) v = 11;  // 70% of the positions on one row
  }
  for (const std::vector<std::int64_t>& idx :
       {hot, std::vector<std::int64_t>{17}, std::vector<std::int64_t>{}}) {
    const auto k = static_cast<std::int64_t>(idx.size());
    const std::vector<std::int32_t> idx32(idx.begin(), idx.end());
    const Dev<std::int64_t> e64(idx);
    const Dev<std::int32_t> e32(idx32);
    for (const DType index_type : {DType::i64, DType::i32}) {
      SCOPED_TRACE(::testing::Message() << "k " << k << " " << dtype_name(index_type));
      const void* cindex =
          index_type == DType::i64 ? static_cast<const void*>(idx.data()) : idx32.data();
      const void* eindex =
          index_type == DType::i64 ? static_cast<const void*>(e64.get()) : e32.get();
      const std::vector<float> grad = uniform(static_cast<std::size_t>(outer * k * inner), 233);
      std::vector<float> dx = uniform(static_cast<std::size_t>(outer * n * inner), 234);
      const Dev<float> egrad(grad), edx(dx);
      cpu().index_add(grad.data(), outer, n, inner, {cindex, index_type, {k}}, dx.data());
      emu().index_add(egrad.get(), outer, n, inner, {eindex, index_type, {k}}, edx.get());
      EXPECT_TRUE(same(edx.host(), dx));
    }
  }
  // Rows out of [0, n) add nothing (the op raises the error after the fact).
  const std::vector<std::int64_t> idx{2, -1, 3, 2, 7, -5, 0, 2};
  const std::vector<std::int32_t> idx32(idx.begin(), idx.end());
  const Dev<std::int64_t> e64(idx);
  const Dev<std::int32_t> e32(idx32);
  const std::int64_t rows = 4, k = 8;
  const std::vector<float> grad = uniform(static_cast<std::size_t>(k * 3), 235);
  std::vector<float> want = uniform(static_cast<std::size_t>(rows * 3), 236);
  const std::vector<float> dx0 = want;
  for (std::int64_t t = 0; t < k; ++t) {
    const std::int64_t row = idx[static_cast<std::size_t>(t)];
    if (row < 0 || row >= rows) continue;
    for (std::int64_t i = 0; i < 3; ++i) {
      want[static_cast<std::size_t>(row * 3 + i)] += grad[static_cast<std::size_t>(t * 3 + i)];
    }
  }
  for (const DType index_type : {DType::i64, DType::i32}) {
    SCOPED_TRACE(dtype_name(index_type));
    const void* eindex = index_type == DType::i64 ? static_cast<const void*>(e64.get()) : e32.get();
    const Dev<float> egrad(grad), edx(dx0);
    emu().index_add(egrad.get(), 1, rows, 3, {eindex, index_type, {k}}, edx.get());
    EXPECT_TRUE(same(edx.host(), want));
  }
}

TEST(KernelBackendIndexing, Argmax) {
  std::vector<float> x = uniform(4 * 9 * 3, 231);
  x[5] = x[2];  // ties
  x[40] = kNaN;
  x[50] = kNaN;
  x[3 * 9 * 3 + 4] = kInf;
  for (const std::int64_t inner : {3, 1}) {
    const std::int64_t outer = inner == 1 ? 12 : 4, n = 9;
    SCOPED_TRACE(::testing::Message() << "inner " << inner);
    const auto outs = static_cast<std::size_t>(outer * inner);
    std::vector<std::int64_t> want = poisoned<std::int64_t>(outs);
    cpu().argmax({x.data(), DType::f32, {outer, n, inner}}, outer, n, inner, want.data());
    const Dev<float> ex(x);
    const Dev<std::int64_t> eout(outs);
    emu().argmax({ex.get(), DType::f32, {outer, n, inner}}, outer, n, inner, eout.get());
    EXPECT_TRUE(same(eout.host(), want)) << "f32";
  }
  for (const DType dtype : {DType::i32, DType::i64, DType::u8}) {
    SCOPED_TRACE(dtype_name(dtype));
    const std::vector<std::uint8_t> v = random_bytes(dtype, 60, 232);
    std::vector<std::int64_t> want = poisoned<std::int64_t>(10);
    cpu().argmax({v.data(), dtype, {2, 6, 5}}, 2, 6, 5, want.data());
    const Dev<std::uint8_t> ev(v);
    const Dev<std::int64_t> eout(10);
    emu().argmax({ev.get(), dtype, {2, 6, 5}}, 2, 6, 5, eout.get());
    EXPECT_TRUE(same(eout.host(), want));
    std::vector<std::int64_t> want_rows = poisoned<std::int64_t>(3);
    cpu().argmax({v.data(), dtype, {3, 20, 1}}, 3, 20, 1, want_rows.data());
    const Dev<std::int64_t> erows(3);
    emu().argmax({ev.get(), dtype, {3, 20, 1}}, 3, 20, 1, erows.get());
    EXPECT_TRUE(same(erows.host(), want_rows)) << "inner 1";
  }
}

TEST(KernelBackendIndexing, TopK) {
  const std::int64_t rows = 3, n = 100;
  std::vector<float> x = uniform(rows * n, 241);
  for (std::size_t i = 0; i < 40; ++i) x[i * 7 % 300] = 0.5F;  // ties
  x[17] = kNaN;
  x[150] = kInf;
  x[151] = -kInf;
  const Dev<float> ex(x);
  for (const std::int64_t k : {1, 5, 64}) {
    SCOPED_TRACE(::testing::Message() << "k " << k);
    const auto outs = static_cast<std::size_t>(rows * k);
    std::vector<float> values = poisoned<float>(outs);
    std::vector<std::int64_t> indices = poisoned<std::int64_t>(outs);
    cpu().topk({x.data(), DType::f32, {rows, n}}, rows, n, k, values.data(), indices.data());
    const Dev<float> evalues(outs);
    const Dev<std::int64_t> eindices(outs);
    emu().topk({ex.get(), DType::f32, {rows, n}}, rows, n, k, evalues.get(), eindices.get());
    EXPECT_TRUE(same(evalues.host(), values)) << "values";
    EXPECT_TRUE(same(eindices.host(), indices)) << "indices";
  }
  {
    const std::vector<std::uint8_t> v = random_bytes(DType::i64, 2 * 30, 242);
    std::vector<std::int64_t> values = poisoned<std::int64_t>(20), indices = values;
    cpu().topk({v.data(), DType::i64, {2, 30}}, 2, 30, 10, values.data(), indices.data());
    const Dev<std::uint8_t> ev(v);
    const Dev<std::int64_t> evalues(20), eindices(20);
    emu().topk({ev.get(), DType::i64, {2, 30}}, 2, 30, 10, evalues.get(), eindices.get());
    EXPECT_TRUE(same(evalues.host(), values)) << "i64 values";
    EXPECT_TRUE(same(eindices.host(), indices)) << "i64 indices";
  }
  const Dev<float> evalues(rows * 65);
  const Dev<std::int64_t> eindices(rows * 65);
  EXPECT_THROW(
      emu().topk({ex.get(), DType::f32, {rows, n}}, rows, n, 65, evalues.get(), eindices.get()),
      std::invalid_argument);
  EXPECT_EQ(emu().topk_max_k(), 64);  // what ops::topk asks before it selects on the host
  EXPECT_EQ(cpu().topk_max_k(), std::numeric_limits<std::int64_t>::max());
}

// ---- Optimizer updates, LARC --------------------------------------------------------------------

// rig/math/optimizer.hpp's element math: the CPU's bits.
TEST(KernelBackendOptimizer, AdamWithAndWithoutAmsgrad) {
  const std::int64_t n = 1000;
  const std::vector<float> p = uniform(n, 251), g = uniform(n, 252),
                           m = uniform(n, 253, -0.1F, 0.1F), v = uniform(n, 254, 0.0F, 0.01F),
                           vmax = uniform(n, 255, 0.0F, 0.01F);
  AdamUpdate args;
  args.step_size = 1e-3F / (1.0F - 0.9F * 0.9F * 0.9F);
  args.inv_bc2_sqrt = 1.0F / std::sqrt(1.0F - 0.999F * 0.999F * 0.999F);
  args.coupled_decay = 0.01F;
  args.shrink = 0.9999F;
  for (const bool amsgrad : {true, false}) {
    SCOPED_TRACE(::testing::Message() << "amsgrad " << amsgrad);
    std::vector<float> cp = p, cm = m, cv = v, cvmax = vmax;
    cpu().adam_update(n, cp.data(), g.data(), cm.data(), cv.data(),
                      amsgrad ? cvmax.data() : nullptr, args, {});
    const Dev<float> ep(p), eg(g), em(m), ev(v), evmax(vmax);
    emu().adam_update(n, ep.get(), eg.get(), em.get(), ev.get(), amsgrad ? evmax.get() : nullptr,
                      args, {});
    EXPECT_TRUE(same(ep.host(), cp)) << "p";
    EXPECT_TRUE(same(em.host(), cm)) << "m";
    EXPECT_TRUE(same(ev.host(), cv)) << "v";
    EXPECT_TRUE(same(evmax.host(), cvmax)) << "vmax";
  }
}

TEST(KernelBackendOptimizer, SgdNesterov) {
  const std::int64_t n = 777;
  const std::vector<float> p = uniform(n, 261), g = uniform(n, 262), buffer = uniform(n, 263);
  for (int variant = 0; variant < 4; ++variant) {
    SgdUpdate args;
    args.learning_rate = 0.1F;
    args.weight_decay = 1e-4F;
    args.momentum = variant == 3 ? 0.0F : 0.9F;
    args.nesterov = variant != 2;
    args.first = variant == 1;
    const bool with_buffer = variant != 3;
    SCOPED_TRACE(::testing::Message() << "variant " << variant);
    std::vector<float> cp = p, cb = buffer;
    cpu().sgd_update(n, cp.data(), g.data(), with_buffer ? cb.data() : nullptr, args, {});
    const Dev<float> ep(p), eg(g), eb(buffer);
    emu().sgd_update(n, ep.get(), eg.get(), with_buffer ? eb.get() : nullptr, args, {});
    EXPECT_TRUE(same(ep.host(), cp)) << "p";
    EXPECT_TRUE(same(eb.host(), cb)) << "buffer";
  }
}

// The slice's f64 sum of squares in another order: the f32 moment (and what
// follows) can differ in its last bit (kernels/novograd.hpp).
TEST(KernelBackendOptimizer, Novograd) {
  const std::vector<FlatSlice> slices{{0, 100}, {100, 1}, {101, 300}, {401, 0}};
  const std::int64_t n = 401;
  const std::vector<float> p = uniform(n, 271), g = uniform(n, 272), m = uniform(n, 273);
  const std::vector<float> ema{0.0F, 0.5F, 2.0F, 0.0F};
  NovogradUpdate args;
  args.learning_rate = 0.01F;
  args.weight_decay = 0.001F;
  args.avg = 0.05F;
  std::vector<float> cp = p, cm = m, cema = ema;
  cpu().novograd_update(cp.data(), g.data(), cm.data(), cema.data(), slices.data(), 4, args);
  const Dev<float> ep(p), eg(g), em(m), eema(ema);
  emu().novograd_update(ep.get(), eg.get(), em.get(), eema.get(), slices.data(), 4, args);
  EXPECT_TRUE(close(eema.host(), cema, 0.0F, 3e-7F)) << "ema";
  EXPECT_TRUE(close(em.host(), cm, 1e-7F, 1e-6F)) << "m";
  EXPECT_TRUE(close(ep.host(), cp, 1e-7F, 1e-6F)) << "p";
}

// The norms in another order: the f32 ratio can differ in its last bit.
TEST(KernelBackendOptimizer, Larc) {
  const std::vector<FlatSlice> slices{{0, 5000}, {5000, 7}, {5007, 0}, {5007, 300}};
  const std::int64_t n = 5307;
  const std::vector<float> values = uniform(n, 281), grads = uniform(n, 282, -0.01F, 0.01F);
  for (const bool clip : {true, false}) {
    SCOPED_TRACE(::testing::Message() << "clip " << clip);
    LarcOptions options;
    options.eta = 0.002;
    options.clip = clip;
    options.learning_rate = 0.1;
    std::vector<float> cg = grads;
    cpu().larc(values.data(), cg.data(), slices.data(), 4, options);
    const Dev<float> ev(values), eg(grads);
    emu().larc(ev.get(), eg.get(), slices.data(), 4, options);
    EXPECT_TRUE(close(eg.host(), cg, 0.0F, 3e-7F));
  }
}

// ---- Batch norm and pooling (being wired: skipped while "no kernel yet") ----------------------

TEST(KernelBackendBatchNorm, StatsPrepareApplyBackward) {
  const backend::BatchNormShape s{3, 4, 5};
  const std::size_t size = 60;
  const std::vector<float> x = uniform(size, 291, -2.0F, 3.0F), dy = uniform(size, 292),
                           gamma = uniform(4, 293), beta = uniform(4, 294);
  const Dev<float> ex(x), edy(dy), egamma(gamma), ebeta(beta);
  std::vector<float> mean = poisoned<float>(4), var = poisoned<float>(4);
  cpu().batch_norm_stats(s, x.data(), mean.data(), var.data());
  const Dev<float> emean(4), evar(4);
  emu().batch_norm_stats(s, ex.get(), emean.get(), evar.get());
  EXPECT_TRUE(close(emean.host(), mean, 1e-6F, 1e-5F)) << "mean";
  EXPECT_TRUE(close(evar.host(), var, 1e-6F, 1e-5F)) << "var";

  for (const bool training : {true, false}) {
    SCOPED_TRACE(::testing::Message() << "training " << training);
    const std::vector<float> running_mean = uniform(4, 295),
                             running_var = uniform(4, 296, 0.5F, 2.0F);
    std::vector<float> cmean = mean, crm = running_mean, crv = running_var,
                       invstd = poisoned<float>(4), scale = poisoned<float>(4),
                       shift = poisoned<float>(4);
    backend::BatchNormPrepare cargs;
    cargs.c = 4;
    cargs.training = training;
    cargs.unbias = 15.0F / 14.0F;
    cargs.mean = cmean.data();
    cargs.var = training ? var.data() : nullptr;
    cargs.running_mean = crm.data();
    cargs.running_var = crv.data();
    cargs.gamma = gamma.data();
    cargs.beta = beta.data();
    cargs.invstd = invstd.data();
    cargs.scale = scale.data();
    cargs.shift = shift.data();
    cpu().batch_norm_prepare(cargs);
    const Dev<float> pmean(mean), pvar(var), erm(running_mean), erv(running_var), einvstd(4),
        escale(4), eshift(4);
    backend::BatchNormPrepare eargs = cargs;
    eargs.mean = pmean.get();
    eargs.var = training ? pvar.get() : nullptr;
    eargs.running_mean = erm.get();
    eargs.running_var = erv.get();
    eargs.gamma = egamma.get();
    eargs.beta = ebeta.get();
    eargs.invstd = einvstd.get();
    eargs.scale = escale.get();
    eargs.shift = eshift.get();
    emu().batch_norm_prepare(eargs);
    EXPECT_TRUE(close(pmean.host(), cmean, 1e-7F, 1e-6F)) << "mean";
    EXPECT_TRUE(close(erm.host(), crm, 1e-7F, 1e-6F)) << "running_mean";
    EXPECT_TRUE(close(erv.host(), crv, 1e-7F, 1e-6F)) << "running_var";
    EXPECT_TRUE(close(einvstd.host(), invstd, 1e-7F, 1e-6F)) << "invstd";
    EXPECT_TRUE(close(escale.host(), scale, 1e-7F, 1e-6F)) << "scale";
    EXPECT_TRUE(close(eshift.host(), shift, 1e-7F, 1e-6F)) << "shift";

    std::vector<float> y = poisoned<float>(size);
    cpu().batch_norm_apply(s, x.data(), scale.data(), shift.data(), y.data());
    const Dev<float> cscale(scale), cshift(shift), ey(size);

    emu().batch_norm_apply(s, ex.get(), cscale.get(), cshift.get(), ey.get());
    EXPECT_TRUE(close(ey.host(), y, 1e-6F, 1e-6F)) << "apply";

    std::vector<float> dx = poisoned<float>(size), dgamma = poisoned<float>(4),
                       dbeta = poisoned<float>(4);
    cpu().batch_norm_backward(s, x.data(), dy.data(), cmean.data(), invstd.data(), gamma.data(),
                              training, dx.data(), dgamma.data(), dbeta.data());
    const Dev<float> cm2(cmean), cinv(invstd), edx(size), edgamma(4), edbeta(4);
    emu().batch_norm_backward(s, ex.get(), edy.get(), cm2.get(), cinv.get(), egamma.get(), training,
                              edx.get(), edgamma.get(), edbeta.get());
    EXPECT_TRUE(close(edx.host(), dx, 1e-5F, 1e-5F)) << "dx";
    EXPECT_TRUE(close(edgamma.host(), dgamma, 1e-5F, 1e-5F)) << "dgamma";
    EXPECT_TRUE(close(edbeta.host(), dbeta, 1e-5F, 1e-5F)) << "dbeta";
  }
}

// Max pooling (forward with its index, backward) and average pooling
// (forward, backward) of `in` inputs into `out` outputs on the emulator
// against the CPU, x with a tie at x[tie] = x[tie_with] and a NaN at x[nan].
void check_max_and_avg_pool(const backend::Pool2dShape& s, std::size_t in, std::size_t out,
                            std::size_t tie, std::size_t tie_with, std::size_t nan,
                            std::uint32_t seed) {
  std::vector<float> x = uniform(in, seed);
  x[tie] = x[tie_with];
  x[nan] = kNaN;
  const std::vector<float> dy = uniform(out, seed + 1);
  const Dev<float> ex(x), edy(dy);

  std::vector<float> y = poisoned<float>(out);
  std::vector<std::int32_t> index = poisoned<std::int32_t>(out);
  cpu().max_pool2d_forward(s, x.data(), y.data(), index.data());
  const Dev<float> ey(out);
  const Dev<std::int32_t> eindex(out);
  emu().max_pool2d_forward(s, ex.get(), ey.get(), eindex.get());
  EXPECT_TRUE(same(ey.host(), y)) << "max forward";
  EXPECT_TRUE(same(eindex.host(), index)) << "max index";
  std::vector<float> dx = poisoned<float>(in);
  cpu().max_pool2d_backward(s, index.data(), dy.data(), dx.data());
  const Dev<float> edx(in);
  emu().max_pool2d_backward(s, eindex.get(), edy.get(), edx.get());
  EXPECT_TRUE(same(edx.host(), dx)) << "max backward";

  std::vector<float> ay = poisoned<float>(out);
  const std::vector<float> xf = uniform(in, seed + 2);
  const Dev<float> exf(xf);
  cpu().avg_pool2d_forward(s, xf.data(), ay.data());
  const Dev<float> eay(out);
  emu().avg_pool2d_forward(s, exf.get(), eay.get());
  EXPECT_TRUE(same(eay.host(), ay)) << "avg forward";
  std::vector<float> adx = poisoned<float>(in);
  cpu().avg_pool2d_backward(s, dy.data(), adx.data());
  const Dev<float> eadx(in);
  emu().avg_pool2d_backward(s, edy.get(), eadx.get());
  // The kernel fuses its multiply-add (fmaf); the CPU's loop contracts it only
  // where GCC does (its AVX2/AVX-512 clones at -O2+, not a Debug build).
  EXPECT_TRUE(close(eadx.host(), adx, 1e-7F, 1e-6F)) << "avg backward";
}

backend::Pool2dShape pool_shape(std::int64_t planes, bool channels_last, std::int64_t channels) {
  backend::Pool2dShape s;
  s.planes = planes;
  s.channels_last = channels_last;
  s.channels = channels;
  s.h = 5;
  s.w = 6;
  s.kernel_h = s.kernel_w = 3;
  s.stride_h = s.stride_w = 2;
  s.pad_h = s.pad_w = 1;
  s.out_h = 3;
  s.out_w = 3;
  return s;
}

// Every pooling kernel gives the CPU's bits in the emulator (kernels/pool.hpp).
TEST(KernelBackendPool, MaxAndAvg) {
  check_max_and_avg_pool(pool_shape(3, false, 1), 90, 27, 7, 8, 40, 301);
}

TEST(KernelBackendPool, GlobalAverage) {
  const std::int64_t planes = 6, size = 300;  // more than a block of threads per plane
  const std::vector<float> x = uniform(planes * size, 311), dy = uniform(planes, 312);
  std::vector<float> y = poisoned<float>(planes), dx = poisoned<float>(planes * size);
  cpu().global_avg_pool_forward(planes, size, 1, x.data(), y.data());
  cpu().global_avg_pool_backward(planes, size, 1, dy.data(), dx.data());
  const Dev<float> ex(x), edy(dy), ey(planes), edx(planes * size);
  emu().global_avg_pool_forward(planes, size, 1, ex.get(), ey.get());
  emu().global_avg_pool_backward(planes, size, 1, edy.get(), edx.get());
  EXPECT_TRUE(same(ey.host(), y)) << "forward";
  EXPECT_TRUE(same(edx.host(), dx)) << "backward";
}

// Channels last: every pooling kernel gives the CPU's bits (the CPU's own
// NHWC path: NCHW's order per plane), 37 channels (more than a warp).
TEST(KernelBackendPool, ChannelsLast) {
  check_max_and_avg_pool(pool_shape(2 * 37, true, 37), 2 * 30 * 37, 2 * 9 * 37, 7, 7 + 37, 400,
                         321);
  const std::int64_t planes = 2 * 37, size = 30;
  const std::size_t in = 2 * 30 * 37;
  const std::vector<float> xf = uniform(in, 323);
  const Dev<float> exf(xf);
  std::vector<float> gy = poisoned<float>(planes), gdx = poisoned<float>(in);
  const std::vector<float> gdy = uniform(planes, 324);
  cpu().global_avg_pool_forward(planes, size, 37, xf.data(), gy.data());
  cpu().global_avg_pool_backward(planes, size, 37, gdy.data(), gdx.data());
  const Dev<float> egdy(gdy), egy(planes), egdx(in);
  emu().global_avg_pool_forward(planes, size, 37, exf.get(), egy.get());
  emu().global_avg_pool_backward(planes, size, 37, egdy.get(), egdx.get());
  EXPECT_TRUE(same(egy.host(), gy)) << "global forward";
  EXPECT_TRUE(same(egdx.host(), gdx)) << "global backward";
}

// Forward with bias: KernelDevice::conv2d_forward takes none (KernelBackend
// adds it); the emulated device once passed s.bias = true on to the CPU's
// oneDNN primitive with a null bias pointer (a crash in libdnnl).
TEST(KernelBackendConvZ, ForwardWithBias) {
  check_conv_forward(true);
}

// cudnn_benchmark reaches the device: a GPU times cuDNN's engines from then on
// (for the rest of this process: keep this test last) and its convolutions
// still match the f32 path; the emulator has no engines to time.
TEST(KernelBackendChecks, Tf32ProductsAndConvolutionsAreCloseToF32) {
  // With set_tf32 the back end plans f32 products and convolutions with TF32
  // allowed: on a GPU of compute capability 8.0 or later they run on TF32
  // tensor cores (operands rounded to 10 mantissa bits: relative errors about
  // 1e-3 on these sums of 64 and 72 terms), the emulator computes f32 (and
  // says TF32 changes nothing); either way within TF32's error of the CPU's
  // f32. Set back to off for the other tests.
#ifdef RIG_KERNEL_BACKEND_ON_GPU
  const Device device = Device::cuda(rig_gpu_test::kDevice);
#else
  const Device device = Device::cuda(0);
#endif
  struct Tf32Off {
    Device device;
    ~Tf32Off() { emu().set_tf32(device, false); }
  } off{device};
  const bool has_tf32 = emu().set_tf32(device, true);
#ifndef RIG_KERNEL_BACKEND_ON_GPU
  EXPECT_FALSE(has_tf32) << "the emulator computes f32";
#endif
  EXPECT_FALSE(cpu().set_tf32(Device::cpu(), true));
  const float tol = has_tf32 ? 1e-2F : 1e-4F;
  // A product: [48, 40] = [48, 64] x [64, 40].
  const std::int64_t m = 48, n = 40, k = 64;
  const std::vector<float> a = uniform(static_cast<std::size_t>(m * k), 471),
                           b = uniform(static_cast<std::size_t>(k * n), 472);
  std::vector<float> want(static_cast<std::size_t>(m * n));
  const Dev<float> da(a), db(b), dc(want.size());
  cpu().gemm({m, n, k, 1.0F, {a.data(), k}, {b.data(), n}, 0.0F, want.data(), n},
             MatmulPrecision::f32);
  emu().gemm({m, n, k, 1.0F, {da.get(), k}, {db.get(), n}, 0.0F, dc.get(), n},
             MatmulPrecision::f32);
  EXPECT_TRUE(close(dc.host(), want, tol, tol)) << "product";
  // A convolution, forward and both gradients.
  const backend::Conv2dShape s = padded_3x3_conv();
  const auto nx = static_cast<std::size_t>(s.x_elements());
  const auto nw = static_cast<std::size_t>(s.w_elements());
  const auto ny = static_cast<std::size_t>(s.y_elements());
  const std::vector<float> x = uniform(nx, 473), w = uniform(nw, 474), g = uniform(ny, 475);
  std::vector<float> y_want(ny), dx_want(nx), dw_want(nw);
  cpu().conv2d_forward(s, x.data(), w.data(), nullptr, y_want.data());
  cpu().conv2d_backward(s, x.data(), w.data(), g.data(), dx_want.data(), dw_want.data(), nullptr);
  const Dev<float> dx_(x), dw_(w), dg(g), y(ny), dx(nx), dw(nw);
  emu().conv2d_forward(s, dx_.get(), dw_.get(), nullptr, y.get());
  emu().conv2d_backward(s, dx_.get(), dw_.get(), dg.get(), dx.get(), dw.get(), nullptr);
  EXPECT_TRUE(close(y.host(), y_want, tol, tol)) << "convolution";
  EXPECT_TRUE(close(dx.host(), dx_want, tol, tol)) << "convolution dx";
  EXPECT_TRUE(close(dw.host(), dw_want, 4 * tol, tol)) << "convolution dW (sums of 200 terms)";
}

TEST(KernelBackendConv, AutotuningIsTheDevicesToSay) {
#ifdef RIG_KERNEL_BACKEND_ON_GPU
  ASSERT_TRUE(emu().set_convolution_autotuning(Device::cuda(rig_gpu_test::kDevice), true));
  backend::Conv2dShape s = padded_3x3_conv();
  s.n = 3;  // a shape no earlier test planned: its plan is a tuned one
  s.channels_last = true;
  const auto nx = static_cast<std::size_t>(s.x_elements());
  const auto nw = static_cast<std::size_t>(s.w_elements());
  const auto ny = static_cast<std::size_t>(s.y_elements());
  const DType type = DType::bf16;
  const std::vector<std::uint16_t> xb = bits_of(uniform(nx, 461), type);
  const std::vector<std::uint16_t> wb = bits_of(uniform(nw, 462), type);
  const Dev<std::uint16_t> x16(xb), w16(wb), y16(ny);
  const Dev<float> x32(values_of(xb, type)), w32(values_of(wb, type)), y32(ny);
  emu().conv2d_forward(s, x32.get(), w32.get(), nullptr, y32.get());
  emu().conv2d_forward_16(s, type, x16.get(), w16.get(), y16.get());
  const std::vector<float> want = values_of(bits_of(y32.host(), type), type);
  EXPECT_TRUE(close(values_of(y16.host(), type), want, 1e-2F, 1e-2F));
#else
  EXPECT_FALSE(emu().set_convolution_autotuning(Device::cuda(0), true));
  EXPECT_FALSE(cpu().set_convolution_autotuning(Device::cpu(), true));
#endif
}

}  // namespace
}  // namespace rig
