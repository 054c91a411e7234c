// KernelBackend: batch norm's statistics, per-channel coefficients, apply
// and backward, reduced per channel in a fixed order. The 16-bit entry
// points run the same kernels on f16 / bf16 x, y, dy and dx (their `type`);
// the relu entry points fold a following relu into apply and backward, and
// apply_add_relu the add of a residual before it (whose gradient, relu's
// backward of dy, backward_relu writes in its first pass: masked_dy).
#include <stdexcept>

#include "cuda/backend/kernel_backend.hpp"

namespace rig::cuda {

namespace {

// BatchNormPrepare as the kernel's plain arguments. 16-bit gamma and beta
// travel as float* holding 16-bit values (the kernels' convention).
kernels::BatchNormPrepareChannels prepare_channels(const backend::BatchNormPrepare& a) {
  return kernels::BatchNormPrepareChannels{a.c,
                                           a.training,
                                           a.momentum,
                                           a.eps,
                                           a.unbias,
                                           a.mean,
                                           a.var,
                                           a.running_mean,
                                           a.running_var,
                                           static_cast<const float*>(a.gamma),
                                           static_cast<const float*>(a.beta),
                                           a.invstd,
                                           a.scale,
                                           a.shift,
                                           element_type(a.param_type, "batch_norm_prepare")};
}

}  // namespace

void KernelBackend::batch_norm_stats(const backend::BatchNormShape& s, const float* x, float* mean,
                                     float* var) {
  batch_norm_stats_16(s, DType::f32, x, mean, var);
}

void KernelBackend::batch_norm_stats_16(const backend::BatchNormShape& s, DType type, const void* x,
                                        float* mean, float* var) {
  batch_norm_stats_kernels(s, type, x, mean, var, nullptr);
}

void KernelBackend::batch_norm_stats_prepare(const backend::BatchNormShape& s, DType type,
                                             const void* x, float* var,
                                             const backend::BatchNormPrepare& args) {
  backend::BatchNormPrepare with_var = args;
  with_var.var = var;
  batch_norm_stats_kernels(s, type, x, args.mean, var, &with_var);
}

// The statistics' partial sums and their finish, which with `prepare` also
// runs batch_norm_prepare's per-channel work.
void KernelBackend::batch_norm_stats_kernels(const backend::BatchNormShape& s, DType type,
                                             const void* x, float* mean, float* var,
                                             const backend::BatchNormPrepare* prepare) {
  const std::int64_t chunks = kernels::batch_norm_chunks(s.n, s.inner);
  DeviceScratch buffer =
      scratch(static_cast<std::size_t>(kernels::batch_norm_stats_scratch(s.n, s.c, s.inner)) *
              sizeof(float));
  float* part = buffer.as<float>();
  kernels::BatchNormStatsPartial k{static_cast<const float*>(x), s.n, s.c, s.inner, part,
                                   part + s.c * chunks};
  k.type = element_type(type, "batch_norm_stats");
  kernels::launch_partial(k, [this](const auto& kernel) { run(kernel); });
  run(kernels::BatchNormStatsFinish{
      part, part + s.c * chunks, s.n, s.c, s.inner, mean, var, prepare != nullptr,
      prepare != nullptr ? prepare_channels(*prepare) : kernels::BatchNormPrepareChannels{}});
}

void KernelBackend::batch_norm_prepare(const backend::BatchNormPrepare& a) {
  run(prepare_channels(a));
}

void KernelBackend::batch_norm_apply(const backend::BatchNormShape& s, const float* x,
                                     const float* scale, const float* shift, float* y) {
  batch_norm_apply_16(s, DType::f32, x, scale, shift, y);
}

void KernelBackend::batch_norm_apply_16(const backend::BatchNormShape& s, DType type, const void* x,
                                        const float* scale, const float* shift, void* y) {
  batch_norm_apply_kernel(s, type, x, scale, shift, y, false, {}, nullptr);
}

void KernelBackend::batch_norm_apply_relu(const backend::BatchNormShape& s, DType type,
                                          const void* x, const float* scale, const float* shift,
                                          void* y) {
  batch_norm_apply_kernel(s, type, x, scale, shift, y, true, {}, nullptr);
}

bool KernelBackend::batch_norm_apply_add_relu(const backend::BatchNormShape& s, DType type,
                                              const void* x, const float* scale, const float* shift,
                                              const void* residual, const float* residual_scale,
                                              const float* residual_shift, void* y,
                                              std::uint8_t* relu_bits) {
  if ((residual_scale == nullptr) != (residual_shift == nullptr)) {
    throw std::invalid_argument(
        "batch_norm_apply_add_relu: a normalised residual needs its scale and shift");
  }
  return batch_norm_apply_kernel(s, type, x, scale, shift, y, true,
                                 {residual, residual_scale, residual_shift}, relu_bits);
}

bool KernelBackend::batch_norm_apply_kernel(const backend::BatchNormShape& s, DType type,
                                            const void* x, const float* scale, const float* shift,
                                            void* y, bool relu, const ApplyResidual& residual,
                                            std::uint8_t* relu_bits) {
  kernels::BatchNormApply k{
      static_cast<const float*>(x), scale, shift, static_cast<float*>(y), s.n, s.c, s.inner};
  k.type = element_type(type, "batch_norm_apply");
  k.relu = relu;
  k.residual = static_cast<const float*>(residual.data);
  k.residual_scale = residual.scale;
  k.residual_shift = residual.shift;
  // The mask's bits only where a thread writes a pack's 8 of them, a byte.
  const bool bits = relu && relu_bits != nullptr && k.packed();
  if (bits) k.relu_bits = relu_bits;
  run(k);
  return bits;
}

void KernelBackend::batch_norm_backward(const backend::BatchNormShape& s, const float* x,
                                        const float* dy, const float* mean, const float* invstd,
                                        const float* gamma, bool batch_stats, float* dx,
                                        float* dgamma, float* dbeta) {
  batch_norm_backward_16(s, DType::f32, x, dy, mean, invstd, DType::f32, gamma, batch_stats, dx,
                         dgamma, dbeta, {});
}

void KernelBackend::batch_norm_backward_16(const backend::BatchNormShape& s, DType type,
                                           const void* x, const void* dy, const float* mean,
                                           const float* invstd, DType param_type, const void* gamma,
                                           bool batch_stats, void* dx, void* dgamma, void* dbeta,
                                           const backend::NormGradAccumulation& accumulate) {
  batch_norm_backward_kernels(s, type, x, {}, dy, mean, invstd, param_type, gamma, batch_stats, dx,
                              dgamma, dbeta, nullptr, accumulate);
}

void KernelBackend::batch_norm_backward_relu(const backend::BatchNormShape& s, DType type,
                                             const void* x, const backend::BatchNormReluMask& relu,
                                             const void* dy, const float* mean, const float* invstd,
                                             DType param_type, const void* gamma, bool batch_stats,
                                             void* dx, void* dgamma, void* dbeta, void* masked_dy,
                                             const backend::NormGradAccumulation& accumulate) {
  batch_norm_backward_kernels(s, type, x, relu, dy, mean, invstd, param_type, gamma, batch_stats,
                              dx, dgamma, dbeta, masked_dy, accumulate);
}

void KernelBackend::batch_norm_backward_kernels(
    const backend::BatchNormShape& s, DType type, const void* x,
    const backend::BatchNormReluMask& relu, const void* dy, const float* mean, const float* invstd,
    DType param_type, const void* gamma, bool batch_stats, void* dx, void* dgamma, void* dbeta,
    void* masked_dy, const backend::NormGradAccumulation& accumulate) {
  const kernels::ElementType t = element_type(type, "batch_norm_backward");
  const auto* xf = static_cast<const float*>(x);
  const auto* dyf = static_cast<const float*>(dy);
  // The kernels' float* operands hold `type`'s values (16-bit ones too).
  kernels::batch_norm_detail::ReluMask mask{static_cast<const float*>(relu.y), relu.scale,
                                            relu.shift, relu.bits};
  if (mask.y == nullptr && mask.bits == nullptr &&
      (mask.scale == nullptr) != (mask.shift == nullptr)) {
    throw std::invalid_argument("batch_norm_backward_relu: the relu mask needs scale and shift");
  }
  if (masked_dy != nullptr && mask.y == nullptr && mask.bits == nullptr) {
    throw std::invalid_argument(
        "batch_norm_backward_relu: masked_dy needs the relu's output or its mask bits");
  }
  if (accumulate.dx) {
    throw std::invalid_argument("batch_norm_backward: dx cannot be added into (accumulate.dx)");
  }
  const std::int64_t chunks = kernels::batch_norm_chunks(s.n, s.inner);
  DeviceScratch buffer =
      scratch(static_cast<std::size_t>(kernels::batch_norm_backward_scratch(s.n, s.c, s.inner)) *
              sizeof(float));
  float* coef = buffer.as<float>();
  float* part = coef + 3 * s.c;
  const bool sums = dgamma != nullptr || dbeta != nullptr || (dx != nullptr && batch_stats);
  auto* mdf = static_cast<float*>(masked_dy);
  // No sums to take: relu's backward in a pass of its own from y; from the
  // mask's bits, the sums' pass (whose sums go unused) stores it.
  const bool partial = sums || (mdf != nullptr && mask.y == nullptr);
  if (mdf != nullptr && !partial) {
    unary_backward_16(backend::Unary::relu, type, dy, nullptr, relu.y, masked_dy,
                      s.n * s.c * s.inner, 0.0F);
  }
  if (partial) {
    kernels::BatchNormGradPartial k{xf, dyf, mean, s.n, s.c, s.inner, part, part + s.c * chunks};
    k.type = t;
    k.relu = mask;
    k.masked_dy = mdf;
    kernels::launch_partial(k, [this](const auto& kernel) { run(kernel); });
  }
  if (mdf != nullptr) {  // dx reads the stored gradient: one operand fewer
    dyf = mdf;
    mask = {};
  }
  run(kernels::BatchNormGradFinish{part, part + s.c * chunks, sums, s.n, s.c, s.inner, mean, invstd,
                                   static_cast<const float*>(gamma), batch_stats, dx != nullptr,
                                   static_cast<float*>(dgamma), static_cast<float*>(dbeta), coef,
                                   element_type(param_type, "batch_norm_backward"),
                                   accumulate.dgamma, accumulate.dbeta});
  if (dx != nullptr) {
    kernels::BatchNormBackwardDx k{xf, dyf, coef, static_cast<float*>(dx), s.n, s.c, s.inner};
    k.type = t;
    k.relu = mask;
    run(k);
  }
}

}  // namespace rig::cuda
