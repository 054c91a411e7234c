// KernelBackend: convolutions (the device's library: cuDNN on the GPU) with
// the bias added and reduced by own kernels.
#include "cuda/backend/kernel_backend.hpp"

namespace rig::cuda {

void KernelBackend::conv2d_forward(const backend::Conv2dShape& s, const float* x, const float* w,
                                   const float* b, float* y) {
  if (s.n * s.c_out * s.out_h * s.out_w == 0) return;
  device_->conv2d_forward(s, x, w, y);
  if (b == nullptr) return;
  // y [n, c_out, hw] += b[c_out]
  backend::StridedPlan<3> plan;
  plan.ndim = 3;
  const std::int64_t hw = s.out_h * s.out_w;
  plan.shape[0] = s.n;
  plan.shape[1] = s.c_out;
  plan.shape[2] = hw;
  plan.strides[0] = plan.strides[1] = {s.c_out * hw, hw, 1};
  plan.strides[2] = {0, 1, 0};
  binary(backend::Binary::add, plan, y, b, y);
}

void KernelBackend::conv2d_backward(const backend::Conv2dShape& s, const float* x, const float* w,
                                    const float* dy, float* dx, float* dw, float* db) {
  if (dx != nullptr) device_->conv2d_backward_data(s, w, dy, dx);
  if (dw != nullptr) device_->conv2d_backward_filter(s, x, dy, dw);
  if (db != nullptr) {
    // db[c] = sum over n and the output plane, in a fixed order.
    const std::int64_t hw = s.out_h * s.out_w;
    DeviceScratch per_image = scratch(static_cast<std::size_t>(s.n * s.c_out) * sizeof(float));
    sum_axis(dy, per_image.as<float>(), s.n * s.c_out, hw, 1, 1.0F);
    sum_axis(per_image.as<float>(), db, 1, s.n, s.c_out, 1.0F);
  }
}

}  // namespace rig::cuda
