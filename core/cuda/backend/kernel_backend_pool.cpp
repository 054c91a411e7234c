// KernelBackend: max, average and global average pooling (NCHW or NHWC f32;
// max and global average pooling also on f16 / bf16 storage).
#include "cuda/backend/kernel_backend.hpp"

namespace rig::cuda {

namespace {

kernels::PoolGeometry geometry(const backend::Pool2dShape& s) {
  return {s.planes,   s.h,        s.w,     s.out_h, s.out_w,         s.kernel_h, s.kernel_w,
          s.stride_h, s.stride_w, s.pad_h, s.pad_w, s.channels_last, s.channels};
}

}  // namespace

void KernelBackend::max_pool2d_forward(const backend::Pool2dShape& s, const float* x, float* y,
                                       std::int32_t* index) {
  run(kernels::MaxPool2dForward{geometry(s), x, y, index});
}

void KernelBackend::max_pool2d_backward(const backend::Pool2dShape& s, const std::int32_t* index,
                                        const float* dy, float* dx) {
  run(kernels::MaxPool2dBackward{geometry(s), index, dy, dx});
}

void KernelBackend::max_pool2d_forward_16(const backend::Pool2dShape& s, DType type, const void* x,
                                          void* y, std::int32_t* index) {
  kernels::MaxPool2dForward k{geometry(s), static_cast<const float*>(x), static_cast<float*>(y),
                              index};
  k.type = element_type(type, "max_pool2d_forward");
  run(k);
}

void KernelBackend::max_pool2d_backward_16(const backend::Pool2dShape& s, DType type,
                                           const std::int32_t* index, const void* dy, void* dx) {
  kernels::MaxPool2dBackward k{geometry(s), index, static_cast<const float*>(dy),
                               static_cast<float*>(dx)};
  k.type = element_type(type, "max_pool2d_backward");
  run(k);
}

void KernelBackend::avg_pool2d_forward(const backend::Pool2dShape& s, const float* x, float* y) {
  run(kernels::AvgPool2dForward{geometry(s), x, y});
}

void KernelBackend::avg_pool2d_backward(const backend::Pool2dShape& s, const float* dy, float* dx) {
  run(kernels::AvgPool2dBackward{geometry(s), dy, dx});
}

void KernelBackend::global_avg_pool_forward(std::int64_t planes, std::int64_t size,
                                            std::int64_t channels, const float* x, float* y) {
  run(kernels::GlobalAvgPoolForward{x, y, planes, size, kernels::ElementType::f32, channels});
}

void KernelBackend::global_avg_pool_backward(std::int64_t planes, std::int64_t size,
                                             std::int64_t channels, const float* dy, float* dx) {
  run(kernels::GlobalAvgPoolBackward{dy, dx, planes, size, kernels::ElementType::f32, channels});
}

// The kernels' float* operands hold 16-bit values here (their `type`).
void KernelBackend::global_avg_pool_forward_16(std::int64_t planes, std::int64_t size,
                                               std::int64_t channels, DType type, const void* x,
                                               void* y) {
  run(kernels::GlobalAvgPoolForward{static_cast<const float*>(x), static_cast<float*>(y), planes,
                                    size, element_type(type, "global_avg_pool_forward_16"),
                                    channels});
}

void KernelBackend::global_avg_pool_backward_16(std::int64_t planes, std::int64_t size,
                                                std::int64_t channels, DType type, const void* dy,
                                                void* dx) {
  run(kernels::GlobalAvgPoolBackward{static_cast<const float*>(dy), static_cast<float*>(dx), planes,
                                     size, element_type(type, "global_avg_pool_backward_16"),
                                     channels});
}

}  // namespace rig::cuda
