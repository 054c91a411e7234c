#include "cuda/gemm/lt_interpreter.hpp"

#include <cmath>
#include <cstdint>
#include <cstring>
#include <numbers>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#include "rig/half.hpp"

namespace rig::cuda {

double load_element(GemmType type, const void* data, std::int64_t index) {
  switch (type) {
    case GemmType::f32:
      return static_cast<const float*>(data)[index];
    case GemmType::f16:
      return half_bits_to_float(static_cast<const std::uint16_t*>(data)[index]);
    case GemmType::bf16:
      return bfloat16_bits_to_float(static_cast<const std::uint16_t*>(data)[index]);
  }
  return 0.0;
}

void store_element(GemmType type, void* data, std::int64_t index, double value) {
  const auto f = static_cast<float>(value);
  switch (type) {
    case GemmType::f32:
      static_cast<float*>(data)[index] = f;
      return;
    case GemmType::f16:
      static_cast<std::uint16_t*>(data)[index] = float_to_half_bits(f);
      return;
    case GemmType::bf16:
      static_cast<std::uint16_t*>(data)[index] = float_to_bfloat16_bits(f);
      return;
  }
}

namespace {

constexpr double kTanhScale = 0.7978845608028654;  // sqrt(2 / pi)
constexpr double kTanhCubic = 0.044715;

bool mask_bit(const void* aux, std::int64_t bit) {
  const auto* bytes = static_cast<const std::uint8_t*>(aux);
  return ((bytes[bit / 8] >> (bit % 8)) & 1U) != 0;
}

void set_mask_bit(void* aux, std::int64_t bit, bool value) {
  auto* bytes = static_cast<std::uint8_t*>(aux);
  const auto flag = static_cast<std::uint8_t>(1U << (bit % 8));
  bytes[bit / 8] =
      static_cast<std::uint8_t>(value ? bytes[bit / 8] | flag : bytes[bit / 8] & ~flag);
}

// The element (r, c) of a stored column-major matrix.
double at(const LtLayout& layout, const void* data, std::int64_t r, std::int64_t c) {
  return load_element(layout.type, data, r + c * layout.ld);
}

void require(bool ok, const char* what) {
  if (!ok) throw std::invalid_argument(std::string("interpret_lt_matmul: ") + what);
}

}  // namespace

double gelu_tanh(double x) {
  return 0.5 * x * (1.0 + std::tanh(kTanhScale * (x + kTanhCubic * x * x * x)));
}

double gelu_tanh_grad(double x) {
  const double t = std::tanh(kTanhScale * (x + kTanhCubic * x * x * x));
  return 0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * kTanhScale * (1.0 + 3.0 * kTanhCubic * x * x);
}

double gelu_erf(double x) {
  return 0.5 * x * (1.0 + std::erf(x * std::numbers::sqrt2 / 2.0));
}

double gelu_erf_grad(double x) {
  const double cdf = 0.5 * (1.0 + std::erf(x * std::numbers::sqrt2 / 2.0));
  const double pdf = std::exp(-0.5 * x * x) / std::sqrt(2.0 * std::numbers::pi);
  return cdf + x * pdf;
}

namespace {

// One product of the plan (batch index 0 when the pointers are offset).
void interpret_one(const LtPlan& p, const void* a, const void* b, const void* c, void* d,
                   void* bias, void* aux) {
  const auto e = static_cast<std::uint32_t>(p.epilogue);
  const bool adds_bias = (e & 4U) != 0;
  const bool relu = (e & 2U) != 0;
  const bool gelu = (e & 32U) != 0;
  const bool writes_aux = (relu || gelu) && (e & 128U) != 0;
  const bool drelu = (e & 8U) != 0;
  const bool dgelu = (e & 64U) != 0;
  const bool bgrad = (e & 16U) != 0;
  const bool bgrada = p.epilogue == LtEpilogue::bgrada;
  const bool bgradb = p.epilogue == LtEpilogue::bgradb;
  require(p.m == 0 || p.n == 0 || p.k == 0 || (a != nullptr && b != nullptr), "null A or B");
  require(p.m == 0 || p.n == 0 || d != nullptr, "null D");
  require(!(adds_bias || bgrad || bgrada || bgradb) || bias != nullptr, "null bias pointer");
  require(!(writes_aux || drelu || dgelu) || aux != nullptr, "null aux pointer");

  // The product first (C may be D): compute type 32F's accumulator (the
  // exact sum rounded to f32 stands for cuBLASLt's own order of additions),
  // then alpha, beta C and the epilogue in f32 (the scale type).
  std::vector<float> x(static_cast<std::size_t>(p.m * p.n));
  for (std::int64_t j = 0; j < p.n; ++j) {
    for (std::int64_t i = 0; i < p.m; ++i) {
      double sum = 0.0;
      for (std::int64_t l = 0; l < p.k; ++l) {
        const double av = p.transa ? at(p.a, a, l, i) : at(p.a, a, i, l);
        const double bv = p.transb ? at(p.b, b, j, l) : at(p.b, b, l, j);
        sum += av * bv;
      }
      float v = p.alpha * static_cast<float>(sum);
      if (p.beta != 0.0F) v += p.beta * static_cast<float>(at(p.c, c, i, j));
      x[static_cast<std::size_t>(i + j * p.m)] = v;
    }
  }

  std::vector<double> row_sums(static_cast<std::size_t>(p.m), 0.0);
  for (std::int64_t j = 0; j < p.n; ++j) {
    for (std::int64_t i = 0; i < p.m; ++i) {
      float v = x[static_cast<std::size_t>(i + j * p.m)];
      const std::int64_t aux_index = i + j * p.aux_ld;
      if (adds_bias) v += static_cast<float>(load_element(p.bias_type, bias, i));
      if (relu) {
        if (writes_aux) set_mask_bit(aux, aux_index, v > 0.0F);
        v = v > 0.0F ? v : 0.0F;
      } else if (gelu) {
        if (writes_aux) store_element(p.aux_type, aux, aux_index, v);
        v = static_cast<float>(gelu_tanh(v));
      } else if (drelu) {
        v = mask_bit(aux, aux_index) ? v : 0.0F;
      } else if (dgelu) {
        v *= static_cast<float>(gelu_tanh_grad(load_element(p.aux_type, aux, aux_index)));
      }
      row_sums[static_cast<std::size_t>(i)] += v;
      store_element(p.d.type, d, i + j * p.d.ld, v);
    }
  }
  if (bgrad) {
    for (std::int64_t i = 0; i < p.m; ++i) {
      store_element(p.bias_type, bias, i, row_sums[static_cast<std::size_t>(i)]);
    }
  }
  if (bgrada) {  // over op(A)'s k: one per row of D
    for (std::int64_t i = 0; i < p.m; ++i) {
      double sum = 0.0;
      for (std::int64_t l = 0; l < p.k; ++l) sum += p.transa ? at(p.a, a, l, i) : at(p.a, a, i, l);
      store_element(p.bias_type, bias, i, sum);
    }
  }
  if (bgradb) {  // over op(B)'s k: one per column of D
    for (std::int64_t j = 0; j < p.n; ++j) {
      double sum = 0.0;
      for (std::int64_t l = 0; l < p.k; ++l) sum += p.transb ? at(p.b, b, j, l) : at(p.b, b, l, j);
      store_element(p.bias_type, bias, j, sum);
    }
  }
}

// The matrix of batch index `batch` (Void: void or const void).
template <typename Void>
Void* offset(const LtLayout& layout, Void* data, std::int64_t batch) {
  if (data == nullptr) return nullptr;
  using Byte = std::conditional_t<std::is_const_v<Void>, const std::uint8_t, std::uint8_t>;
  return static_cast<Byte*>(data) +
         batch * layout.batch_offset * static_cast<std::int64_t>(size_of(layout.type));
}

}  // namespace

void interpret_lt_matmul(const LtPlan& p, const void* a, const void* b, const void* c, void* d,
                         void* bias, void* aux) {
  const std::int64_t count = p.d.batch_count;
  require(p.a.batch_count == count && p.b.batch_count == count && p.c.batch_count == count,
          "the batch counts of A, B, C and D differ");
  require(count >= 0, "negative batch count");
  if (count == 1) {
    // A single product: batch offsets are not read (cuBLASLt ignores them too).
    interpret_one(p, a, b, c, d, bias, aux);
    return;
  }
  // cuBLASLt would step the bias and aux pointers by CUBLASLT_MATMUL_DESC_BIAS_BATCH_STRIDE
  // and CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_BATCH_STRIDE, which plans never set.
  require(
      p.bias_role == BiasRole::none && p.aux_role == AuxRole::none && p.own_work == OwnWork::none,
      "a batch with a bias, aux or own work");
  for (std::int64_t batch = 0; batch < count; ++batch) {
    interpret_one(p, offset(p.a, a, batch), offset(p.b, b, batch), offset(p.c, c, batch),
                  offset(p.d, d, batch), nullptr, nullptr);
  }
}

void interpret_own_work(const LtPlan& p, void* d, void* bias, void* aux) {
  if (p.own_work == OwnWork::none) return;
  require(p.d.batch_count == 1, "own work on a batch");
  const bool forward = p.own_work == OwnWork::gelu_erf_forward;
  require(!(p.own_writes_aux || !forward) || aux != nullptr, "own work: null aux pointer");
  require(!p.own_bias_grad || bias != nullptr, "own work: null bias pointer");
  for (std::int64_t i = 0; i < p.m; ++i) {
    double sum = 0.0;
    for (std::int64_t j = 0; j < p.n; ++j) {
      const std::int64_t index = i + j * p.d.ld;
      const double v = load_element(p.d.type, d, index);
      double out = 0.0;
      if (forward) {
        if (p.own_writes_aux) store_element(p.aux_type, aux, i + j * p.aux_ld, v);
        out = gelu_erf(v);
      } else {
        out = v * gelu_erf_grad(load_element(p.aux_type, aux, i + j * p.aux_ld));
      }
      sum += out;
      store_element(p.d.type, d, index, out);
    }
    if (p.own_bias_grad) store_element(p.bias_type, bias, i, sum);
  }
}

}  // namespace rig::cuda
