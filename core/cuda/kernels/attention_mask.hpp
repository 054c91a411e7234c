// The keep-mask of attention (Backend::attention_forward/backward, composed
// of GEMMs, softmax and dropout by the CUDA back end): the causal rule of
// backend::AttentionShape applied in place to a contiguous u8 mask
// [planes, tq, tk]: query i keeps key j only when j <= i + (tk - tq).
//   CausalMask: grid-stride per element.
#pragma once

#include <cstdint>

#include "cuda/kernels/common.hpp"

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

}  // namespace rig::kernels
