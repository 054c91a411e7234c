// layer_norm over the last axis: a fused forward that keeps each row's mean
// and 1/std for a fused backward (dx, dgamma, dbeta in one kernel). gamma and
// beta may be undefined (no scale / no shift). f16/bf16 inputs are computed in
// f32 and the result cast back to x's dtype, or (Backend::reads_16bit_storage)
// read and written in their dtype by the kernels, which also add dx, dgamma
// and dbeta into a gradient those already have (autograd::accumulation_target:
// the residual stream's, the parameters' .grad) rounding once; such a back
// end's f32 backward goes through them too.
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
  auto f32 = [](const Tensor& t) { return t.defined() ? detail::as_f32(t) : t; };
  // A 16-bit x on a back end that reads it: x, y and their gradients stay
  // 16-bit (the same bits as the f32 path's rounded result); gamma and beta
  // in f32 or, both, in x's type (a 16-bit model's own: read as they are,
  // their gradients rounded once, no f32 copies either way).
  if (low(x) && detail::backend_of(x).reads_16bit_storage()) {
    const auto ok = [&](const Tensor& p) {
      return !p.defined() || p.dtype() == DType::f32 || p.dtype() == x.dtype();
    };
    const bool same = !gamma.defined() || !beta.defined() || gamma.dtype() == beta.dtype();
    if (!ok(gamma) || !ok(beta) || !same) return layer_norm(x, f32(gamma), f32(beta), eps);
  } else if (low(x) || low(gamma) || low(beta)) {
    return layer_norm(f32(x), f32(gamma), f32(beta), eps).to(x.dtype());
  }
  const DType type = x.dtype();
  const DType param_type = gamma.defined()  ? gamma.dtype()
                           : beta.defined() ? beta.dtype()
                                            : DType::f32;

  const Tensor xc = x.detach().contiguous();
  const Tensor g = gamma.defined() ? gamma.detach().contiguous() : Tensor();
  const Tensor b = beta.defined() ? beta.detach().contiguous() : Tensor();
  const std::int64_t rows = shape_numel(Shape(x.shape().begin(), x.shape().end() - 1));
  Tensor y = detail::empty_on(xc, xc.shape(), type);
  Tensor mean = detail::empty_on(xc, {rows});
  Tensor rstd = detail::empty_on(xc, {rows});
  if (d > 0 && rows > 0) {
    const void* gd = g.defined() ? g.raw_data() : nullptr;  // of param_type
    const void* bd = b.defined() ? b.raw_data() : nullptr;
    backend::Backend& be = detail::backend_of(xc);
    if (type == DType::f32) {
      be.layer_norm_forward(xc.data<float>(), static_cast<const float*>(gd),
                            static_cast<const float*>(bd), y.data<float>(), mean.data<float>(),
                            rstd.data<float>(), rows, d, eps);
    } else {
      be.layer_norm_forward_16(type, xc.raw_data(), param_type, gd, bd, y.raw_data(),
                               mean.data<float>(), rstd.data<float>(), rows, d, eps);
    }
  }
  const bool need_x = x.requires_grad();
  const bool need_g = gamma.defined() && gamma.requires_grad();
  const bool need_b = beta.defined() && beta.requires_grad();
  if (!grad_mode_enabled() || !(need_x || need_g || need_b)) return y;
  return autograd::record(
      std::move(y), "layer_norm", {x, gamma, beta},
      [xc, g, mean, rstd, rows, d, type, param_type, need_x, need_g, need_b](const Tensor& grad) {
        // grad comes in y's dtype (autograd converts it to the output's).
        const Tensor gc = grad.contiguous();
        backend::Backend& be = detail::backend_of(gc);
        // The 16-bit kernels add into the gradients already there; a back end
        // that reads 16-bit storage takes f32 through them too (one f32 add:
        // the bits of the add it saves), as batch norm does.
        const bool adds = type != DType::f32 || be.reads_16bit_storage();
        const auto target = [&](bool needed, std::size_t input) {
          return needed && adds ? autograd::accumulation_target(input) : Tensor();
        };
        const Tensor dx_into = target(need_x, 0), dgamma_into = target(need_g, 1),
                     dbeta_into = target(need_b, 2);
        const backend::NormGradAccumulation accumulate{dx_into.defined(), dgamma_into.defined(),
                                                       dbeta_into.defined()};
        Tensor dx = detail::gradient_buffer(need_x, dx_into, gc, xc.shape(), type);
        Tensor dgamma = detail::gradient_buffer(need_g, dgamma_into, gc, {d}, param_type);
        Tensor dbeta = detail::gradient_buffer(need_b, dbeta_into, gc, {d}, param_type);
        if (d > 0 && rows > 0) {
          Tensor scratch = detail::empty_on(gc, {be.layer_norm_scratch_size(rows, d)});
          const void* gd = g.defined() ? g.raw_data() : nullptr;  // of param_type
          void* dgd = need_g ? dgamma.raw_data() : nullptr;
          void* dbd = need_b ? dbeta.raw_data() : nullptr;
          if (!adds) {
            be.layer_norm_backward(xc.data<float>(), static_cast<const float*>(gd),
                                   mean.data<float>(), rstd.data<float>(), gc.data<float>(),
                                   need_x ? dx.data<float>() : nullptr, static_cast<float*>(dgd),
                                   static_cast<float*>(dbd), rows, d, scratch.data<float>());
          } else {
            be.layer_norm_backward_16(type, xc.raw_data(), param_type, gd, mean.data<float>(),
                                      rstd.data<float>(), gc.raw_data(),
                                      need_x ? dx.raw_data() : nullptr, dgd, dbd, rows, d,
                                      scratch.data<float>(), accumulate);
          }
        } else {  // nothing to add; an empty x's dx is empty too
          if (need_g && !accumulate.dgamma) dgamma.zero_();
          if (need_b && !accumulate.dbeta) dbeta.zero_();
        }
        return autograd::TensorList{dx, dgamma, dbeta};
      });
}

}  // namespace rig::ops
