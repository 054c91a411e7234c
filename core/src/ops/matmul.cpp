// matmul: batched products with broadcast batch axes, the layout planned by
// the backend (Backend::matmul), at the thread's matmul precision (read when
// the op runs; backward uses the same). f16/bf16 operands are computed in f32
// and the result cast back.
#include <optional>
#include <stdexcept>
#include <utility>

#include <fmt/format.h>

#include "ops/op_util.hpp"
#include "rig/autograd.hpp"
#include "rig/ops.hpp"

namespace rig::ops {

namespace {

using detail::shape_str;

thread_local MatmulPrecision g_precision = MatmulPrecision::f32;

Shape batch_of(const Shape& s) {
  return Shape(s.begin(), s.end() - 2);
}

}  // namespace

MatmulPrecision matmul_precision() {
  return g_precision;
}

MatmulPrecisionScope::MatmulPrecisionScope(MatmulPrecision precision) : previous_(g_precision) {
  g_precision = precision;
}

MatmulPrecisionScope::~MatmulPrecisionScope() {
  g_precision = previous_;
}

bool fast_bf16_products(Device device) {
  return backend::backend_for(device).fast_bf16_products();
}

namespace detail {

Tensor matmul_f32(const Tensor& a, const Tensor& b, bool ta, bool tb, MatmulPrecision precision) {
  const std::int64_t m = a.size(ta ? -1 : -2);
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
  Tensor out = detail::empty_on(a, out_shape);
  if (out.numel() == 0) return out;
  detail::backend_of(a).matmul({a.data<float>(), a.shape(), a.strides(), ta},
                               {b.data<float>(), b.shape(), b.strides(), tb}, out.data<float>(),
                               out_shape, precision);
  return out;
}

}  // namespace detail

Tensor matmul(const Tensor& a, const Tensor& b, bool transpose_a, bool transpose_b) {
  detail::require_floating("matmul", a, "a");
  detail::require_floating("matmul", b, "b");
  detail::require_same_device("matmul", {&a, &b});
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
  const MatmulPrecision precision = matmul_precision();
  Tensor out = detail::matmul_f32(a, b, transpose_a, transpose_b, precision);
  if (!grad_mode_enabled() || !(a.requires_grad() || b.requires_grad())) return out;
  return autograd::record(
      std::move(out), "matmul", {a, b},
      [a = a.detach(), b = b.detach(), ta = transpose_a, tb = transpose_b, precision,
       need_a = a.requires_grad(), need_b = b.requires_grad()](const Tensor& g) {
        const auto mm = [precision](const Tensor& x, const Tensor& y, bool tx, bool ty) {
          return detail::matmul_f32(x, y, tx, ty, precision);
        };
        // C = op(A) op(B): d op(A) = dC op(B)^T and d op(B) = op(A)^T dC, then
        // summed over the batch axes each operand was broadcast along.
        Tensor da;
        Tensor db;
        if (need_a) {
          da = !ta ? mm(g, b, false, !tb) : mm(b, g, tb, true);
          da = detail::sum_to(da, a.shape());
        }
        if (need_b) {
          const bool b_batched = shape_numel(batch_of(b.shape())) > 1;
          if (!b_batched && a.dim() > 2 && !ta) {
            // Fold a's batch axes into its rows: one GEMM sums over them.
            const Tensor a2 = a.reshape({-1, a.size(-1)});
            const Tensor g2 = g.reshape({-1, g.size(-1)});
            db = !tb ? mm(a2, g2, true, false) : mm(g2, a2, true, false);
            db = db.reshape(b.shape());
          } else {
            db = !tb ? mm(a, g, !ta, false) : mm(g, a, true, ta);
            db = detail::sum_to(db, b.shape());
          }
        }
        return autograd::TensorList{da.defined() ? da.contiguous() : da,
                                    db.defined() ? db.contiguous() : db};
      });
}

}  // namespace rig::ops
