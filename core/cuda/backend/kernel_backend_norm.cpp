// KernelBackend: softmax and layer norm (batch norm: kernel_backend_batch_norm.cpp).
#include "cuda/backend/kernel_backend.hpp"

namespace rig::cuda {

namespace {

// Whether operand `o` of a row plan is contiguous [outer, inner].
bool contiguous_rows(const backend::StridedPlan<2>& plan, int o) {
  const auto& s = plan.strides[static_cast<std::size_t>(o)];
  std::int64_t expect = 1;
  for (int d = plan.ndim - 1; d >= 0; --d) {
    const auto u = static_cast<std::size_t>(d);
    if (plan.shape[u] != 1 && s[u] != expect) return false;
    expect *= plan.shape[u];
  }
  return true;
}

}  // namespace

void KernelBackend::softmax_forward(const backend::StridedPlan<2>& plan, const float* x,
                                    const std::uint8_t* mask, float* y, bool log) {
  const std::int64_t rows = plan.outer(), cols = plan.inner();
  if (rows * cols == 0) return;
  // The kernel reads x and the mask as contiguous rows: gather strided or
  // broadcast operands first.
  const Shape shape(plan.shape.begin(), plan.shape.begin() + plan.ndim);
  const Strides dense = contiguous_strides(shape);
  auto operand_strides = [&](int o) {
    return Strides(plan.strides[static_cast<std::size_t>(o)].begin(),
                   plan.strides[static_cast<std::size_t>(o)].begin() + plan.ndim);
  };
  DeviceScratch x_copy, mask_copy;
  if (!contiguous_rows(plan, 0)) {
    x_copy = scratch(static_cast<std::size_t>(rows * cols) * sizeof(float));
    copy_strided(shape, x_copy.as<float>(), dense, DType::f32, x, operand_strides(0), DType::f32);
    x = x_copy.as<float>();
  }
  if (mask != nullptr && !contiguous_rows(plan, 1)) {
    mask_copy = scratch(static_cast<std::size_t>(rows * cols));
    copy_strided(shape, mask_copy.as<std::uint8_t>(), dense, DType::u8, mask, operand_strides(1),
                 DType::u8);
    mask = mask_copy.as<std::uint8_t>();
  }
  // y must not alias x when a mask is set.
  DeviceScratch x_alias;
  if (mask != nullptr && x == y) {
    x_alias = scratch(static_cast<std::size_t>(rows * cols) * sizeof(float));
    device_->copy(x_alias.as<float>(), x, static_cast<std::size_t>(rows * cols) * sizeof(float));
    x = x_alias.as<float>();
  }
  run(kernels::SoftmaxForward{x, mask, y, rows, cols, log});
}

void KernelBackend::softmax_backward(const float* y, const float* g, float* dx, std::int64_t rows,
                                     std::int64_t n, bool log) {
  run(kernels::SoftmaxBackward{y, g, dx, rows, n, log});
}

void KernelBackend::layer_norm_forward(const float* x, const float* gamma, const float* beta,
                                       float* y, float* mean, float* rstd, std::int64_t rows,
                                       std::int64_t d, float eps) {
  run(kernels::LayerNormForward{x, gamma, beta, y, mean, rstd, rows, d, eps});
}

// Floats of the caller's scratch: the parameter gradients' partial rows.
std::int64_t KernelBackend::layer_norm_scratch_size(std::int64_t rows, std::int64_t d) {
  return kernels::layer_norm_params_scratch(rows, d);
}

void KernelBackend::layer_norm_backward(const float* x, const float* gamma, const float* mean,
                                        const float* rstd, const float* g, float* dx, float* dgamma,
                                        float* dbeta, std::int64_t rows, std::int64_t d,
                                        float* scratch) {
  // The parameter gradients first: dx may overwrite g.
  kernels::run_layer_norm_params(
      [this](const auto& k) { run(k); },
      kernels::LayerNormBackwardParams{
          .x = x, .mean = mean, .rstd = rstd, .g = g, .rows = rows, .d = d},
      dgamma, dbeta, scratch);
  if (dx != nullptr) run(kernels::LayerNormBackwardDx{x, gamma, mean, rstd, g, dx, rows, d});
}

// The kernels' float* x, y, g and dx hold 16-bit values here (their `type`),
// and gamma, beta, dgamma and dbeta those of param_type.
void KernelBackend::layer_norm_forward_16(DType type, const void* x, DType param_type,
                                          const void* gamma, const void* beta, void* y, float* mean,
                                          float* rstd, std::int64_t rows, std::int64_t d,
                                          float eps) {
  kernels::LayerNormForward k{static_cast<const float*>(x),
                              static_cast<const float*>(gamma),
                              static_cast<const float*>(beta),
                              static_cast<float*>(y),
                              mean,
                              rstd,
                              rows,
                              d,
                              eps};
  k.type = element_type(type, "layer_norm_forward_16");
  k.param_type = f32_or(param_type, type, "layer_norm_forward_16", "gamma / beta");
  run(k);
}

void KernelBackend::layer_norm_backward_16(DType type, const void* x, DType param_type,
                                           const void* gamma, const float* mean, const float* rstd,
                                           const void* g, void* dx, void* dgamma, void* dbeta,
                                           std::int64_t rows, std::int64_t d, float* scratch,
                                           const backend::NormGradAccumulation& accumulate) {
  const kernels::ElementType t = element_type(type, "layer_norm_backward_16");
  const kernels::ElementType pt =
      f32_or(param_type, type, "layer_norm_backward_16", "gamma / beta");
  const auto* xf = static_cast<const float*>(x);
  const auto* gf = static_cast<const float*>(g);
  // The parameter gradients first: dx may overwrite g.
  kernels::run_layer_norm_params(
      [this](const auto& k) { run(k); },
      kernels::LayerNormBackwardParams{
          .x = xf, .mean = mean, .rstd = rstd, .g = gf, .rows = rows, .d = d, .type = t},
      dgamma, dbeta, scratch, pt, {accumulate.dgamma, accumulate.dbeta});
  if (dx != nullptr) {
    kernels::LayerNormBackwardDx k{xf, static_cast<const float*>(gamma), mean, rstd,
                                   gf, static_cast<float*>(dx),          rows, d};
    k.type = t;
    k.param_type = pt;
    k.accumulate = accumulate.dx;
    run(k);
  }
}

}  // namespace rig::cuda
