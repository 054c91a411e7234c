// batch_norm: checks, running-statistics update, autograd, dispatch (cpu/batch_norm.hpp).
#include <cmath>
#include <stdexcept>
#include <string>

#include <fmt/format.h>

#include "ops/op_util.hpp"
#include "rig/autograd.hpp"
#include "rig/ops.hpp"

namespace rig::ops {

namespace {

constexpr const char* kOp = "batch_norm";

void require_channel_vector(const Tensor& x, const Tensor& t, const char* role, bool f32_only) {
  if (!t.defined()) return;
  if (f32_only) {
    detail::require_dtype(kOp, t, role, {DType::f32});
  } else {
    detail::require_floating(kOp, t, role);
  }
  if (t.dim() != 1 || t.size(0) != x.size(1)) {
    throw std::invalid_argument(fmt::format("batch_norm: x {}: {} {} must be [{}]",
                                            to_string(x.shape()), role, to_string(t.shape()),
                                            x.size(1)));
  }
}

// The running statistics are updated in place, so they must be plain f32 vectors.
void require_updatable(const Tensor& t, const char* role) {
  if (t.defined() && !t.is_contiguous()) {
    throw std::invalid_argument(
        fmt::format("batch_norm: {} {} must be contiguous (it is updated in place)", role,
                    to_string(t.shape())));
  }
}

// The dtype gamma and beta are read (and their gradients written) in: a
// 16-bit model's own parameters as they are, where the back end reads 16-bit
// x (no f32 copies of them each step, nor casts of their gradients back);
// else f32.
DType param_dtype(const backend::Backend& be, DType x_type, const Tensor& gamma,
                  const Tensor& beta) {
  if (x_type == DType::f32 || !be.reads_16bit_storage()) return DType::f32;
  const Tensor& any = gamma.defined() ? gamma : beta;
  if (!any.defined() || any.dtype() == DType::f32) return DType::f32;
  if (gamma.defined() && beta.defined() && gamma.dtype() != beta.dtype()) return DType::f32;
  return any.dtype();
}

Tensor as_param(const Tensor& t, DType dtype) {
  return t.defined() ? t.detach().to(dtype).contiguous() : Tensor();
}

// batch_norm, and with `relu` (only where the back end fuses it) relu of it
// in the same passes; with `residual` too (x's shape and dtype) relu of it
// plus the residual.
Tensor batch_norm_impl(const Tensor& x, const Tensor& gamma, const Tensor& beta,
                       const Tensor& running_mean, const Tensor& running_var, bool training,
                       float momentum, float eps, bool relu, const Tensor& residual = {}) {
  detail::require_floating(kOp, x, "x");
  detail::require_same_device(kOp, {&x, &gamma, &beta, &running_mean, &running_var});
  if (x.dim() != 2 && x.dim() != 4) {
    throw std::invalid_argument(
        fmt::format("batch_norm: x {} must be [N, C, H, W] or [N, C]", to_string(x.shape())));
  }
  require_channel_vector(x, gamma, "gamma", false);
  require_channel_vector(x, beta, "beta", false);
  require_channel_vector(x, running_mean, "running_mean", true);
  require_channel_vector(x, running_var, "running_var", true);
  require_updatable(running_mean, "running_mean");
  require_updatable(running_var, "running_var");
  if (!training && (!running_mean.defined() || !running_var.defined())) {
    throw std::invalid_argument(fmt::format(
        "batch_norm: x {}: eval mode needs running_mean and running_var", to_string(x.shape())));
  }
  if (!(eps >= 0.0F) || !(momentum >= 0.0F && momentum <= 1.0F)) {
    throw std::invalid_argument(
        fmt::format("batch_norm: x {}: eps {} must be >= 0 and momentum {} in [0, 1]",
                    to_string(x.shape()), eps, momentum));
  }
  backend::BatchNormShape s;
  s.n = x.size(0);
  s.c = x.size(1);
  s.inner = x.dim() == 4 ? x.size(2) * x.size(3) : 1;
  const std::int64_t count = s.n * s.inner;
  if (training && count < 2) {
    throw std::invalid_argument(fmt::format(
        "batch_norm: x {}: training needs more than one value per channel", to_string(x.shape())));
  }
  backend::Backend& be = detail::backend_of(x);
  if (x.dtype() != DType::f32 && !be.reads_16bit_storage()) {
    // f16 / bf16 storage: compute in f32, round the result to x's dtype.
    return batch_norm(detail::as_f32(x), gamma, beta, running_mean, running_var, training, momentum,
                      eps)
        .to(x.dtype());
  }

  // f32, or (on a back end that reads it) x's 16-bit storage as it is: y,
  // dx in that dtype, the f32 path's bits.
  const DType type = x.dtype();
  const Tensor xc = x.detach().contiguous();
  const DType param_type = param_dtype(be, type, gamma, beta);
  const Tensor g = as_param(gamma, param_type);
  const Tensor b = as_param(beta, param_type);
  Tensor mean = detail::empty_on(xc, {s.c});
  Tensor invstd = detail::empty_on(xc, {s.c});
  Tensor var = training ? detail::empty_on(xc, {s.c}) : Tensor();
  // Handles share the buffers: the running statistics update in place, outside autograd.
  Tensor running_mean_handle = running_mean;
  Tensor running_var_handle = running_var;
  // y = x * scale + shift with scale = gamma invstd, shift = beta - mean scale.
  Tensor scale = detail::empty_on(xc, {s.c});
  Tensor shift = detail::empty_on(xc, {s.c});
  backend::BatchNormPrepare prepare;
  prepare.c = s.c;
  prepare.training = training;
  prepare.momentum = momentum;
  prepare.eps = eps;
  prepare.unbias = static_cast<float>(count) / static_cast<float>(count - 1);
  prepare.mean = mean.data<float>();
  prepare.running_mean = running_mean.defined() ? running_mean_handle.data<float>() : nullptr;
  prepare.running_var = running_var.defined() ? running_var_handle.data<float>() : nullptr;
  prepare.gamma = g.defined() ? g.raw_data() : nullptr;
  prepare.beta = b.defined() ? b.raw_data() : nullptr;
  prepare.param_type = param_type;
  prepare.invstd = invstd.data<float>();
  prepare.scale = scale.data<float>();
  prepare.shift = shift.data<float>();
  if (training) {  // the batch's statistics, then the coefficients from them
    be.batch_norm_stats_prepare(s, type, xc.raw_data(), var.data<float>(), prepare);
  } else {
    be.batch_norm_prepare(prepare);
  }
  Tensor out = detail::empty_on(xc, x.shape(), type);
  const bool add_residual = residual.defined();
  // With the residual, the relu's mask as bits where the back end stores
  // them (its backward reads them instead of the output).
  Tensor relu_bits;
  if (add_residual) {
    const Tensor rc = residual.detach().contiguous();
    relu_bits = detail::empty_on(xc, {(xc.numel() + 7) / 8}, DType::u8);
    if (!be.batch_norm_apply_add_relu(s, type, xc.raw_data(), scale.data<float>(),
                                      shift.data<float>(), rc.raw_data(), out.raw_data(),
                                      relu_bits.data<std::uint8_t>())) {
      relu_bits = Tensor();
    }
  } else if (relu) {
    be.batch_norm_apply_relu(s, type, xc.raw_data(), scale.data<float>(), shift.data<float>(),
                             out.raw_data());
  } else if (type == DType::f32) {
    be.batch_norm_apply(s, xc.data<float>(), scale.data<float>(), shift.data<float>(),
                        out.data<float>());
  } else {
    be.batch_norm_apply_16(s, type, xc.raw_data(), scale.data<float>(), shift.data<float>(),
                           out.raw_data());
  }
  // With a relu, its output decides where dy passes (relu's backward): with
  // a residual added, read from the mask's bits or the output; without,
  // recomputed from x and the scale and shift that made it (no read of the
  // output).
  const Tensor relu_y = add_residual && !relu_bits.defined() ? out.detach() : Tensor();
  const Tensor relu_scale = relu && !add_residual ? scale : Tensor();
  const Tensor relu_shift = relu && !add_residual ? shift : Tensor();
  return autograd::record(
      std::move(out),
      add_residual ? "batch_norm_add_relu"
      : relu       ? "batch_norm_relu"
                   : kOp,
      {x, gamma, beta, residual},
      [s, xc, relu_y, relu_bits, relu_scale, relu_shift, add_residual, g, mean, invstd, training,
       type, param_type, need_x = x.requires_grad(),
       need_g = gamma.defined() && gamma.requires_grad(),
       need_b = beta.defined() && beta.requires_grad(),
       gamma_dtype = gamma.defined() ? gamma.dtype() : DType::f32,
       beta_dtype = beta.defined() ? beta.dtype() : DType::f32](const Tensor& grad) {
        // grad comes in the output's dtype (autograd converts it).
        const Tensor gc = grad.contiguous();
        // With the residual: relu's backward of grad is the residual's
        // gradient (add_relu's bits), written by batch norm's backward in
        // its first pass over grad.
        Tensor dz = add_residual ? detail::empty_on(gc, gc.shape(), type) : Tensor();
        Tensor dx = need_x ? detail::empty_on(gc, xc.shape(), type) : Tensor();
        // The CUDA back end's kernels (a back end that reads 16-bit storage)
        // add dgamma and dbeta into the gradients gamma and beta already
        // have (their .grad in the flat gradient buffer), in any dtype: no
        // add of their own per parameter.
        backend::Backend& be = detail::backend_of(gc);
        const auto target = [&](bool needed, DType dtype, std::size_t input) {
          return needed && be.reads_16bit_storage() && dtype == param_type
                     ? autograd::accumulation_target(input)
                     : Tensor();
        };
        const Tensor dg_into = target(need_g, gamma_dtype, 1),
                     db_into = target(need_b, beta_dtype, 2);
        const backend::NormGradAccumulation accumulate{false, dg_into.defined(), db_into.defined()};
        Tensor dg = detail::gradient_buffer(need_g, dg_into, gc, {s.c}, param_type);
        Tensor db = detail::gradient_buffer(need_b, db_into, gc, {s.c}, param_type);
        const void* gamma_data = g.defined() ? g.raw_data() : nullptr;
        void* dg_data = need_g ? dg.raw_data() : nullptr;
        void* db_data = need_b ? db.raw_data() : nullptr;
        if (relu_y.defined() || relu_bits.defined() || relu_scale.defined()) {
          backend::BatchNormReluMask mask;
          if (relu_y.defined()) {
            mask.y = relu_y.raw_data();
          } else if (relu_bits.defined()) {
            mask.bits = relu_bits.data<std::uint8_t>();
          } else {
            mask.scale = relu_scale.data<float>();
            mask.shift = relu_shift.data<float>();
          }
          be.batch_norm_backward_relu(
              s, type, xc.raw_data(), mask, gc.raw_data(), mean.data<float>(), invstd.data<float>(),
              param_type, gamma_data, training, need_x ? dx.raw_data() : nullptr, dg_data, db_data,
              add_residual ? dz.raw_data() : nullptr, accumulate);
        } else if (!be.reads_16bit_storage()) {  // f32 on the CPU and sim
          be.batch_norm_backward(s, xc.data<float>(), gc.data<float>(), mean.data<float>(),
                                 invstd.data<float>(), static_cast<const float*>(gamma_data),
                                 training, need_x ? dx.data<float>() : nullptr,
                                 static_cast<float*>(dg_data), static_cast<float*>(db_data));
        } else {  // the CUDA back end: f32 or 16-bit x, adding where asked
          be.batch_norm_backward_16(s, type, xc.raw_data(), gc.raw_data(), mean.data<float>(),
                                    invstd.data<float>(), param_type, gamma_data, training,
                                    need_x ? dx.raw_data() : nullptr, dg_data, db_data, accumulate);
        }
        // Gradients in the parameters' own dtypes.
        if (need_g && gamma_dtype != DType::f32) dg = dg.to(gamma_dtype);
        if (need_b && beta_dtype != DType::f32) db = db.to(beta_dtype);
        return autograd::TensorList{dx, dg, db, dz};
      });
}

}  // namespace

Tensor batch_norm(const Tensor& x, const Tensor& gamma, const Tensor& beta,
                  const Tensor& running_mean, const Tensor& running_var, bool training,
                  float momentum, float eps) {
  return batch_norm_impl(x, gamma, beta, running_mean, running_var, training, momentum, eps, false);
}

Tensor batch_norm_relu(const Tensor& x, const Tensor& gamma, const Tensor& beta,
                       const Tensor& running_mean, const Tensor& running_var, bool training,
                       float momentum, float eps) {
  detail::require_floating(kOp, x, "x");
  const backend::Backend& be = detail::backend_of(x);
  if (be.fuses_relu() && (x.dtype() == DType::f32 || be.reads_16bit_storage())) {
    return batch_norm_impl(x, gamma, beta, running_mean, running_var, training, momentum, eps,
                           true);
  }
  return relu(batch_norm(x, gamma, beta, running_mean, running_var, training, momentum, eps));
}

Tensor batch_norm_add_relu(const Tensor& x, const Tensor& residual, const Tensor& gamma,
                           const Tensor& beta, const Tensor& running_mean,
                           const Tensor& running_var, bool training, float momentum, float eps) {
  detail::require_floating(kOp, x, "x");
  detail::require_floating("batch_norm_add_relu", residual, "residual");
  detail::require_same_device("batch_norm_add_relu", {&x, &residual});
  const backend::Backend& be = detail::backend_of(x);
  if (be.fuses_relu() && (x.dtype() == DType::f32 || be.reads_16bit_storage()) &&
      residual.dtype() == x.dtype() && residual.shape() == x.shape()) {
    return batch_norm_impl(x, gamma, beta, running_mean, running_var, training, momentum, eps, true,
                           residual);
  }
  return add_relu(batch_norm(x, gamma, beta, running_mean, running_var, training, momentum, eps),
                  residual);
}

}  // namespace rig::ops
