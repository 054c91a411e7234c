// dropout with a counter-based (Philox) mask, kept as bits for backward.
#include <stdexcept>

#include <fmt/format.h>

#include "ops/op_util.hpp"
#include "rig/autograd.hpp"
#include "rig/ops.hpp"

namespace rig::ops {

Tensor dropout(const Tensor& x, float p, const RandomKey& key) {
  detail::require_floating("dropout", x, "x");
  detail::require_same_device("dropout", {&x});
  if (!(p >= 0.0F && p <= 1.0F)) {
    throw std::invalid_argument(
        fmt::format("dropout: p = {} is not in [0, 1] (x {})", p, to_string(x.shape())));
  }
  if (p == 0.0F) return x;
  // p = 1 drops everything (as torch): zeros, and a zero gradient.
  const float scale = p < 1.0F ? 1.0F / (1.0F - p) : 0.0F;
  const Tensor xc = x.detach().contiguous();
  Tensor out = detail::empty_on(xc, x.shape(), x.dtype());
  const bool record = grad_mode_enabled() && x.requires_grad();
  // The mask as bits (i32 words: bit i % 32 of word i / 32 = element i kept),
  // only when a backward pass may need it.
  Tensor mask = record ? detail::empty_on(xc, {(x.numel() + 31) / 32}, DType::i32) : Tensor();
  auto* bits = record ? reinterpret_cast<std::uint32_t*>(mask.data<std::int32_t>()) : nullptr;
  detail::backend_of(xc).dropout_forward(key, p, scale, xc.dtype(), xc.raw_data(), out.raw_data(),
                                         xc.numel(), bits);
  if (!record) return out;
  return autograd::record(std::move(out), "dropout", {x},
                          [mask, scale](const Tensor& g) -> autograd::TensorList {
                            const Tensor gc = g.contiguous();
                            Tensor dx = detail::empty_on(gc, gc.shape(), gc.dtype());
                            detail::backend_of(gc).dropout_backward(
                                reinterpret_cast<const std::uint32_t*>(mask.data<std::int32_t>()),
                                scale, gc.dtype(), gc.raw_data(), dx.raw_data(), gc.numel());
                            return {dx};
                          });
}

namespace {

// Whether `rows` scales x row by row: [..., 1] against x's [..., D], of x's
// dtype, needing no gradient of its own (the fused pass gives it none).
bool scales_rows(const Tensor& x, const Tensor& rows) {
  if (x.dim() == 0 || rows.dim() != x.dim() || rows.dtype() != x.dtype() || rows.requires_grad()) {
    return false;
  }
  for (std::int64_t a = 0; a + 1 < x.dim(); ++a) {
    if (rows.size(a) != x.size(a)) return false;
  }
  return rows.size(-1) == 1;
}

}  // namespace

Tensor dropout_add(const Tensor& residual, const Tensor& x, float p, const RandomKey& key,
                   const Tensor& row_scale) {
  detail::require_floating("dropout_add", residual, "residual");
  detail::require_floating("dropout_add", x, "x");
  detail::require_same_device("dropout_add", {&residual, &x, &row_scale});
  backend::Backend& be = detail::backend_of(x);
  const bool scaled = row_scale.defined();
  const bool fused = be.fuses_dropout_add() && p > 0.0F && p < 1.0F &&
                     residual.shape() == x.shape() && residual.dtype() == x.dtype() &&
                     (x.dtype() == DType::f32 || be.reads_16bit_storage()) &&
                     (!scaled || scales_rows(x, row_scale));
  if (!fused) return add(residual, dropout(scaled ? mul(x, row_scale) : x, p, key));
  const float scale = 1.0F / (1.0F - p);
  const Tensor xc = x.detach().contiguous();
  const Tensor rc = residual.detach().contiguous();
  const Tensor sc = scaled ? row_scale.detach().contiguous() : Tensor();
  const backend::RowScale rows{scaled ? sc.raw_data() : nullptr, scaled ? x.size(-1) : 1};
  Tensor out = detail::empty_on(xc, x.shape(), x.dtype());
  const bool record = grad_mode_enabled() && (x.requires_grad() || residual.requires_grad());
  // The mask as dropout keeps it, where x's gradient needs it.
  const bool need_x = record && x.requires_grad();
  Tensor mask = need_x ? detail::empty_on(xc, {(x.numel() + 31) / 32}, DType::i32) : Tensor();
  auto* bits = need_x ? reinterpret_cast<std::uint32_t*>(mask.data<std::int32_t>()) : nullptr;
  be.dropout_add_forward(key, p, scale, xc.dtype(), xc.raw_data(), rc.raw_data(), out.raw_data(),
                         xc.numel(), bits, rows);
  if (!record) return out;
  // The residual's gradient is g itself (add's); x's, dropout's backward of
  // g (then scaled per row, as mul's backward).
  return autograd::record(std::move(out), "dropout_add", {residual, x},
                          [mask, scale, need_x, sc,
                           row_length = rows.row_length](const Tensor& g) -> autograd::TensorList {
                            if (!need_x) return {g, Tensor()};
                            const Tensor gc = g.contiguous();
                            Tensor dx = detail::empty_on(gc, gc.shape(), gc.dtype());
                            detail::backend_of(gc).dropout_add_backward(
                                reinterpret_cast<const std::uint32_t*>(mask.data<std::int32_t>()),
                                scale, gc.dtype(), gc.raw_data(), dx.raw_data(), gc.numel(),
                                {sc.defined() ? sc.raw_data() : nullptr, row_length});
                            return {g, dx};
                          });
}

}  // namespace rig::ops
