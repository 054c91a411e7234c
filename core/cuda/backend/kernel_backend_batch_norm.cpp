// KernelBackend: batch norm's statistics, per-channel coefficients, apply
// and backward, reduced per channel in a fixed order.
#include "cuda/backend/kernel_backend.hpp"

namespace rig::cuda {

void KernelBackend::batch_norm_stats(const backend::BatchNormShape& s, const float* x, float* mean,
                                     float* var) {
  const std::int64_t chunks = kernels::batch_norm_chunks(s.n, s.inner);
  DeviceScratch buffer =
      scratch(static_cast<std::size_t>(kernels::batch_norm_stats_scratch(s.n, s.c, s.inner)) *
              sizeof(float));
  float* part = buffer.as<float>();
  run(kernels::BatchNormStatsPartial{x, s.n, s.c, s.inner, part, part + s.c * chunks});
  run(kernels::BatchNormStatsFinish{part, part + s.c * chunks, s.n, s.c, s.inner, mean, var});
}

void KernelBackend::batch_norm_prepare(const backend::BatchNormPrepare& a) {
  run(kernels::BatchNormPrepareChannels{a.c, a.training, a.momentum, a.eps, a.unbias, a.mean, a.var,
                                        a.running_mean, a.running_var, a.gamma, a.beta, a.invstd,
                                        a.scale, a.shift});
}

void KernelBackend::batch_norm_apply(const backend::BatchNormShape& s, const float* x,
                                     const float* scale, const float* shift, float* y) {
  run(kernels::BatchNormApply{x, scale, shift, y, s.n, s.c, s.inner});
}

void KernelBackend::batch_norm_backward(const backend::BatchNormShape& s, const float* x,
                                        const float* dy, const float* mean, const float* invstd,
                                        const float* gamma, bool batch_stats, float* dx,
                                        float* dgamma, float* dbeta) {
  const std::int64_t chunks = kernels::batch_norm_chunks(s.n, s.inner);
  DeviceScratch buffer =
      scratch(static_cast<std::size_t>(kernels::batch_norm_backward_scratch(s.n, s.c, s.inner)) *
              sizeof(float));
  float* coef = buffer.as<float>();
  float* part = coef + 3 * s.c;
  const bool sums = dgamma != nullptr || dbeta != nullptr || (dx != nullptr && batch_stats);
  if (sums) {
    run(kernels::BatchNormGradPartial{x, dy, mean, s.n, s.c, s.inner, part, part + s.c * chunks});
  }
  run(kernels::BatchNormGradFinish{part, part + s.c * chunks, sums, s.n, s.c, s.inner, mean, invstd,
                                   gamma, batch_stats, dx != nullptr, dgamma, dbeta, coef});
  if (dx != nullptr) run(kernels::BatchNormBackwardDx{x, dy, coef, dx, s.n, s.c, s.inner});
}

}  // namespace rig::cuda
