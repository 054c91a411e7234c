// TEMPORARY while the kernels are written: entry points without kernels yet.
#include <stdexcept>

#include "cuda/backend/kernel_backend.hpp"

namespace rig::cuda {

namespace {
[[noreturn]] void pending(const char* what) {
  throw std::invalid_argument(std::string(what) + " on cuda: no kernel yet");
}
}  // namespace

void KernelBackend::batch_norm_stats(const backend::BatchNormShape&, const float*, float*, float*) {
  pending("batch_norm_stats");
}
void KernelBackend::batch_norm_prepare(const backend::BatchNormPrepare&) {
  pending("batch_norm_prepare");
}
void KernelBackend::batch_norm_apply(const backend::BatchNormShape&, const float*, const float*,
                                     const float*, float*) {
  pending("batch_norm_apply");
}
void KernelBackend::batch_norm_backward(const backend::BatchNormShape&, const float*, const float*,
                                        const float*, const float*, const float*, bool, float*,
                                        float*, float*) {
  pending("batch_norm_backward");
}
void KernelBackend::max_pool2d_forward(const backend::Pool2dShape&, const float*, float*,
                                       std::int32_t*) {
  pending("max_pool2d");
}
void KernelBackend::max_pool2d_backward(const backend::Pool2dShape&, const std::int32_t*,
                                        const float*, float*) {
  pending("max_pool2d");
}
void KernelBackend::avg_pool2d_forward(const backend::Pool2dShape&, const float*, float*) {
  pending("avg_pool2d");
}
void KernelBackend::avg_pool2d_backward(const backend::Pool2dShape&, const float*, float*) {
  pending("avg_pool2d");
}
void KernelBackend::global_avg_pool_forward(std::int64_t, std::int64_t, const float*, float*) {
  pending("global_avg_pool");
}
void KernelBackend::global_avg_pool_backward(std::int64_t, std::int64_t, const float*, float*) {
  pending("global_avg_pool");
}

}  // namespace rig::cuda
