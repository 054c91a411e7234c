// Optimizer updates over flat f32 buffers, in place (Backend::adam_update /
// sgd_update, core/cpu/optimizer_updates.cpp), the gradients read as f32 or
// 16-bit (unscaled as read) and the values also published to a 16-bit copy
// where asked (UpdateOperands): grid-stride loops calling the
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

// Where an update reads its gradients and publishes its values
// (rig/op_types.hpp's GradientSource and PublishedValues): each gradient is
// widened and multiplied by grad_scale, as unscale writes the f32 master;
// the new values are also stored rounded to publish_type where publish is
// not null, as the f32 -> 16-bit copy rounds them.
struct UpdateOperands {
  ElementType grad_type = ElementType::f32;
  float grad_scale = 1.0F;
  void* publish = nullptr;
  ElementType publish_type = ElementType::bf16;
};

// A chunk of gradients as f32: widened, times io.grad_scale (a multiply by
// 1 leaves an f32 gradient as it is).
template <int N>
RIG_HD_INLINE Pack<N> load_gradients(const void* grad, const UpdateOperands& io, std::int64_t first,
                                     int valid, bool pack) {
  Pack<N> g = load_chunk<N>(grad, io.grad_type, first, valid, pack);
  for (int e = 0; e < N; ++e) g.v[e] = g.v[e] * io.grad_scale;
  return g;
}

// Adam / AdamW; AMSGrad when vmax is not null.
struct AdamUpdateKernel {
  std::int64_t n = 0;
  float* p = nullptr;
  const void* grad = nullptr;  // of io.grad_type
  float* m = nullptr;
  float* v = nullptr;
  float* vmax = nullptr;  // or null
  AdamUpdate args{};
  UpdateOperands io{};

  // In packs of kAdamPack (packed.hpp) where every buffer allows.
  static constexpr int kAdamPack = 4;
  RIG_HD bool packed() const {
    constexpr ElementType f32 = ElementType::f32;
    return pack_aligned<kAdamPack>(p, f32) && pack_aligned<kAdamPack>(grad, io.grad_type) &&
           pack_aligned<kAdamPack>(m, f32) && pack_aligned<kAdamPack>(v, f32) &&
           pack_aligned<kAdamPack>(vmax, f32) &&
           pack_aligned<kAdamPack>(io.publish, io.publish_type);
  }

  // ptxas (nvcc 13): 69 registers a thread for sm_75, 62 for sm_90.
  simt::LaunchShape plan(const simt::DeviceProperties& device) const {
    return plan_grid_stride(device, n, kAdamPack, 69);
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
      const Pack<kAdamPack> gk = load_gradients<kAdamPack>(grad, io, first, valid, pack);
      Pack<kAdamPack> mk = load_chunk<kAdamPack>(m, f32, first, valid, pack);
      Pack<kAdamPack> vk = load_chunk<kAdamPack>(v, f32, first, valid, pack);
      Pack<kAdamPack> xk = vmax != nullptr ? load_chunk<kAdamPack>(vmax, f32, first, valid, pack)
                                           : Pack<kAdamPack>{};
      for (int e = 0; e < kAdamPack; ++e) {
        math::adam_step<math::DeviceMath>(pk.v[e], gk.v[e], mk.v[e], vk.v[e],
                                          vmax != nullptr ? &xk.v[e] : nullptr, args);
      }
      store_chunk<kAdamPack>(p, f32, first, valid, pack, pk);
      if (io.publish != nullptr) {
        store_chunk<kAdamPack>(io.publish, io.publish_type, first, valid, pack, pk);
      }
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
  const void* grad = nullptr;  // of io.grad_type
  float* buffer = nullptr;     // or null
  SgdUpdate args{};
  UpdateOperands io{};

  // In packs of kSgdPack (packed.hpp) where every buffer allows.
  static constexpr int kSgdPack = 4;
  RIG_HD bool packed() const {
    constexpr ElementType f32 = ElementType::f32;
    return pack_aligned<kSgdPack>(p, f32) && pack_aligned<kSgdPack>(grad, io.grad_type) &&
           pack_aligned<kSgdPack>(buffer, f32) &&
           pack_aligned<kSgdPack>(io.publish, io.publish_type);
  }

  simt::LaunchShape plan(const simt::DeviceProperties& device) const {
    return plan_grid_stride(device, n, kSgdPack, 44);  // ptxas: 44 (sm_75), 37 (sm_90)
  }

  // A thread takes chunks of kSgdPack elements, as Adam.
  template <class Ctx>
  RIG_HD void operator()(Ctx& ctx) const {
    constexpr ElementType f32 = ElementType::f32;
    const bool pack = packed();
    for_chunks<kSgdPack>(n, global_thread(ctx), grid_threads(ctx), [&](std::int64_t q, int valid) {
      const std::int64_t first = q * kSgdPack;
      Pack<kSgdPack> pk = load_chunk<kSgdPack>(p, f32, first, valid, pack);
      const Pack<kSgdPack> gk = load_gradients<kSgdPack>(grad, io, first, valid, pack);
      Pack<kSgdPack> bk = buffer != nullptr ? load_chunk<kSgdPack>(buffer, f32, first, valid, pack)
                                            : Pack<kSgdPack>{};
      for (int e = 0; e < kSgdPack; ++e) {
        math::sgd_step(pk.v[e], gk.v[e], buffer != nullptr ? &bk.v[e] : nullptr, args);
      }
      store_chunk<kSgdPack>(p, f32, first, valid, pack, pk);
      if (io.publish != nullptr) {
        store_chunk<kSgdPack>(io.publish, io.publish_type, first, valid, pack, pk);
      }
      if (buffer != nullptr) store_chunk<kSgdPack>(buffer, f32, first, valid, pack, bk);
    });
  }
};

}  // namespace rig::kernels
