// A kernel body that exercises every member of the execution context, run
// on the GPU (test_gpu_context.cu) and in the emulator (context_probe.cpp).
#pragma once

#include <cstdint>
#include <vector>

#include "simt/collectives.hpp"
#include "simt/context.hpp"

namespace rig_gpu_test {

using rig::simt::Dim3;

// Each thread writes its ranks and a lane shuffle; each block its sums and maxima.
struct ContextProbe {
  const float* x;
  std::uint32_t* ids;  // per thread: rank, lane, warp, block linear index
  float* shuffled;     // per thread: shfl_xor 5, shfl_down 3, shfl from lane 7
  float* reduced;      // per block: warp 0's warp_sum, block_sum, block_max, shared round trip

  template <class Ctx>
  RIG_HD void operator()(Ctx& ctx) const {
    const Dim3 b = ctx.block_idx();
    const Dim3 g = ctx.grid_dim();
    const unsigned block = b.x + g.x * (b.y + g.y * b.z);
    const unsigned t = block * ctx.block_threads() + ctx.thread_rank();
    ids[4 * t] = ctx.thread_rank();
    ids[4 * t + 1] = ctx.lane();
    ids[4 * t + 2] = ctx.warp();
    ids[4 * t + 3] = block;
    const float v = x[t];
    shuffled[3 * t] = ctx.shfl_xor(v, 5U);
    shuffled[3 * t + 1] = ctx.shfl_down(v, 3U);
    shuffled[3 * t + 2] = ctx.shfl(v, 7U);
    const float ws = rig::simt::warp_sum(ctx, v);
    const float bs = rig::simt::block_sum(ctx, v);
    const float bm = rig::simt::block_max(ctx, v);
    float* s = ctx.template shared<float>();
    s[ctx.block_threads() - 1 - ctx.thread_rank()] = v;
    ctx.sync();
    const float mirrored = s[ctx.thread_rank()];
    if (ctx.thread_rank() == 0) {
      reduced[4 * block] = ws;
      reduced[4 * block + 1] = bs;
      reduced[4 * block + 2] = bm;
      reduced[4 * block + 3] = mirrored;
    }
  }
};

// The probe's outputs for `x` from the emulator (host code: a .cpp, so nvcc
// never instantiates the body with the host-only emulator context).
struct ProbeOutputs {
  std::vector<std::uint32_t> ids;
  std::vector<float> shuffled, reduced;
};
ProbeOutputs emulate_context_probe(const rig::simt::LaunchShape& shape,
                                   const std::vector<float>& x);

}  // namespace rig_gpu_test
