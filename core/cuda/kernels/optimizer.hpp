// Optimizer updates over flat f32 buffers, in place (Backend::adam_update /
// sgd_update, core/cpu/optimizer_updates.cpp): grid-stride loops calling the
// shared element math of rig/math/optimizer.hpp, so that the updates equal
// the CPU's bit for bit (on the GPU when compiled with -fmad=false).
#pragma once

#include <cstdint>

#include "cuda/kernels/common.hpp"
#include "cuda/kernels/packed.hpp"
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

  // In packs of kAdamPack (packed.hpp) where every buffer allows.
  static constexpr int kAdamPack = 4;
  RIG_HD bool packed() const {
    constexpr ElementType f32 = ElementType::f32;
    return pack_aligned<kAdamPack>(p, f32) && pack_aligned<kAdamPack>(grad, f32) &&
           pack_aligned<kAdamPack>(m, f32) && pack_aligned<kAdamPack>(v, f32) &&
           pack_aligned<kAdamPack>(vmax, f32);
  }

  // 56 registers per thread under nvcc 13 for sm_90 (ptxas -v).
  simt::LaunchShape plan(const simt::DeviceProperties& device) const {
    return plan_grid_stride(device, n, packed() ? kAdamPack : 1, 56);
  }

  template <class Ctx>
  RIG_HD void operator()(Ctx& ctx) const {
    const auto element = [&](std::int64_t i) {
      float pi = p[i], mi = m[i], vi = v[i];
      float xi = vmax != nullptr ? vmax[i] : 0.0F;
      math::adam_step<math::DeviceMath>(pi, grad[i], mi, vi, vmax != nullptr ? &xi : nullptr, args);
      p[i] = pi;
      m[i] = mi;
      v[i] = vi;
      if (vmax != nullptr) vmax[i] = xi;
    };
    if (!packed()) {  // uniform over the launch
      for (std::int64_t i = global_thread(ctx); i < n; i += grid_threads(ctx)) element(i);
      return;
    }
    constexpr ElementType f32 = ElementType::f32;
    packed_grid_stride<kAdamPack>(
        ctx, n,
        [&](std::int64_t k) {
          Pack<kAdamPack> pk = load_pack<kAdamPack>(p, f32, k);
          const Pack<kAdamPack> gk = load_pack<kAdamPack>(grad, f32, k);
          Pack<kAdamPack> mk = load_pack<kAdamPack>(m, f32, k);
          Pack<kAdamPack> vk = load_pack<kAdamPack>(v, f32, k);
          Pack<kAdamPack> xk =
              vmax != nullptr ? load_pack<kAdamPack>(vmax, f32, k) : Pack<kAdamPack>{};
          for (int e = 0; e < kAdamPack; ++e) {
            math::adam_step<math::DeviceMath>(pk.v[e], gk.v[e], mk.v[e], vk.v[e],
                                              vmax != nullptr ? &xk.v[e] : nullptr, args);
          }
          store_pack<kAdamPack>(p, f32, k, pk);
          store_pack<kAdamPack>(m, f32, k, mk);
          store_pack<kAdamPack>(v, f32, k, vk);
          if (vmax != nullptr) store_pack<kAdamPack>(vmax, f32, k, xk);
        },
        element);
  }
};

// torch.optim.SGD (dampening 0); momentum when buffer is not null.
struct SgdUpdateKernel {
  std::int64_t n = 0;
  float* p = nullptr;
  const float* grad = nullptr;
  float* buffer = nullptr;  // or null
  SgdUpdate args{};

  // In packs of kSgdPack (packed.hpp) where every buffer allows.
  static constexpr int kSgdPack = 4;
  RIG_HD bool packed() const {
    constexpr ElementType f32 = ElementType::f32;
    return pack_aligned<kSgdPack>(p, f32) && pack_aligned<kSgdPack>(grad, f32) &&
           pack_aligned<kSgdPack>(buffer, f32);
  }

  simt::LaunchShape plan(const simt::DeviceProperties& device) const {
    return plan_grid_stride(device, n, packed() ? kSgdPack : 1);
  }

  template <class Ctx>
  RIG_HD void operator()(Ctx& ctx) const {
    const auto element = [&](std::int64_t i) {
      float pi = p[i];
      math::sgd_step(pi, grad[i], buffer != nullptr ? buffer + i : nullptr, args);
      p[i] = pi;
    };
    if (!packed()) {  // uniform over the launch
      for (std::int64_t i = global_thread(ctx); i < n; i += grid_threads(ctx)) element(i);
      return;
    }
    constexpr ElementType f32 = ElementType::f32;
    packed_grid_stride<kSgdPack>(
        ctx, n,
        [&](std::int64_t k) {
          Pack<kSgdPack> pk = load_pack<kSgdPack>(p, f32, k);
          const Pack<kSgdPack> gk = load_pack<kSgdPack>(grad, f32, k);
          Pack<kSgdPack> bk =
              buffer != nullptr ? load_pack<kSgdPack>(buffer, f32, k) : Pack<kSgdPack>{};
          for (int e = 0; e < kSgdPack; ++e) {
            math::sgd_step(pk.v[e], gk.v[e], buffer != nullptr ? &bk.v[e] : nullptr, args);
          }
          store_pack<kSgdPack>(p, f32, k, pk);
          if (buffer != nullptr) store_pack<kSgdPack>(buffer, f32, k, bk);
        },
        element);
  }
};

}  // namespace rig::kernels
