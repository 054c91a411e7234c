// batch_norm: checks, running-statistics update, autograd, dispatch (cpu/batch_norm.hpp).
#include <algorithm>
#include <cmath>
#include <initializer_list>
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

// The checks every batch norm's x, parameters and settings pass; its shape
// as the back end takes it.
backend::BatchNormShape checked_shape(const Tensor& x, const BatchNormParams& p, bool training) {
  detail::require_floating(kOp, x, "x");
  detail::require_same_device(kOp, {&x, &p.gamma, &p.beta, &p.running_mean, &p.running_var});
  if (x.dim() != 2 && x.dim() != 4) {
    throw std::invalid_argument(
        fmt::format("batch_norm: x {} must be [N, C, H, W] or [N, C]", to_string(x.shape())));
  }
  require_channel_vector(x, p.gamma, "gamma", false);
  require_channel_vector(x, p.beta, "beta", false);
  require_channel_vector(x, p.running_mean, "running_mean", true);
  require_channel_vector(x, p.running_var, "running_var", true);
  require_updatable(p.running_mean, "running_mean");
  require_updatable(p.running_var, "running_var");
  if (!training && (!p.running_mean.defined() || !p.running_var.defined())) {
    throw std::invalid_argument(fmt::format(
        "batch_norm: x {}: eval mode needs running_mean and running_var", to_string(x.shape())));
  }
  if (!(p.eps >= 0.0F) || !(p.momentum >= 0.0F && p.momentum <= 1.0F)) {
    throw std::invalid_argument(
        fmt::format("batch_norm: x {}: eps {} must be >= 0 and momentum {} in [0, 1]",
                    to_string(x.shape()), p.eps, p.momentum));
  }
  backend::BatchNormShape s;
  s.n = x.size(0);
  s.c = x.size(1);
  s.inner = x.dim() == 4 ? x.size(2) * x.size(3) : 1;
  if (training && s.n * s.inner < 2) {
    throw std::invalid_argument(fmt::format(
        "batch_norm: x {}: training needs more than one value per channel", to_string(x.shape())));
  }
  return s;
}

// One batch norm up to its coefficients, on f32 x or (on a back end that
// reads it) x's 16-bit storage as it is: x contiguous, gamma and beta as
// read, the batch's statistics (running statistics updated in place) or the
// running ones, and y = x scale + shift's scale and shift.
struct Normalised {
  backend::BatchNormShape s;
  DType type = DType::f32, param_type = DType::f32;
  bool training = true;
  Tensor xc, g, b, mean, invstd, scale, shift;
  // What its backward gives: which gradients, in the parameters' own dtypes.
  bool need_x = false, need_g = false, need_b = false;
  DType gamma_dtype = DType::f32, beta_dtype = DType::f32;
};

Normalised normalise(const Tensor& x, const BatchNormParams& p, bool training,
                     const backend::BatchNormShape& s, backend::Backend& be) {
  Normalised n;
  n.s = s;
  n.training = training;
  n.type = x.dtype();
  n.xc = x.detach().contiguous();
  n.param_type = param_dtype(be, n.type, p.gamma, p.beta);
  n.g = as_param(p.gamma, n.param_type);
  n.b = as_param(p.beta, n.param_type);
  n.need_x = x.requires_grad();
  n.need_g = p.gamma.defined() && p.gamma.requires_grad();
  n.need_b = p.beta.defined() && p.beta.requires_grad();
  n.gamma_dtype = p.gamma.defined() ? p.gamma.dtype() : DType::f32;
  n.beta_dtype = p.beta.defined() ? p.beta.dtype() : DType::f32;
  n.mean = detail::empty_on(n.xc, {s.c});
  n.invstd = detail::empty_on(n.xc, {s.c});
  Tensor var = training ? detail::empty_on(n.xc, {s.c}) : Tensor();
  // Handles share the buffers: the running statistics update in place, outside autograd.
  Tensor running_mean_handle = p.running_mean;
  Tensor running_var_handle = p.running_var;
  // y = x * scale + shift with scale = gamma invstd, shift = beta - mean scale.
  n.scale = detail::empty_on(n.xc, {s.c});
  n.shift = detail::empty_on(n.xc, {s.c});
  backend::BatchNormPrepare prepare;
  prepare.c = s.c;
  prepare.training = training;
  prepare.momentum = p.momentum;
  prepare.eps = p.eps;
  const std::int64_t count = s.n * s.inner;
  prepare.unbias = static_cast<float>(count) / static_cast<float>(count - 1);
  prepare.mean = n.mean.data<float>();
  prepare.running_mean = p.running_mean.defined() ? running_mean_handle.data<float>() : nullptr;
  prepare.running_var = p.running_var.defined() ? running_var_handle.data<float>() : nullptr;
  prepare.gamma = n.g.defined() ? n.g.raw_data() : nullptr;
  prepare.beta = n.b.defined() ? n.b.raw_data() : nullptr;
  prepare.param_type = n.param_type;
  prepare.invstd = n.invstd.data<float>();
  prepare.scale = n.scale.data<float>();
  prepare.shift = n.shift.data<float>();
  if (training) {  // the batch's statistics, then the coefficients from them
    be.batch_norm_stats_prepare(s, n.type, n.xc.raw_data(), var.data<float>(), prepare);
  } else {
    be.batch_norm_prepare(prepare);
  }
  return n;
}

// How a relu after the batch norm finds its mask in the backward: from the
// mask's bits, the output, or recomputed from x with scale and shift; none
// defined: no relu.
struct SavedReluMask {
  Tensor bits, y, scale, shift;
  bool defined() const { return bits.defined() || y.defined() || scale.defined(); }
  backend::BatchNormReluMask view() const {
    backend::BatchNormReluMask mask;
    if (y.defined()) {
      mask.y = y.raw_data();
    } else if (bits.defined()) {
      mask.bits = bits.data<std::uint8_t>();
    } else {
      mask.scale = scale.data<float>();
      mask.shift = shift.data<float>();
    }
    return mask;
  }
};

// One batch norm's dx, dgamma and dbeta from the upstream gradient gc (in
// its output's dtype), with relu's backward first where `relu` is defined
// (also written to masked_dy, where not null: of x's dtype and shape). The
// node's inputs gamma_input and gamma_input + 1 are its gamma and beta.
autograd::TensorList batch_norm_grads(const Normalised& n, const Tensor& gc,
                                      const SavedReluMask& relu, Tensor masked_dy,
                                      std::size_t gamma_input) {
  // The CUDA back end's kernels (a back end that reads 16-bit storage) add
  // dgamma and dbeta into the gradients gamma and beta already have (their
  // .grad in the flat gradient buffer), in any dtype: no add of their own
  // per parameter.
  backend::Backend& be = detail::backend_of(gc);
  const auto target = [&](bool needed, DType dtype, std::size_t input) {
    return needed && be.reads_16bit_storage() && dtype == n.param_type
               ? autograd::accumulation_target(input)
               : Tensor();
  };
  const Tensor dg_into = target(n.need_g, n.gamma_dtype, gamma_input),
               db_into = target(n.need_b, n.beta_dtype, gamma_input + 1);
  const backend::NormGradAccumulation accumulate{false, dg_into.defined(), db_into.defined()};
  Tensor dx = n.need_x ? detail::empty_on(gc, n.xc.shape(), n.type) : Tensor();
  Tensor dg = detail::gradient_buffer(n.need_g, dg_into, gc, {n.s.c}, n.param_type);
  Tensor db = detail::gradient_buffer(n.need_b, db_into, gc, {n.s.c}, n.param_type);
  const void* gamma_data = n.g.defined() ? n.g.raw_data() : nullptr;
  void* dx_data = n.need_x ? dx.raw_data() : nullptr;
  void* dg_data = n.need_g ? dg.raw_data() : nullptr;
  void* db_data = n.need_b ? db.raw_data() : nullptr;
  const float* mean = n.mean.data<float>();
  const float* invstd = n.invstd.data<float>();
  if (relu.defined()) {
    be.batch_norm_backward_relu(n.s, n.type, n.xc.raw_data(), relu.view(), gc.raw_data(), mean,
                                invstd, n.param_type, gamma_data, n.training, dx_data, dg_data,
                                db_data, masked_dy.defined() ? masked_dy.raw_data() : nullptr,
                                accumulate);
  } else if (!be.reads_16bit_storage()) {  // f32 on the CPU and sim
    be.batch_norm_backward(n.s, n.xc.data<float>(), gc.data<float>(), mean, invstd,
                           static_cast<const float*>(gamma_data), n.training,
                           static_cast<float*>(dx_data), static_cast<float*>(dg_data),
                           static_cast<float*>(db_data));
  } else {  // the CUDA back end: f32 or 16-bit x, adding where asked
    be.batch_norm_backward_16(n.s, n.type, n.xc.raw_data(), gc.raw_data(), mean, invstd,
                              n.param_type, gamma_data, n.training, dx_data, dg_data, db_data,
                              accumulate);
  }
  // Gradients in the parameters' own dtypes.
  if (n.need_g && n.gamma_dtype != DType::f32) dg = dg.to(n.gamma_dtype);
  if (n.need_b && n.beta_dtype != DType::f32) db = db.to(n.beta_dtype);
  return {dx, dg, db};
}

// relu(apply(x) + residual) on the back end, the relu's mask kept as bits
// where it stores them, else as the output: what the backward reads (none
// kept without a backward: `inputs` none needing a gradient, or no grad
// mode). With `other` the residual is that batch norm's x, normalised in the
// same pass.
Tensor apply_add_relu(backend::Backend& be, const Normalised& n, const Tensor& residual,
                      const Normalised* other, std::initializer_list<const Tensor*> inputs,
                      SavedReluMask& mask) {
  Tensor out = detail::empty_on(n.xc, n.xc.shape(), n.type);
  const Tensor rc = other != nullptr ? other->xc : residual.detach().contiguous();
  const bool backward =
      grad_mode_enabled() && std::any_of(inputs.begin(), inputs.end(), [](const Tensor* t) {
        return t->defined() && t->requires_grad();
      });
  Tensor bits = backward ? detail::empty_on(n.xc, {(n.xc.numel() + 7) / 8}, DType::u8) : Tensor();
  const bool wrote = be.batch_norm_apply_add_relu(
      n.s, n.type, n.xc.raw_data(), n.scale.data<float>(), n.shift.data<float>(), rc.raw_data(),
      other != nullptr ? other->scale.data<float>() : nullptr,
      other != nullptr ? other->shift.data<float>() : nullptr, out.raw_data(),
      backward ? bits.data<std::uint8_t>() : nullptr);
  if (wrote) {
    mask.bits = bits;
  } else if (backward) {
    mask.y = out.detach();
  }
  return out;
}

// batch_norm of f16 / bf16 x on a back end that computes f32 only (the CPU,
// sim): the f32 batch norm of a copy of x, its output rounded to x's dtype,
// the numbers of batch_norm(x.to(f32)).to(x's dtype). The backward keeps x's
// 16-bit storage rather than the f32 copy and makes the copy again (x's
// values are exact in f32), so a 16-bit model's saved activations take half
// the bytes.
Tensor batch_norm_on_f32_copy(const Tensor& x, const BatchNormParams& p, bool training,
                              const backend::BatchNormShape& s, backend::Backend& be) {
  const DType type = x.dtype();
  Normalised n = normalise(x.detach().to(DType::f32), p, training, s, be);
  n.need_x = x.requires_grad();
  Tensor out = detail::empty_on(n.xc, n.xc.shape(), DType::f32);
  be.batch_norm_apply(s, n.xc.data<float>(), n.scale.data<float>(), n.shift.data<float>(),
                      out.data<float>());
  out = out.to(type);
  n.xc = x.detach().contiguous();
  return autograd::record(std::move(out), kOp, {x, p.gamma, p.beta}, [n, type](const Tensor& grad) {
    Normalised on_f32 = n;
    on_f32.xc = n.xc.to(DType::f32);
    autograd::TensorList grads =
        batch_norm_grads(on_f32, grad.to(DType::f32).contiguous(), SavedReluMask{}, Tensor(), 1);
    if (grads[0].defined()) grads[0] = grads[0].to(type);
    return grads;
  });
}

// batch_norm, and with `relu` (only where the back end fuses it) relu of it
// in the same passes; with `residual` too (x's shape and dtype) relu of it
// plus the residual.
Tensor batch_norm_impl(const Tensor& x, const BatchNormParams& p, bool training, bool relu,
                       const Tensor& residual = {}) {
  const backend::BatchNormShape s = checked_shape(x, p, training);
  backend::Backend& be = detail::backend_of(x);
  if (x.dtype() != DType::f32 && !be.reads_16bit_storage()) {
    return batch_norm_on_f32_copy(x, p, training, s, be);
  }
  // f32, or (on a back end that reads it) x's 16-bit storage as it is: y,
  // dx in that dtype, the f32 path's bits.
  const Normalised n = normalise(x, p, training, s, be);
  const bool add_residual = residual.defined();
  // With a relu, its output decides where dy passes (relu's backward): with
  // a residual added, read from the mask's bits or the output; without,
  // recomputed from x and the scale and shift that made it (no read of the
  // output).
  SavedReluMask mask;
  Tensor out;
  if (add_residual) {
    out = apply_add_relu(be, n, residual, nullptr, {&x, &p.gamma, &p.beta, &residual}, mask);
  } else {
    out = detail::empty_on(n.xc, x.shape(), n.type);
    if (relu) {
      be.batch_norm_apply_relu(s, n.type, n.xc.raw_data(), n.scale.data<float>(),
                               n.shift.data<float>(), out.raw_data());
      mask.scale = n.scale;
      mask.shift = n.shift;
    } else if (n.type == DType::f32) {
      be.batch_norm_apply(s, n.xc.data<float>(), n.scale.data<float>(), n.shift.data<float>(),
                          out.data<float>());
    } else {
      be.batch_norm_apply_16(s, n.type, n.xc.raw_data(), n.scale.data<float>(),
                             n.shift.data<float>(), out.raw_data());
    }
  }
  return autograd::record(
      std::move(out),
      add_residual ? "batch_norm_add_relu"
      : relu       ? "batch_norm_relu"
                   : kOp,
      {x, p.gamma, p.beta, residual}, [n, mask, add_residual](const Tensor& grad) {
        // grad comes in the output's dtype (autograd converts it).
        const Tensor gc = grad.contiguous();
        // With the residual: relu's backward of grad is the residual's
        // gradient (add_relu's bits), written by batch norm's backward in
        // its first pass over grad.
        const Tensor dz = add_residual ? detail::empty_on(gc, gc.shape(), n.type) : Tensor();
        autograd::TensorList grads = batch_norm_grads(n, gc, mask, dz, 1);
        grads.push_back(dz);
        return grads;
      });
}

}  // namespace

Tensor batch_norm(const Tensor& x, const Tensor& gamma, const Tensor& beta,
                  const Tensor& running_mean, const Tensor& running_var, bool training,
                  float momentum, float eps) {
  return batch_norm_impl(x, {gamma, beta, running_mean, running_var, momentum, eps}, training,
                         false);
}

Tensor batch_norm_relu(const Tensor& x, const Tensor& gamma, const Tensor& beta,
                       const Tensor& running_mean, const Tensor& running_var, bool training,
                       float momentum, float eps) {
  detail::require_floating(kOp, x, "x");
  const backend::Backend& be = detail::backend_of(x);
  if (be.fuses_relu() && (x.dtype() == DType::f32 || be.reads_16bit_storage())) {
    return batch_norm_impl(x, {gamma, beta, running_mean, running_var, momentum, eps}, training,
                           true);
  }
  return relu(batch_norm(x, gamma, beta, running_mean, running_var, training, momentum, eps));
}

namespace {

// Whether the back end runs relu(batch_norm(x) + residual) as one op on
// x, residual, (residual's dtype and shape, x's).
bool fused_add_relu(const Tensor& x, const Tensor& residual) {
  const backend::Backend& be = detail::backend_of(x);
  return be.fuses_relu() && (x.dtype() == DType::f32 || be.reads_16bit_storage()) &&
         residual.dtype() == x.dtype() && residual.shape() == x.shape();
}

}  // namespace

Tensor batch_norm_add_relu(const Tensor& x, const Tensor& residual, const Tensor& gamma,
                           const Tensor& beta, const Tensor& running_mean,
                           const Tensor& running_var, bool training, float momentum, float eps) {
  detail::require_floating(kOp, x, "x");
  detail::require_floating("batch_norm_add_relu", residual, "residual");
  detail::require_same_device("batch_norm_add_relu", {&x, &residual});
  if (fused_add_relu(x, residual)) {
    return batch_norm_impl(x, {gamma, beta, running_mean, running_var, momentum, eps}, training,
                           true, residual);
  }
  return add_relu(batch_norm(x, gamma, beta, running_mean, running_var, training, momentum, eps),
                  residual);
}

Tensor batch_norm_add_batch_norm_relu(const Tensor& x, const BatchNormParams& bn, const Tensor& x2,
                                      const BatchNormParams& bn2, bool training) {
  constexpr const char* kFused = "batch_norm_add_batch_norm_relu";
  detail::require_floating(kOp, x, "x");
  detail::require_floating(kFused, x2, "x2");
  detail::require_same_device(kFused, {&x, &x2});
  if (!fused_add_relu(x, x2)) {
    const Tensor shortcut = batch_norm(x2, bn2.gamma, bn2.beta, bn2.running_mean, bn2.running_var,
                                       training, bn2.momentum, bn2.eps);
    return batch_norm_add_relu(x, shortcut, bn.gamma, bn.beta, bn.running_mean, bn.running_var,
                               training, bn.momentum, bn.eps);
  }
  // Both batch norms' statistics (x2's first, as the composition runs
  // them), then one pass: relu(apply(x) + apply(x2)), neither written.
  const backend::BatchNormShape s2 = checked_shape(x2, bn2, training);
  const backend::BatchNormShape s = checked_shape(x, bn, training);
  backend::Backend& be = detail::backend_of(x);
  const Normalised n2 = normalise(x2, bn2, training, s2, be);
  const Normalised n = normalise(x, bn, training, s, be);
  SavedReluMask mask;
  Tensor out = apply_add_relu(be, n, Tensor(), &n2,
                              {&x, &bn.gamma, &bn.beta, &x2, &bn2.gamma, &bn2.beta}, mask);
  // Both backwards read dy through the same relu mask: the shortcut's
  // upstream gradient is relu's backward of dy, which is never stored.
  return autograd::record(std::move(out), kFused, {x, bn.gamma, bn.beta, x2, bn2.gamma, bn2.beta},
                          [n, n2, mask](const Tensor& grad) {
                            const Tensor gc = grad.contiguous();
                            autograd::TensorList grads = batch_norm_grads(n, gc, mask, {}, 1);
                            for (Tensor& g : batch_norm_grads(n2, gc, mask, {}, 4)) {
                              grads.push_back(std::move(g));
                            }
                            return grads;
                          });
}

}  // namespace rig::ops
