// KernelBackend: convolutions (the device's library: cuDNN on the GPU) with
// the bias added and reduced by own kernels; on 16-bit storage, the device's
// 16-bit convolutions where it has them, else the f32 ones on f32 copies.
#include <stdexcept>

#include "cuda/backend/kernel_backend.hpp"

namespace rig::cuda {

// s with TF32 allowed where set_tf32 asked for it (on top of bf16 matmul
// precision's: 16-bit values are exact in TF32).
backend::Conv2dShape KernelBackend::tf32_allowed(const backend::Conv2dShape& s) const {
  backend::Conv2dShape t = s;
  t.allow_tf32 = t.allow_tf32 || tf32_;
  return t;
}

void KernelBackend::conv2d_forward(const backend::Conv2dShape& shape, const float* x,
                                   const float* w, const float* b, float* y) {
  const backend::Conv2dShape s = tf32_allowed(shape);
  if (s.n * s.c_out * s.out_h * s.out_w == 0) return;
  device_->conv2d_forward(s, x, w, y);
  if (b == nullptr) return;
  backend::StridedPlan<3> plan;
  const std::int64_t hw = s.out_h * s.out_w;
  if (s.channels_last) {
    // y [n hw, c_out] += b[c_out]
    plan.ndim = 2;
    plan.shape[0] = s.n * hw;
    plan.shape[1] = s.c_out;
    plan.strides[0] = plan.strides[1] = {s.c_out, 1};
    plan.strides[2] = {0, 1};
  } else {
    // y [n, c_out, hw] += b[c_out]
    plan.ndim = 3;
    plan.shape[0] = s.n;
    plan.shape[1] = s.c_out;
    plan.shape[2] = hw;
    plan.strides[0] = plan.strides[1] = {s.c_out * hw, hw, 1};
    plan.strides[2] = {0, 1, 0};
  }
  binary(backend::Binary::add, plan, y, b, y);
}

void KernelBackend::conv2d_backward(const backend::Conv2dShape& shape, const float* x,
                                    const float* w, const float* dy, float* dx, float* dw,
                                    float* db) {
  const backend::Conv2dShape s = tf32_allowed(shape);
  if (dx != nullptr) device_->conv2d_backward_data(s, w, dy, dx);
  if (dw != nullptr) device_->conv2d_backward_filter(s, x, dy, dw);
  if (db != nullptr) {
    // db[c] = sum over n and the output plane, in a fixed order: per image
    // first ([n, c_out]), then over the images.
    const std::int64_t hw = s.out_h * s.out_w;
    DeviceScratch per_image = scratch(static_cast<std::size_t>(s.n * s.c_out) * sizeof(float));
    if (s.channels_last) {
      sum_axis(dy, per_image.as<float>(), s.n, hw, s.c_out, 1.0F);
    } else {
      sum_axis(dy, per_image.as<float>(), s.n * s.c_out, hw, 1, 1.0F);
    }
    sum_axis(per_image.as<float>(), db, 1, s.n, s.c_out, 1.0F);
  }
}

void KernelDevice::conv2d_forward_16(const backend::Conv2dShape&, DType, const void*, const void*,
                                     void*) {
  throw std::logic_error("16-bit convolution asked of a cuda device without it");
}

void KernelDevice::conv2d_backward_data_16(const backend::Conv2dShape&, DType, const void*,
                                           const void*, void*, bool) {
  throw std::logic_error("16-bit convolution asked of a cuda device without it");
}

void KernelDevice::conv2d_backward_filter_16(const backend::Conv2dShape&, DType, const void*,
                                             const void*, void*, bool) {
  throw std::logic_error("16-bit convolution asked of a cuda device without it");
}

// n elements of `type` at src as an f32 scratch buffer (null src: none).
DeviceScratch KernelBackend::f32_copy(DType type, const void* src, std::int64_t n) {
  if (src == nullptr) return {};
  DeviceScratch out = scratch(static_cast<std::size_t>(n) * sizeof(float));
  copy_strided({n}, out.as<float>(), {1}, DType::f32, src, {1}, type);
  return out;
}

void KernelBackend::conv2d_forward_16(const backend::Conv2dShape& shape, DType type, const void* x,
                                      const void* w, void* y) {
  const backend::Conv2dShape s = tf32_allowed(shape);
  if (s.y_elements() == 0) return;
  if (device_->conv2d_16(s, type)) {
    device_->conv2d_forward_16(s, type, x, w, y);
    return;
  }
  if (type == DType::f32) {
    device_->conv2d_forward(s, static_cast<const float*>(x), static_cast<const float*>(w),
                            static_cast<float*>(y));
    return;
  }
  const DeviceScratch xf = f32_copy(type, x, s.x_elements()),
                      wf = f32_copy(type, w, s.w_elements());
  DeviceScratch yf = scratch(static_cast<std::size_t>(s.y_elements()) * sizeof(float));
  device_->conv2d_forward(s, xf.as<float>(), wf.as<float>(), yf.as<float>());
  copy_strided({s.y_elements()}, y, {1}, type, yf.as<float>(), {1}, DType::f32);
}

void KernelBackend::conv2d_backward_16(const backend::Conv2dShape& shape, DType type, const void* x,
                                       const void* w, const void* dy, void* dx, void* dw,
                                       const backend::ConvGradAccumulation& accumulate) {
  const backend::Conv2dShape s = tf32_allowed(shape);
  if (device_->conv2d_16(s, type)) {
    // make(out, add) writes a gradient of n elements into `into`, or adds
    // it where the device can (adds_in_place(), asked only then); else it
    // is made in scratch and added (16-bit: rounded twice).
    const auto gradient = [&](std::int64_t n, void* into, bool add, const auto& adds_in_place,
                              const auto& make) {
      if (into == nullptr) return;
      if (!add || adds_in_place()) {
        make(into, add);
        return;
      }
      DeviceScratch made = scratch(static_cast<std::size_t>(n) * dtype_size(type));
      make(made.as<void>(), false);
      add_strided({n}, into, {1}, type, made.as<void>(), {1}, type);
    };
    gradient(
        s.x_elements(), dx, accumulate.dx, [&] { return device_->conv2d_16_adds_dx(s, type); },
        [&](void* out, bool add) { device_->conv2d_backward_data_16(s, type, w, dy, out, add); });
    gradient(
        s.w_elements(), dw, accumulate.dw, [&] { return device_->conv2d_16_adds_dw(s, type); },
        [&](void* out, bool add) { device_->conv2d_backward_filter_16(s, type, x, dy, out, add); });
    return;
  }
  // The device's f32 convolutions: on the operands themselves (f32) or on
  // f32 copies (16-bit), each gradient made in place where it is f32 and
  // not added, else in scratch and then stored (rounded) or added.
  DeviceScratch copies[3];
  const auto f32_operand = [&](const void* p, std::int64_t n, DeviceScratch& copy) -> const float* {
    if (type == DType::f32) return static_cast<const float*>(p);
    copy = f32_copy(type, p, n);
    return copy.as<float>();
  };
  const auto gradient = [&](std::int64_t n, void* into, bool add, const auto& make) {
    if (type == DType::f32 && !add) {
      make(static_cast<float*>(into));
      return;
    }
    DeviceScratch made = scratch(static_cast<std::size_t>(n) * sizeof(float));
    make(made.as<float>());
    if (add) {
      add_strided({n}, into, {1}, type, made.as<float>(), {1}, DType::f32);
    } else {
      copy_strided({n}, into, {1}, type, made.as<float>(), {1}, DType::f32);
    }
  };
  const float* dyf = f32_operand(dy, s.y_elements(), copies[0]);
  if (dx != nullptr) {
    const float* wf = f32_operand(w, s.w_elements(), copies[1]);
    gradient(s.x_elements(), dx, accumulate.dx,
             [&](float* out) { device_->conv2d_backward_data(s, wf, dyf, out); });
    copies[1] = {};
  }
  if (dw != nullptr) {
    const float* xf = f32_operand(x, s.x_elements(), copies[2]);
    gradient(s.w_elements(), dw, accumulate.dw,
             [&](float* out) { device_->conv2d_backward_filter(s, xf, dyf, out); });
  }
}

}  // namespace rig::cuda
