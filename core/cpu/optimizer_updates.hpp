// Fused optimizer updates over flat f32 buffers: one pass, SIMD over the
// elements, threaded over the pool. Every element goes through the same
// vector instructions (the tail as a partial vector), so the result does not
// depend on the thread count.
#pragma once

#include <cstdint>

#include "rig/op_types.hpp"

namespace rig::cpu {

// ops::adam_update's and sgd_update's formulas over n elements (vmax null
// without AMSGrad, buffer null without momentum), the gradients read from
// `grad` (unscaled as read) and the new values also written to `publish`
// (gradient_source.hpp); NovoGrad per slice, as rig/op_types.hpp defines them.
void adam_update(std::int64_t n, float* p, const GradientSource& grad, float* m, float* v,
                 float* vmax, const AdamUpdate& args, const PublishedValues& publish);
void sgd_update(std::int64_t n, float* p, const GradientSource& grad, float* buffer,
                const SgdUpdate& args, const PublishedValues& publish);
void novograd_update(float* p, const float* grad, float* m, float* ema, const FlatSlice* slices,
                     std::int64_t count, const NovogradUpdate& args);

}  // namespace rig::cpu
