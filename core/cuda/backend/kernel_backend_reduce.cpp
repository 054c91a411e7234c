// KernelBackend: reductions and the overflow check of loss scaling.
#include "cuda/backend/kernel_backend.hpp"

namespace rig::cuda {

void KernelBackend::sum_all(const float* x, std::int64_t n, double divisor, float* out) {
  const std::int64_t chunks = kernels::sum_chunks(n);
  DeviceScratch partial = scratch(static_cast<std::size_t>(chunks) * sizeof(double));
  run(kernels::SumPartials{x, n, false, partial.as<double>()});
  run(kernels::SumFinish{partial.as<double>(), chunks, divisor, out});
}

void KernelBackend::sum_squares(const float* x, std::int64_t n, double divisor, float* out) {
  const std::int64_t chunks = kernels::sum_chunks(n);
  DeviceScratch partial = scratch(static_cast<std::size_t>(chunks) * sizeof(double));
  run(kernels::SumPartials{x, n, true, partial.as<double>()});
  run(kernels::SumFinish{partial.as<double>(), chunks, divisor, out});
}

void KernelBackend::sum_axis(const float* x, float* y, std::int64_t outer, std::int64_t r,
                             std::int64_t inner, float scale) {
  run(kernels::SumAxis{x, y, outer, r, inner, scale});
}

void KernelBackend::max_axis(const float* x, float* y, std::int64_t* index, std::int64_t outer,
                             std::int64_t r, std::int64_t inner) {
  run(kernels::MaxAxis{x, y, index, outer, r, inner});
}

void KernelBackend::max_axis_backward(const float* g, const std::int64_t* index, float* dx,
                                      std::int64_t outer, std::int64_t r, std::int64_t inner) {
  run(kernels::MaxAxisBackward{g, index, dx, outer, r, inner});
}

void KernelBackend::unscale(std::int64_t n, DType src_dtype, const void* src, float* master,
                            float scale, float* amax) {
  kernels::UnscalePartials first{n, element_type(src_dtype, "unscale"), src, master, scale};
  if (amax == nullptr) {  // the unscaled gradients alone: no statistic, no second launch
    run(first);
    return;
  }
  const std::int64_t partials = first.plan(device_->properties()).grid.x;
  DeviceScratch bits = scratch(static_cast<std::size_t>(partials) * sizeof(std::uint32_t));
  first.partial_amax_bits = bits.as<std::uint32_t>();
  run(first);
  device_->run(kernels::UnscaleFinish{bits.as<std::uint32_t>(), nullptr, partials, amax, nullptr});
}

}  // namespace rig::cuda
