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
    return plan_grid_stride(device, n, kAdamPack, 56);
  }

  // A thread takes chunks of kAdamPack elements: packs where every buffer
  // allows, else element by element.
  template <class Ctx>
  RIG_HD void operator()(Ctx& ctx) const {
    constexpr ElementType f32 = ElementType::f32;
    const bool pack = packed();
    for_chunks<kAdamPack>(n, global_thread(ctx), grid_threads(ctx), [&](std::int64_t q, int valid) {
      const std::int64_t first = q * kAdamPack;
      Pack<kAdamPack> pk = load_chunk<kAdamPack>(p, f32, first, valid, pack);
      const Pack<kAdamPack> gk = load_chunk<kAdamPack>(grad, f32, first, valid, pack);
      Pack<kAdamPack> mk = load_chunk<kAdamPack>(m, f32, first, valid, pack);
      Pack<kAdamPack> vk = load_chunk<kAdamPack>(v, f32, first, valid, pack);
      Pack<kAdamPack> xk = vmax != nullptr ? load_chunk<kAdamPack>(vmax, f32, first, valid, pack)
                                           : Pack<kAdamPack>{};
      for (int e = 0; e < kAdamPack; ++e) {
        math::adam_step<math::DeviceMath>(pk.v[e], gk.v[e], mk.v[e], vk.v[e],
                                          vmax != nullptr ? &xk.v[e] : nullptr, args);
      }
      store_chunk<kAdamPack>(p, f32, first, valid, pack, pk);
      store_chunk<kAdamPack>(m, f32, first, valid, pack, mk);
      store_chunk<kAdamPack>(v, f32, first, valid, pack, vk);
      if (vmax != nullptr) store_chunk<kAdamPack>(vmax, f32, first, valid, pack, xk);
    });
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
    return plan_grid_stride(device, n, kSgdPack, 38);  // ptxas: 38
  }

  // A thread takes chunks of kSgdPack elements, as Adam.
  template <class Ctx>
  RIG_HD void operator()(Ctx& ctx) const {
    constexpr ElementType f32 = ElementType::f32;
    const bool pack = packed();
    for_chunks<kSgdPack>(n, global_thread(ctx), grid_threads(ctx), [&](std::int64_t q, int valid) {
      const std::int64_t first = q * kSgdPack;
      Pack<kSgdPack> pk = load_chunk<kSgdPack>(p, f32, first, valid, pack);
      const Pack<kSgdPack> gk = load_chunk<kSgdPack>(grad, f32, first, valid, pack);
      Pack<kSgdPack> bk = buffer != nullptr ? load_chunk<kSgdPack>(buffer, f32, first, valid, pack)
                                            : Pack<kSgdPack>{};
      for (int e = 0; e < kSgdPack; ++e) {
        math::sgd_step(pk.v[e], gk.v[e], buffer != nullptr ? &bk.v[e] : nullptr, args);
      }
      store_chunk<kSgdPack>(p, f32, first, valid, pack, pk);
      if (buffer != nullptr) store_chunk<kSgdPack>(buffer, f32, first, valid, pack, bk);
    });
  }
};

}  // namespace rig::kernels
