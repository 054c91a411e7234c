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

// The kernels read and write f32, f16 or bf16 logits (x keeps its float*
// type in the kernel structs; `type` says what it holds).
void KernelBackend::cross_entropy_forward_16(DType type, const void* x, const std::int64_t* labels,
                                             std::int64_t rows, std::int64_t c, float on, float off,
                                             float* loss, float* lse) {
  run(kernels::CrossEntropyForward{static_cast<const float*>(x),
                                   labels,
                                   loss,
                                   lse,
                                   rows,
                                   c,
                                   {on, off},
                                   element_type(type, "cross_entropy")});
}

void KernelBackend::cross_entropy_backward_16(DType type, const void* x, const std::int64_t* labels,
                                              const float* lse, const float* row_scale, float scale,
                                              const float* scale_factor, std::int64_t rows,
                                              std::int64_t c, float on, float off, void* dx) {
  run(kernels::CrossEntropyBackward{static_cast<const float*>(x),
                                    labels,
                                    lse,
                                    row_scale,
                                    scale_factor,
                                    scale,
                                    static_cast<float*>(dx),
                                    rows,
                                    c,
                                    {on, off},
                                    element_type(type, "cross_entropy")});
}

}  // namespace rig::cuda
