// The mixed-precision unscale and overflow check (Backend::unscale,
// core/cpu/unscale.cpp): master[i] = widen(src[i]) * scale (master may be src
// itself for f32, or null), amax = max |master[i]| or +inf when any is inf or
// NaN (the maximum of math::abs_bits, an integer reduction), and the sum of
// master[i]^2 in f64 for the gradient norm. Two stages with a fixed order, so
// the results do not depend on scheduling:
//   UnscalePartials: grid-stride over chunks of kPack elements (thread t
//     takes chunks t, t + threads, ...: packs where aligned, the same order
//     either way), each block's maximum and sum into
//     partial_amax_bits[block] and partial_sum_squares[block] (grid.x slots);
//   UnscaleFinish: one block over those partials, in order.
#pragma once

#include <cstdint>

#include "cuda/kernels/common.hpp"
#include "cuda/kernels/element_type.hpp"
#include "cuda/kernels/packed.hpp"
#include "rig/math/bits.hpp"
#include "simt/collectives.hpp"

namespace rig::kernels {

struct UnscalePartials {
  std::int64_t n = 0;
  ElementType src_type = ElementType::f32;
  const void* src = nullptr;
  float* master = nullptr;  // or null (nothing written); may be src for f32
  float scale = 1.0F;
  std::uint32_t* partial_amax_bits = nullptr;  // [grid.x of the plan], or null: not wanted
  double* partial_sum_squares = nullptr;       // [grid.x of the plan] or null

  // Chunks of kPack elements moved as packs (packed.hpp) where src and
  // master allow; the same chunks element by element otherwise.
  RIG_HD bool packed() const {
    return pack_aligned<kPack>(src, src_type) && pack_aligned<kPack>(master, ElementType::f32);
  }

  simt::LaunchShape plan(const simt::DeviceProperties& device) const {
    return plan_grid_stride(device, n, kPack, 46);  // ptxas: 46
  }

  template <class Ctx>
  RIG_HD void operator()(Ctx& ctx) const {
    std::uint32_t bits = 0;
    double squares = 0.0;
    const bool pack = packed();
    for_chunks(n, global_thread(ctx), grid_threads(ctx), [&](std::int64_t q, int valid) {
      Pack<kPack> g = load_row_chunk(src, src_type, 0, q, valid, pack);
      for (int e = 0; e < kPack; ++e) {
        if (e >= valid) continue;
        g.v[e] *= scale;
        const std::uint32_t b = math::abs_bits(g.v[e]);
        bits = b > bits ? b : bits;
        squares += static_cast<double>(g.v[e]) * static_cast<double>(g.v[e]);
      }
      if (master != nullptr) store_row_chunk(master, ElementType::f32, 0, q, valid, pack, g);
    });
    // Nothing to reduce where no statistic is wanted (uniform over the launch).
    if (partial_amax_bits == nullptr && partial_sum_squares == nullptr) return;
    bits = simt::block_max(ctx, bits);
    if (partial_sum_squares != nullptr) squares = simt::block_sum(ctx, squares);
    if (ctx.thread_rank() == 0) {
      if (partial_amax_bits != nullptr) partial_amax_bits[ctx.block_idx().x] = bits;
      if (partial_sum_squares != nullptr) partial_sum_squares[ctx.block_idx().x] = squares;
    }
  }
};

// One block; partials = grid.x of UnscalePartials' launch (0 when n was 0:
// amax = 0, sum = 0).
struct UnscaleFinish {
  const std::uint32_t* partial_amax_bits = nullptr;
  const double* partial_sum_squares = nullptr;  // not null when sum_squares is not
  std::int64_t partials = 0;
  float* amax = nullptr;          // one f32 of the device
  double* sum_squares = nullptr;  // one f64 of the device, or null

  simt::LaunchShape plan(const simt::DeviceProperties&) const {
    return simt::LaunchShape{{1, 1, 1}, {kBlockThreads, 1, 1}, 0};
  }

  template <class Ctx>
  RIG_HD void operator()(Ctx& ctx) const {
    std::uint32_t bits = 0;
    double squares = 0.0;
    const bool sums = sum_squares != nullptr;
    for (std::int64_t b = ctx.thread_rank(); b < partials; b += ctx.block_threads()) {
      bits = partial_amax_bits[b] > bits ? partial_amax_bits[b] : bits;
      if (sums) squares += partial_sum_squares[b];
    }
    bits = simt::block_max(ctx, bits);
    if (sums) squares = simt::block_sum(ctx, squares);
    if (ctx.thread_rank() == 0) {
      *amax = math::amax_of_abs_bits(bits);
      if (sums) *sum_squares = squares;
    }
  }
};

}  // namespace rig::kernels
