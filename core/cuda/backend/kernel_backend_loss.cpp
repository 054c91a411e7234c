// KernelBackend: cross-entropy (padded loss and index checks: helper kernels
// in kernel_backend_checks.cpp).
#include "cuda/backend/kernel_backend.hpp"

namespace rig::cuda {

void KernelBackend::cross_entropy_forward(const float* x, const std::int64_t* labels,
                                          std::int64_t rows, std::int64_t c, float on, float off,
                                          float* loss, float* lse) {
  run(kernels::CrossEntropyForward{x, labels, loss, lse, rows, c, {on, off}});
}

void KernelBackend::cross_entropy_backward(const float* x, const std::int64_t* labels,
                                           const float* lse, const float* row_scale, float scale,
                                           const float* scale_factor, std::int64_t rows,
                                           std::int64_t c, float on, float off, float* dx) {
  run(kernels::CrossEntropyBackward{
      x, labels, lse, row_scale, scale_factor, scale, dx, rows, c, {on, off}});
}

}  // namespace rig::cuda
