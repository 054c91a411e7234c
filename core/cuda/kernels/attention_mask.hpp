// The keep-mask of attention (Backend::attention_forward/backward, composed
// of GEMMs, softmax and dropout by the CUDA back end): the causal rule of
// backend::AttentionShape applied in place to a contiguous u8 mask
// [planes, tq, tk]: query i keeps key j only when j <= i + (tk - tq).
//   CausalMask: grid-stride per element.
// And the dropout of the attention weights (and of their gradient) by the
// u8 keep-mask of backend::AttentionShape:
//   AttentionKeep: out = (x * keep) * scale, in packs of 8 where aligned
//     (packed.hpp), else an unrolled grid-stride loop:
//     the bits of an f32 multiply by the mask's 0 / 1 and then by the scale
//     (a dropped negative value is -0, as the CPU's product gives).
#pragma once

#include <cstdint>

#include "cuda/kernels/common.hpp"
#include "cuda/kernels/packed.hpp"

namespace rig::kernels {

struct CausalMask {
  std::uint8_t* mask = nullptr;  // [planes, tq, tk], 1 = may attend
  std::int64_t planes = 0, tq = 0, tk = 0;

  simt::LaunchShape plan(const simt::DeviceProperties& device) const {
    return plan_grid_stride(device, planes * tq * tk);
  }

  template <class Ctx>
  RIG_HD void operator()(Ctx& ctx) const {
    const std::int64_t n = planes * tq * tk;
    for (std::int64_t e = global_thread(ctx); e < n; e += grid_threads(ctx)) {
      const std::int64_t j = e % tk;
      const std::int64_t i = (e / tk) % tq;
      if (j > i + (tk - tq)) mask[e] = 0;
    }
  }
};

struct AttentionKeep {
  const float* x = nullptr;
  const std::uint8_t* keep = nullptr;  // 0 / 1 per element
  float scale = 1.0F;
  float* out = nullptr;  // may be x
  std::int64_t n = 0;

  // In packs of kPack (packed.hpp; the mask's 8 bytes as one word) where
  // every operand allows.
  RIG_HD bool packed() const {
    return pack_aligned<kPack>(x, ElementType::f32) && pack_aligned<kPack>(out, ElementType::f32) &&
           reinterpret_cast<std::uintptr_t>(keep) % kPack == 0;
  }

  simt::LaunchShape plan(const simt::DeviceProperties& device) const {
    return plan_grid_stride(device, n, packed() ? kPack : kUnroll, 40);  // ptxas: 40
  }

  template <class Ctx>
  RIG_HD void operator()(Ctx& ctx) const {
    const auto element = [&](std::int64_t i) {
      out[i] = x[i] * static_cast<float>(keep[i]) * scale;
    };
    if (packed()) {  // uniform over the launch
      static_assert(kPack == 8, "a pack's mask bytes are one 64-bit word");
      packed_grid_stride(
          ctx, n,
          [&](std::int64_t k) {
            Pack<kPack> v = load_pack<kPack>(x, ElementType::f32, k);
            const std::uint64_t bytes = packed_detail::load_word<std::uint64_t>(keep, k);
            for (int e = 0; e < kPack; ++e) {
              v.v[e] = v.v[e] * static_cast<float>((bytes >> (8 * e)) & 0xFFU) * scale;
            }
            store_pack<kPack>(out, ElementType::f32, k, v);
          },
          element);
      return;
    }
    unrolled_grid_stride(
        ctx, n, [&](std::int64_t i) { return x[i] * static_cast<float>(keep[i]); },
        [&](std::int64_t i, float kept) { out[i] = kept * scale; });
  }
};

}  // namespace rig::kernels
