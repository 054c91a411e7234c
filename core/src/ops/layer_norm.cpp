// layer_norm over the last axis: a fused forward that keeps each row's mean
// and 1/std for a fused backward (dx, dgamma, dbeta in one kernel). gamma and
// beta may be undefined (no scale / no shift). f16/bf16 inputs are computed in
// f32 and the result cast back to x's dtype.
#include <stdexcept>

#include <fmt/format.h>

#include "ops/op_util.hpp"
#include "rig/autograd.hpp"
#include "rig/ops.hpp"

namespace rig::ops {

Tensor layer_norm(const Tensor& x, const Tensor& gamma, const Tensor& beta, float eps) {
  detail::require_floating("layer_norm", x, "x");
  if (gamma.defined()) detail::require_floating("layer_norm", gamma, "gamma");
  if (beta.defined()) detail::require_floating("layer_norm", beta, "beta");
  detail::require_same_device("layer_norm", {&x, &gamma, &beta});
  if (x.dim() < 1) {
    throw std::invalid_argument(
        fmt::format("layer_norm: x {} needs at least one axis", to_string(x.shape())));
  }
  const std::int64_t d = x.size(-1);
  for (const Tensor* p : {&gamma, &beta}) {
    if (p->defined() && p->shape() != Shape{d}) {
      throw std::invalid_argument(fmt::format("layer_norm: x {} and {} {}: expected [{}]",
                                              to_string(x.shape()), p == &gamma ? "gamma" : "beta",
                                              to_string(p->shape()), d));
    }
  }
  if (!(eps >= 0.0F)) {
    throw std::invalid_argument(fmt::format("layer_norm: eps {} must be >= 0", eps));
  }
  auto low = [](const Tensor& t) { return t.defined() && t.dtype() != DType::f32; };
  if (low(x) || low(gamma) || low(beta)) {
    auto f32 = [](const Tensor& t) { return t.defined() ? detail::as_f32(t) : t; };
    return layer_norm(f32(x), f32(gamma), f32(beta), eps).to(x.dtype());
  }

  const Tensor xc = x.detach().contiguous();
  const Tensor g = gamma.defined() ? gamma.detach().contiguous() : Tensor();
  const Tensor b = beta.defined() ? beta.detach().contiguous() : Tensor();
  const std::int64_t rows = shape_numel(Shape(x.shape().begin(), x.shape().end() - 1));
  Tensor y = detail::empty_on(xc, xc.shape());
  Tensor mean = detail::empty_on(xc, {rows});
  Tensor rstd = detail::empty_on(xc, {rows});
  if (d > 0 && rows > 0) {
    detail::backend_of(xc).layer_norm_forward(
        xc.data<float>(), g.defined() ? g.data<float>() : nullptr,
        b.defined() ? b.data<float>() : nullptr, y.data<float>(), mean.data<float>(),
        rstd.data<float>(), rows, d, eps);
  }
  const bool need_x = x.requires_grad();
  const bool need_g = gamma.defined() && gamma.requires_grad();
  const bool need_b = beta.defined() && beta.requires_grad();
  if (!grad_mode_enabled() || !(need_x || need_g || need_b)) return y;
  return autograd::record(
      std::move(y), "layer_norm", {x, gamma, beta},
      [xc, g, mean, rstd, rows, d, need_x, need_g, need_b](const Tensor& grad) {
        const Tensor gc = grad.contiguous();
        backend::Backend& be = detail::backend_of(gc);
        Tensor dx = need_x ? detail::empty_on(gc, xc.shape()) : Tensor();
        Tensor dgamma = need_g ? detail::empty_on(gc, {d}) : Tensor();
        Tensor dbeta = need_b ? detail::empty_on(gc, {d}) : Tensor();
        if (d > 0 && rows > 0) {
          Tensor scratch = detail::empty_on(gc, {be.layer_norm_scratch_size(rows, d)});
          be.layer_norm_backward(
              xc.data<float>(), g.defined() ? g.data<float>() : nullptr, mean.data<float>(),
              rstd.data<float>(), gc.data<float>(), need_x ? dx.data<float>() : nullptr,
              need_g ? dgamma.data<float>() : nullptr, need_b ? dbeta.data<float>() : nullptr, rows,
              d, scratch.data<float>());
        } else {
          if (need_g) dgamma.zero_();
          if (need_b) dbeta.zero_();
        }
        return autograd::TensorList{dx, dgamma, dbeta};
      });
}

}  // namespace rig::ops
