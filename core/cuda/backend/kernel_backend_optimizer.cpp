// KernelBackend: the optimizer updates over the flat f32 buffers (LARC:
// kernel_backend_larc.cpp).
#include "cuda/backend/kernel_backend.hpp"

namespace rig::cuda {

void KernelBackend::adam_update(std::int64_t n, float* p, const float* grad, float* m, float* v,
                                float* vmax, const AdamUpdate& args) {
  run(kernels::AdamUpdateKernel{n, p, grad, m, v, vmax, args});
}

void KernelBackend::sgd_update(std::int64_t n, float* p, const float* grad, float* buffer,
                               const SgdUpdate& args) {
  run(kernels::SgdUpdateKernel{n, p, grad, buffer, args});
}

void KernelBackend::novograd_update(float* p, const float* grad, float* m, float* ema,
                                    const FlatSlice* slices, std::int64_t count,
                                    const NovogradUpdate& args) {
  if (count == 0) return;
  const DeviceScratch device_slices =
      upload(slices, static_cast<std::size_t>(count) * sizeof(FlatSlice));
  run(kernels::NovogradUpdateKernel{p, grad, m, ema, device_slices.as<const FlatSlice>(), count,
                                    args});
}

}  // namespace rig::cuda
