// Optimizer updates over flat f32 buffers, in place (Backend::adam_update /
// sgd_update, core/cpu/optimizer_updates.cpp): grid-stride loops calling the
// shared element math of rig/math/optimizer.hpp, so that the updates equal
// the CPU's bit for bit (on the GPU when compiled with -fmad=false).
#pragma once

#include <cstdint>

#include "cuda/kernels/common.hpp"
#include "rig/math/device_math.hpp"
#include "rig/math/optimizer.hpp"
#include "rig/op_types.hpp"

namespace rig::kernels {

// Adam / AdamW; AMSGrad when vmax is not null.
struct AdamUpdateKernel {
  std::int64_t n = 0;
  float* p = nullptr;
  const float* grad = nullptr;
  float* m = nullptr;
  float* v = nullptr;
  float* vmax = nullptr;  // or null
  AdamUpdate args{};

  // 40 registers per thread under nvcc 13 for sm_90 (ptxas -v).
  simt::LaunchShape plan(const simt::DeviceProperties& device) const {
    return plan_grid_stride(device, n, 1, 40);
  }

  template <class Ctx>
  RIG_HD void operator()(Ctx& ctx) const {
    for (std::int64_t i = global_thread(ctx); i < n; i += grid_threads(ctx)) {
      float pi = p[i], mi = m[i], vi = v[i];
      float xi = vmax != nullptr ? vmax[i] : 0.0F;
      math::adam_step<math::DeviceMath>(pi, grad[i], mi, vi, vmax != nullptr ? &xi : nullptr, args);
      p[i] = pi;
      m[i] = mi;
      v[i] = vi;
      if (vmax != nullptr) vmax[i] = xi;
    }
  }
};

// torch.optim.SGD (dampening 0); momentum when buffer is not null.
struct SgdUpdateKernel {
  std::int64_t n = 0;
  float* p = nullptr;
  const float* grad = nullptr;
  float* buffer = nullptr;  // or null
  SgdUpdate args{};

  simt::LaunchShape plan(const simt::DeviceProperties& device) const {
    return plan_grid_stride(device, n);
  }

  template <class Ctx>
  RIG_HD void operator()(Ctx& ctx) const {
    for (std::int64_t i = global_thread(ctx); i < n; i += grid_threads(ctx)) {
      float pi = p[i];
      math::sgd_step(pi, grad[i], buffer != nullptr ? buffer + i : nullptr, args);
      p[i] = pi;
    }
  }
};

}  // namespace rig::kernels
