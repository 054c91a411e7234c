// matmul: batched GEMM with broadcast batch axes. Transposes (the flags, or
// transposed views) are passed to BLAS as flags with leading dimensions, so
// only operands whose last two axes are not a plain row- or column-major
// matrix are copied. f16/bf16 operands are computed in f32 and the result
// cast back.
#include <optional>
#include <stdexcept>
#include <utility>

#include <fmt/format.h>

#include "cpu/gemm.hpp"
#include "ops/op_util.hpp"
#include "rig/autograd.hpp"
#include "rig/ops.hpp"

namespace rig::ops {

namespace {

using detail::shape_str;

// How BLAS can read op(X) from X's last two axes (rows r, cols c, strides s0,
// s1): as stored (row-major, ld s0) or as its transpose (column-major, ld s1).
struct Layout {
  bool flip = false;  // pass the opposite transpose flag
  std::int64_t ld = 1;
};

std::optional<Layout> blas_layout(std::int64_t r, std::int64_t c, std::int64_t s0,
                                  std::int64_t s1) {
  if ((c == 1 || s1 == 1) && (r == 1 || s0 >= std::max<std::int64_t>(c, 1))) {
    return Layout{false, r == 1 ? std::max<std::int64_t>(c, 1) : s0};
  }
  if ((r == 1 || s0 == 1) && (c == 1 || s1 >= std::max<std::int64_t>(r, 1))) {
    return Layout{true, c == 1 ? std::max<std::int64_t>(r, 1) : s1};
  }
  return std::nullopt;
}

Shape batch_of(const Shape& s) {
  return Shape(s.begin(), s.end() - 2);
}

// A BLAS-ready view of one operand: the tensor (a copy if its matrices were
// not BLAS-readable), its layout and its strides over the output's batch axes.
struct Operand {
  Tensor t;
  cpu::GemmOperand blas;
  Strides batch_strides;
};

Operand prepare(const Tensor& x, bool trans, const Shape& batch) {
  Operand op;
  op.t = x;
  const auto n = x.dim();
  auto layout = blas_layout(x.size(-2), x.size(-1), x.strides()[n - 2], x.strides()[n - 1]);
  if (!layout) {
    op.t = x.contiguous();
    layout = blas_layout(x.size(-2), x.size(-1), op.t.strides()[n - 2], op.t.strides()[n - 1]);
  }
  op.blas = {op.t.data<float>(), layout->ld, trans != layout->flip};
  // Batch strides aligned to the right of `batch`, 0 where broadcast.
  op.batch_strides.assign(batch.size(), 0);
  const std::size_t xb = static_cast<std::size_t>(n - 2);
  const std::size_t lead = batch.size() - xb;
  for (std::size_t d = 0; d < xb; ++d) {
    if (x.shape()[d] != 1) op.batch_strides[lead + d] = op.t.strides()[d];
  }
  return op;
}

}  // namespace

namespace detail {

Tensor matmul_f32(const Tensor& a, const Tensor& b, bool ta, bool tb) {
  const std::int64_t m = a.size(ta ? -1 : -2);
  const std::int64_t k = a.size(ta ? -2 : -1);
  const std::int64_t n = b.size(tb ? -2 : -1);
  const Shape batch_a = batch_of(a.shape());
  const Shape batch_b = batch_of(b.shape());
  Shape batch;
  try {
    batch = broadcast_shapes(batch_a, batch_b, "matmul");
  } catch (const std::invalid_argument&) {
    throw std::invalid_argument(
        fmt::format("matmul: {} x {}: batch dimensions {} and {} cannot be broadcast",
                    shape_str(a, ta), shape_str(b, tb), to_string(batch_a), to_string(batch_b)));
  }
  Shape out_shape = batch;
  out_shape.push_back(m);
  out_shape.push_back(n);
  Tensor out = Tensor::empty(out_shape);
  if (out.numel() == 0) return out;
  const std::int64_t batch_count = shape_numel(batch);
  const std::int64_t b_count = shape_numel(batch_b);

  // b without batch axes of its own and a whose batch axes fold into its rows
  // (op(a) not transposed, [..., M, K] a view of [B*M, K]): one GEMM.
  if (batch_count > 1 && b_count == 1 && !ta && (a.strides().back() == 1 || k == 1)) {
    // The rows of op(a) over all batch axes must be equally spaced (row_stride).
    const auto nd = static_cast<std::size_t>(a.dim());
    std::int64_t row_stride = m > 1 ? a.strides()[nd - 2] : 0;
    std::int64_t expect = m > 1 ? row_stride * m : 0;
    bool foldable = true;
    for (std::size_t d = nd - 2; foldable && d-- > 0;) {
      const std::int64_t size = a.shape()[d];
      if (size == 1) continue;
      if (row_stride == 0) {
        row_stride = a.strides()[d];
      } else if (a.strides()[d] != expect) {
        foldable = false;
      }
      expect = a.strides()[d] * size;
    }
    if (foldable && row_stride >= std::max<std::int64_t>(k, 1)) {
      const Operand ob = prepare(b, tb, batch);
      cpu::gemm(batch_count * m, n, k, 1.0F, {a.data<float>(), row_stride, false}, ob.blas, 0.0F,
                out.data<float>(), n);
      return out;
    }
  }

  const Operand oa = prepare(a, ta, batch);
  const Operand ob = prepare(b, tb, batch);
  if (batch_count == 1) {
    cpu::gemm(m, n, k, 1.0F, oa.blas, ob.blas, 0.0F, out.data<float>(), n);
    return out;
  }
  // Coalesce batch axes where both operands' strides allow it.
  cpu::GemmBatchOffsets offsets;
  Shape cshape;
  Strides csa, csb;
  for (std::size_t d = 0; d < batch.size(); ++d) {
    if (batch[d] == 1) continue;
    if (!cshape.empty() && csa.back() == oa.batch_strides[d] * batch[d] &&
        csb.back() == ob.batch_strides[d] * batch[d]) {
      cshape.back() *= batch[d];
      csa.back() = oa.batch_strides[d];
      csb.back() = ob.batch_strides[d];
      continue;
    }
    cshape.push_back(batch[d]);
    csa.push_back(oa.batch_strides[d]);
    csb.push_back(ob.batch_strides[d]);
  }
  if (cshape.size() > static_cast<std::size_t>(cpu::GemmBatchOffsets::kMaxDims)) {
    throw std::invalid_argument(fmt::format("matmul: {} x {}: more than {} batch axes",
                                            shape_str(a, ta), shape_str(b, tb),
                                            cpu::GemmBatchOffsets::kMaxDims));
  }
  offsets.ndim = static_cast<int>(cshape.size());
  for (std::size_t d = 0; d < cshape.size(); ++d) {
    offsets.shape[d] = cshape[d];
    offsets.a_strides[d] = csa[d];
    offsets.b_strides[d] = csb[d];
  }
  cpu::gemm_batched(batch_count, m, n, k, 1.0F, oa.blas, ob.blas, offsets, 0.0F, out.data<float>(),
                    n, m * n);
  return out;
}

}  // namespace detail

Tensor matmul(const Tensor& a, const Tensor& b, bool transpose_a, bool transpose_b) {
  detail::require_floating("matmul", a, "a");
  detail::require_floating("matmul", b, "b");
  detail::require_same_cpu("matmul", {&a, &b});
  if (a.dim() < 2 || b.dim() < 2) {
    throw std::invalid_argument(
        fmt::format("matmul: {} x {}: both operands need at least 2 dimensions",
                    shape_str(a, transpose_a), shape_str(b, transpose_b)));
  }
  const std::int64_t ka = a.size(transpose_a ? -2 : -1);
  const std::int64_t kb = b.size(transpose_b ? -1 : -2);
  if (ka != kb) {
    throw std::invalid_argument(fmt::format("matmul: {} x {}: inner dimensions {} and {} differ",
                                            shape_str(a, transpose_a), shape_str(b, transpose_b),
                                            ka, kb));
  }
  if (a.dtype() != DType::f32 || b.dtype() != DType::f32) {
    const DType result = a.dtype() == b.dtype() ? a.dtype() : DType::f32;
    return matmul(detail::as_f32(a), detail::as_f32(b), transpose_a, transpose_b).to(result);
  }
  Tensor out = detail::matmul_f32(a, b, transpose_a, transpose_b);
  if (!grad_mode_enabled() || !(a.requires_grad() || b.requires_grad())) return out;
  return autograd::record(
      std::move(out), "matmul", {a, b},
      [a = a.detach(), b = b.detach(), ta = transpose_a, tb = transpose_b,
       need_a = a.requires_grad(), need_b = b.requires_grad()](const Tensor& g) {
        // C = op(A) op(B): d op(A) = dC op(B)^T and d op(B) = op(A)^T dC, then
        // summed over the batch axes each operand was broadcast along.
        Tensor da;
        Tensor db;
        if (need_a) {
          da = !ta ? detail::matmul_f32(g, b, false, !tb) : detail::matmul_f32(b, g, tb, true);
          da = detail::sum_to(da, a.shape());
        }
        if (need_b) {
          const bool b_batched = shape_numel(batch_of(b.shape())) > 1;
          if (!b_batched && a.dim() > 2 && !ta) {
            // Fold a's batch axes into its rows: one GEMM sums over them.
            const Tensor a2 = a.reshape({-1, a.size(-1)});
            const Tensor g2 = g.reshape({-1, g.size(-1)});
            db = !tb ? detail::matmul_f32(a2, g2, true, false)
                     : detail::matmul_f32(g2, a2, true, false);
            db = db.reshape(b.shape());
          } else {
            db = !tb ? detail::matmul_f32(a, g, !ta, false) : detail::matmul_f32(g, a, true, ta);
            db = detail::sum_to(db, b.shape());
          }
        }
        return autograd::TensorList{da.defined() ? da.contiguous() : da,
                                    db.defined() ? db.contiguous() : db};
      });
}

}  // namespace rig::ops
