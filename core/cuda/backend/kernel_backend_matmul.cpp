// KernelBackend: matrix products through cuBLASLt plans (gemm/gemm_plan.hpp).
// f32 products accumulate in f32 without TF32; bf16 precision rounds the
// operands to bf16 (once, where a layer passes them rounded) and accumulates
// in f32, as the CPU back end.
#include <algorithm>
#include <cstddef>
#include <optional>
#include <stdexcept>

#include <fmt/format.h>

#include "backend/matmul_layout.hpp"
#include "cuda/backend/kernel_backend.hpp"

namespace rig::cuda {

namespace {

// The stored matrix of an operand whose op() is [rows, cols].
struct Stored {
  std::int64_t rows = 0, cols = 0;
};

Stored stored_of(const backend::GemmOperand& x, std::int64_t rows, std::int64_t cols) {
  return x.trans ? Stored{cols, rows} : Stored{rows, cols};
}

std::int64_t usable_ld(std::int64_t ld, Stored s) {
  return cuda::usable_ld(ld, s.rows, s.cols);
}

}  // namespace

std::int64_t usable_ld(std::int64_t ld, std::int64_t stored_rows, std::int64_t stored_cols) {
  return stored_rows <= 1 ? std::max<std::int64_t>(ld, std::max<std::int64_t>(stored_cols, 1)) : ld;
}

// beta C for an empty product (k = 0), C [m, n] of `type` row by row:
// zeros, C itself, or C scaled in f32 (and rounded once for 16 bits), as the
// product's epilogue would.
void KernelBackend::scale_c(std::int64_t m, std::int64_t n, void* c, std::int64_t ldc, DType type,
                            float beta) {
  if (beta == 1.0F) return;
  const std::int64_t row_bytes = ldc * static_cast<std::int64_t>(dtype_size(type));
  for (std::int64_t i = 0; i < m; ++i) {
    void* row = static_cast<std::byte*>(c) + i * row_bytes;
    if (beta == 0.0F) {
      fill_strided({n}, row, {1}, type, 0.0F);
    } else if (type == DType::f32) {
      unary(backend::Unary::mul_scalar, static_cast<float*>(row), static_cast<float*>(row), n,
            beta);
    } else {
      unary_16(backend::Unary::mul_scalar, type, row, row, n, beta);
    }
  }
}

void KernelBackend::round_bf16(const backend::GemmOperand& x, std::int64_t rows, std::int64_t cols,
                               std::uint16_t* dst) {
  const Stored s = stored_of(x, rows, cols);
  if (s.rows * s.cols == 0) return;
  copy_strided({s.rows, s.cols}, dst, {s.cols, 1}, DType::bf16, x.data, {x.ld, 1}, DType::f32);
}

namespace {

// The request of one product (f32 operands as given).
GemmRequest request_of(const backend::GemmProduct& p) {
  GemmRequest request;
  request.m = p.m;
  request.n = p.n;
  request.k = p.k;
  request.trans_a = p.a.trans;
  request.trans_b = p.b.trans;
  request.ldc = p.ldc;
  request.alpha = p.alpha;
  request.beta = p.beta;
  request.lda = usable_ld(p.a.ld, stored_of(p.a, p.m, p.k));
  request.ldb = usable_ld(p.b.ld, stored_of(p.b, p.k, p.n));
  return request;
}

// Plans `request` and runs it on rig's operands a and b, C written to c, or
// to c16 in c16_type where that is set; the epilogue p asks for: a bias (C's
// type) and relu, relu's backward through p's mask, or the bias gradient.
void run_product(KernelDevice& device, GemmRequest request, const void* a, const void* b, float* c,
                 std::uint16_t* c16, GemmType c16_type, const backend::GemmProduct& p) {
  void* d = c;
  if (c16 != nullptr) {
    request.c_type = c16_type;
    d = c16;
  }
  Epilogue& e = request.epilogue;
  if (p.bias != nullptr || p.relu) {
    e.kind = EpilogueKind::forward;
    e.activation = p.relu ? GemmActivation::relu : GemmActivation::none;
    e.bias = p.bias != nullptr;
  } else if (p.relu_mask != nullptr) {
    e.kind = EpilogueKind::backward;
    e.activation = GemmActivation::relu;
    e.aux = true;
    e.aux_ld = p.relu_mask_ld;
  } else if (p.bias_grad != nullptr) {
    e.kind = EpilogueKind::bias_grad_a;
  }
  // cuBLASLt reads the mask through a non-const pointer (never writing it).
  run_request(device, request, a, b, d, p.bias_grad != nullptr ? p.bias_grad : p.bias,
              const_cast<std::uint8_t*>(p.relu_mask));
}

}  // namespace

void run_request(KernelDevice& device, const GemmRequest& request, const void* a, const void* b,
                 void* c, const void* bias, void* aux) {
  const LtPlan plan = plan_gemm(request);
  const void* lt_a = plan.a_is == RigOperand::a ? a : b;
  const void* lt_b = plan.b_is == RigOperand::a ? a : b;
  // cuBLASLt reads a bias through a non-const pointer (never writing it); a
  // bias gradient (BiasRole::bias_grad) is written there.
  device.gemm(plan, lt_a, lt_b, c, c, const_cast<void*>(bias), aux);
}

bool KernelBackend::gemm_relu_masks(DType type) {
  if (!relu_masks_ || (type != DType::bf16 && type != DType::f16)) return false;
  std::optional<bool>& known = type == DType::bf16 ? relu_masks_bf16_ : relu_masks_f16_;
  if (known) return *known;
  // One small product with each epilogue as the ops run them (the mask's
  // with alpha, the bias gradient's beside a product added into C) on
  // zeroed scratch; a refusal (no algorithm) answers no.
  constexpr std::int64_t n = 128;
  const GemmType g = type == DType::bf16 ? GemmType::bf16 : GemmType::f16;
  const std::size_t matrix = n * n * 2, mask = n * n / 8, bytes = 3 * matrix + mask + n * 2;
  DeviceScratch buffer = scratch(bytes);
  device_->zero(buffer.as<void>(), bytes);
  std::byte* at = buffer.as<std::byte>();
  GemmRequest request;
  request.m = request.n = request.k = request.lda = request.ldb = request.ldc = n;
  request.a_type = request.b_type = request.c_type = g;
  try {
    GemmRequest masked = request;
    masked.alpha = 1.25F;
    masked.epilogue = {EpilogueKind::backward, GemmActivation::relu, false, true, n};
    run_request(*device_, masked, at, at + matrix, at + 2 * matrix, nullptr, at + 3 * matrix);
    GemmRequest bias_grad = request;
    bias_grad.trans_a = true;
    bias_grad.beta = 1.0F;
    bias_grad.epilogue.kind = EpilogueKind::bias_grad_a;
    run_request(*device_, bias_grad, at, at + matrix, at + 2 * matrix, at + 3 * matrix + mask);
    known = true;
  } catch (const std::exception&) {
    known = false;  // cuBLASLt's heuristic found no algorithm: the ops keep relu's output
  }
  return *known;
}

void KernelBackend::gemm(const backend::GemmProduct& p, MatmulPrecision precision) {
  if (p.m == 0 || p.n == 0) return;
  if ((p.bias != nullptr || p.relu) && (p.k == 0 || p.beta != 0.0F || !gemm_adds_bias(p.bias))) {
    throw std::invalid_argument(
        "KernelBackend::gemm: a bias or relu epilogue needs k > 0, beta 0 and a 16-byte aligned "
        "bias");
  }
  if (p.relu_mask != nullptr || p.bias_grad != nullptr) {
    const bool forward = p.bias != nullptr || p.relu;
    const bool both = p.relu_mask != nullptr && p.bias_grad != nullptr;
    if (forward || both || p.k == 0 || (p.c_bf16 == nullptr && p.c_f16 == nullptr) ||
        (p.relu_mask != nullptr && p.beta != 0.0F)) {
      throw std::invalid_argument(
          "KernelBackend::gemm: a relu mask or bias gradient epilogue (one of them, with "
          "gemm_relu_masks()) needs a 16-bit C, k > 0 and no bias or relu; the mask beta 0");
    }
  }
  if (p.a.f16 != nullptr || p.b.f16 != nullptr || p.c_f16 != nullptr) {
    gemm_f16(p);
    return;
  }
  if (p.c_bf16 != nullptr && (precision != MatmulPrecision::bf16 || p.c != nullptr)) {
    throw std::invalid_argument(
        "KernelBackend::gemm: a bf16 C needs bf16 precision and no f32 C beside it");
  }
  if (p.c_bf16 != nullptr && p.k == 0) {  // beta C in bf16
    scale_c(p.m, p.n, p.c_bf16, p.ldc, DType::bf16, p.beta);
    return;
  }
  if (p.k == 0) {  // beta C
    scale_c(p.m, p.n, p.c, p.ldc, DType::f32, p.beta);
    return;
  }
  GemmRequest request = request_of(p);
  request.allow_tf32 = tf32_ && precision == MatmulPrecision::f32;  // set_tf32
  const Stored sa = stored_of(p.a, p.m, p.k), sb = stored_of(p.b, p.k, p.n);
  const void* a = p.a.data;
  const void* b = p.b.data;
  DeviceScratch a_bf16, b_bf16;
  if (precision == MatmulPrecision::bf16) {
    request.a_type = request.b_type = GemmType::bf16;
    // Rounded operands are packed densely: ld = stored columns.
    if (p.a.bf16 != nullptr) {
      a = p.a.bf16;
    } else {
      a_bf16 = scratch(static_cast<std::size_t>(sa.rows * sa.cols) * 2);
      round_bf16(p.a, p.m, p.k, a_bf16.as<std::uint16_t>());
      a = a_bf16.as<void>();
    }
    if (p.b.bf16 != nullptr) {
      b = p.b.bf16;
    } else {
      b_bf16 = scratch(static_cast<std::size_t>(sb.rows * sb.cols) * 2);
      round_bf16(p.b, p.k, p.n, b_bf16.as<std::uint16_t>());
      b = b_bf16.as<void>();
    }
    request.lda = sa.cols;
    request.ldb = sb.cols;
  }
  run_product(device(), request, a, b, p.c, p.c_bf16, GemmType::bf16, p);
}

// f16 operands as they are (exact values at any precision), accumulated in
// f32, C written in f32 or f16; a bias (C's type) and relu in the epilogue
// where asked.
void KernelBackend::gemm_f16(const backend::GemmProduct& p) {
  if (p.a.f16 == nullptr || p.b.f16 == nullptr || (p.c_f16 != nullptr && p.c != nullptr)) {
    throw std::invalid_argument(
        "KernelBackend::gemm: an f16 product needs both operands in f16, and an f16 C no f32 C "
        "beside it");
  }
  if (p.k == 0) {  // beta C, in f16 or f32
    if (p.c_f16 != nullptr) {
      scale_c(p.m, p.n, p.c_f16, p.ldc, DType::f16, p.beta);
    } else {
      scale_c(p.m, p.n, p.c, p.ldc, DType::f32, p.beta);
    }
    return;
  }
  GemmRequest request = request_of(p);
  const Stored sa = stored_of(p.a, p.m, p.k), sb = stored_of(p.b, p.k, p.n);
  request.a_type = request.b_type = GemmType::f16;
  request.lda = sa.cols;  // packed densely
  request.ldb = sb.cols;
  run_product(device(), request, p.a.f16, p.b.f16, p.c, p.c_f16, GemmType::f16, p);
}

void KernelBackend::gemm_batched(const backend::GemmProduct& first, std::int64_t count,
                                 std::int64_t stride_a, std::int64_t stride_b,
                                 std::int64_t stride_c, MatmulPrecision precision) {
  if (first.a.bf16 != nullptr || first.b.bf16 != nullptr || first.c_bf16 != nullptr ||
      first.a.f16 != nullptr || first.b.f16 != nullptr || first.c_f16 != nullptr ||
      first.bias != nullptr || first.relu || first.relu_mask != nullptr ||
      first.bias_grad != nullptr) {
    throw std::invalid_argument(
        "KernelBackend::gemm_batched: 16-bit operands or C given beforehand, a bias or relu have "
        "no batch stride");
  }
  if (count <= 0 || first.m == 0 || first.n == 0) return;
  if (count == 1 || first.k == 0) {  // gemm() does beta C itself
    for (std::int64_t i = 0; i < count; ++i) {
      backend::GemmProduct p = first;
      p.a.data += i * stride_a;
      p.b.data += i * stride_b;
      p.c += i * stride_c;
      gemm(p, precision);
    }
    return;
  }
  GemmRequest request = request_of(first);
  request.allow_tf32 = tf32_ && precision == MatmulPrecision::f32;  // set_tf32
  request.batch_count = count;
  request.stride_a = stride_a;
  request.stride_b = stride_b;
  request.stride_c = stride_c;
  const void* a = first.a.data;
  const void* b = first.b.data;
  DeviceScratch a_bf16, b_bf16;
  if (precision == MatmulPrecision::bf16) {
    request.a_type = request.b_type = GemmType::bf16;
    // Each operand's matrices rounded into dense scratch, one after another
    // (one matrix where broadcast): ld = stored columns, stride = one matrix.
    const auto round = [&](const backend::GemmOperand& x, Stored st, std::int64_t stride,
                           DeviceScratch& dst, std::int64_t& ld, std::int64_t& dense_stride) {
      const std::int64_t matrices = stride == 0 ? 1 : count;
      const std::int64_t size = st.rows * st.cols;
      dst = scratch(static_cast<std::size_t>(matrices * size) * 2);
      if (size != 0) {
        copy_strided({matrices, st.rows, st.cols}, dst.as<void>(), {size, st.cols, 1}, DType::bf16,
                     x.data, {stride, x.ld, 1}, DType::f32);
      }
      ld = st.cols;
      dense_stride = stride == 0 ? 0 : size;
      return dst.as<void>();
    };
    a = round(first.a, stored_of(first.a, first.m, first.k), stride_a, a_bf16, request.lda,
              request.stride_a);
    b = round(first.b, stored_of(first.b, first.k, first.n), stride_b, b_bf16, request.ldb,
              request.stride_b);
  }
  run_request(device(), request, a, b, first.c);
}

void KernelBackend::gemm_pair(const backend::GemmProduct& first, const backend::GemmProduct& second,
                              MatmulPrecision precision) {
  gemm(first, precision);
  gemm(second, precision);
}

void KernelBackend::matmul(const backend::MatrixOperand& a, const backend::MatrixOperand& b,
                           float* out, const Shape& out_shape, MatmulPrecision precision) {
  const std::size_t rank = out_shape.size();
  const std::int64_t m = out_shape[rank - 2];
  const std::int64_t n = out_shape[rank - 1];
  const std::int64_t k = a.shape[a.shape.size() - (a.transpose ? 2 : 1)];
  if (shape_numel(out_shape) == 0) return;
  const Shape batch(out_shape.begin(), out_shape.end() - 2);
  const std::int64_t batch_count = shape_numel(batch);

  // A GEMM-readable view of one operand (a contiguous copy when its matrices
  // are not) and its strides over the output's batch axes (0 where broadcast).
  struct View {
    DeviceScratch copy;
    backend::GemmOperand gemm;
    Strides batch_strides;
  };
  auto view_of = [&](const backend::MatrixOperand& x) {
    View v;
    const std::size_t nd = x.shape.size();
    const float* data = x.data;
    Strides strides = x.strides;
    const std::int64_t r = x.shape[nd - 2], c = x.shape[nd - 1];
    auto layout = backend::matrix_layout(r, c, strides[nd - 2], strides[nd - 1]);
    if (!layout) {
      const Strides dense = contiguous_strides(x.shape);
      v.copy = scratch(static_cast<std::size_t>(shape_numel(x.shape)) * sizeof(float));
      copy_strided(x.shape, v.copy.as<float>(), dense, DType::f32, x.data, x.strides, DType::f32);
      data = v.copy.as<float>();
      strides = dense;
      layout = backend::matrix_layout(r, c, strides[nd - 2], strides[nd - 1]);
    }
    v.gemm = {data, layout->ld, x.transpose != layout->flip};
    v.batch_strides.assign(batch.size(), 0);
    const std::size_t lead = batch.size() - (nd - 2);
    for (std::size_t d = 0; d + 2 < nd; ++d) {
      if (x.shape[d] != 1) v.batch_strides[lead + d] = strides[d];
    }
    return v;
  };

  // b shared by every batch and a's batches folding into its rows: one product.
  if (batch_count > 1 && shape_numel(Shape(b.shape.begin(), b.shape.end() - 2)) == 1) {
    if (const auto row_stride = backend::folded_row_stride(a, m, k)) {
      const View vb = view_of(b);
      gemm({batch_count * m, n, k, 1.0F, {a.data, *row_stride, false}, vb.gemm, 0.0F, out, n},
           precision);
      return;
    }
  }

  const View va = view_of(a);
  const View vb = view_of(b);
  // The longest merged batch axis as one strided batched product, a loop
  // over the others: batch axes that do not merge (a [B, T, H, D] tensor's
  // heads: B x H matrices, H apart within a row of T, B apart by rows) cost
  // launches, so the loop goes over the shorter axes.
  const std::vector<backend::BatchAxis> axes =
      backend::merged_batch_axes(batch, va.batch_strides, vb.batch_strides);
  // The output's batch strides (it is contiguous), per merged axis.
  std::vector<std::int64_t> stride_out(axes.size());
  for (std::int64_t d = std::ssize(axes) - 1, step = m * n; d >= 0; --d) {
    stride_out[static_cast<std::size_t>(d)] = step;
    step *= axes[static_cast<std::size_t>(d)].size;
  }
  std::size_t inner = axes.empty() ? 0 : axes.size() - 1;
  for (std::size_t d = 0; d < axes.size(); ++d) {
    if (axes[d].size > axes[inner].size) inner = d;
  }
  const backend::BatchAxis batched = axes.empty() ? backend::BatchAxis{} : axes[inner];
  const std::int64_t batched_stride_out = axes.empty() ? m * n : stride_out[inner];
  const std::int64_t outer_count = batch_count / batched.size;
  std::vector<std::int64_t> at(axes.size(), 0);
  for (std::int64_t o = 0; o < outer_count; ++o) {
    std::int64_t off_a = 0, off_b = 0, off_out = 0;
    for (std::size_t d = 0; d < at.size(); ++d) {
      off_a += at[d] * axes[d].stride_a;
      off_b += at[d] * axes[d].stride_b;
      off_out += at[d] * stride_out[d];
    }
    backend::GemmProduct p{m, n, k, 1.0F, va.gemm, vb.gemm, 0.0F, out + off_out, n};
    p.a.data += off_a;
    p.b.data += off_b;
    gemm_batched(p, batched.size, batched.stride_a, batched.stride_b, batched_stride_out,
                 precision);
    for (std::size_t d = at.size(); d-- > 0;) {
      if (d == inner) continue;
      if (++at[d] < axes[d].size) break;
      at[d] = 0;
    }
  }
}

}  // namespace rig::cuda
