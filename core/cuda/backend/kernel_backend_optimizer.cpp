// KernelBackend: the optimizer updates over the flat f32 buffers, reading
// 16-bit gradients and publishing 16-bit values where asked (LARC:
// kernel_backend_larc.cpp).
#include "cuda/backend/kernel_backend.hpp"

namespace rig::cuda {

namespace {

kernels::UpdateOperands operands_of(const GradientSource& grad, const PublishedValues& publish,
                                    const char* op) {
  kernels::UpdateOperands io;
  io.grad_type = element_type(grad.type, op);
  io.grad_scale = grad.scale;
  if (publish.data != nullptr) {
    io.publish = publish.data;
    io.publish_type = element_type(publish.type, op);
  }
  return io;
}

}  // namespace

void KernelBackend::adam_update(std::int64_t n, float* p, const GradientSource& grad, float* m,
                                float* v, float* vmax, const AdamUpdate& args,
                                const PublishedValues& publish) {
  run(kernels::AdamUpdateKernel{n, p, grad.data, m, v, vmax, args,
                                operands_of(grad, publish, "adam_update")});
}

void KernelBackend::sgd_update(std::int64_t n, float* p, const GradientSource& grad, float* buffer,
                               const SgdUpdate& args, const PublishedValues& publish) {
  run(kernels::SgdUpdateKernel{n, p, grad.data, buffer, args,
                               operands_of(grad, publish, "sgd_update")});
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
