// NovoGrad (Backend::novograd_update, OpenSeq2Seq's optimizer): one block per
// parameter slice of the flat buffers. The block sums the slice's squared
// gradients in f64 (simt::block_sum's fixed order), moves the slice's second
// moment, then updates every element with the shared element math of
// rig/math/optimizer.hpp, as the CPU back end does. The CPU sums the squares
// in index order, so the f32 moment can differ from it in its last bit on
// rare slices; everything after it is the same math.
// One block per slice keeps the update in a single launch; a slice of n
// elements takes n / 256 steps of one block, so an embedding of millions of
// elements is the launch's long pole.
#pragma once

#include <cstdint>

#include "cuda/kernels/common.hpp"
#include "rig/math/device_math.hpp"
#include "rig/math/optimizer.hpp"
#include "rig/op_types.hpp"
#include "simt/collectives.hpp"

namespace rig::kernels {

struct NovogradUpdateKernel {
  float* p = nullptr;
  const float* grad = nullptr;
  float* m = nullptr;
  float* ema = nullptr;               // one f32 per slice
  const FlatSlice* slices = nullptr;  // [count], in device memory
  std::int64_t count = 0;
  NovogradUpdate args{};

  simt::LaunchShape plan(const simt::DeviceProperties& device) const {
    return simt::plan_rows(device, count, simt::KernelResources{kBlockThreads, 0, 32});
  }

  template <class Ctx>
  RIG_HD void operator()(Ctx& ctx) const {
    const std::int64_t slice = block_row(ctx);
    if (slice >= count) return;  // the whole block: no barrier is left behind
    const FlatSlice s = slices[slice];
    const float old_ema = ema[slice];  // read by every thread before thread 0 writes it
    double sum = 0.0;
    for (std::int64_t i = ctx.thread_rank(); i < s.size; i += ctx.block_threads()) {
      const double g = grad[s.offset + i];
      sum += g * g;
    }
    sum = simt::block_sum(ctx, sum);
    const float moment = math::novograd_ema(old_ema, sum, args);
    if (ctx.thread_rank() == 0) ema[slice] = moment;
    const math::NovogradFactors factors = math::novograd_factors<math::DeviceMath>(moment, args);
    for (std::int64_t i = ctx.thread_rank(); i < s.size; i += ctx.block_threads()) {
      const std::int64_t e = s.offset + i;
      math::novograd_step(p[e], grad[e], m[e], factors, args);
    }
  }
};

}  // namespace rig::kernels
