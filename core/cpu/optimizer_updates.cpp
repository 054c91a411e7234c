#include "cpu/optimizer_updates.hpp"

#include <algorithm>
#include <cmath>

#include "cpu/gradient_source.hpp"
#include "cpu/parallel.hpp"
#include "cpu/simd.hpp"
#include "rig/math/optimizer.hpp"

namespace rig::cpu {

namespace {

// Elements per task: large enough that a wake-up is noise, a multiple of 16.
constexpr std::int64_t kChunk = std::int64_t{1} << 15;

template <int W>
struct AdamKernel {
  using V = simd::Vec<W>;
  using F = typename V::F;

  static RIG_SIMD_INLINE F update(F& pv, const F& gv, F& mv, F& vv, F* vmaxv, const AdamUpdate& a) {
    math::adam_step<V>(pv, gv, mv, vv, vmaxv, a);
    return pv;
  }

  static RIG_SIMD_INLINE void run(std::int64_t begin, std::int64_t end, float* p, const float* grad,
                                  float* m, float* v, float* vmax, AdamUpdate a) {
    std::int64_t i = begin;
    for (; i + W <= end; i += W) {
      F pv = V::load(p + i);
      F mv = V::load(m + i);
      F vv = V::load(v + i);
      F xv = vmax != nullptr ? V::load(vmax + i) : F{};
      pv = update(pv, V::load(grad + i), mv, vv, vmax != nullptr ? &xv : nullptr, a);
      V::store(p + i, pv);
      V::store(m + i, mv);
      V::store(v + i, vv);
      if (vmax != nullptr) V::store(vmax + i, xv);
    }
    const std::int64_t rest = end - i;
    if (rest == 0) return;
    F pv = V::load_partial(p + i, rest, 0.0F);
    F mv = V::load_partial(m + i, rest, 0.0F);
    F vv = V::load_partial(v + i, rest, 0.0F);
    F xv = vmax != nullptr ? V::load_partial(vmax + i, rest, 0.0F) : F{};
    pv = update(pv, V::load_partial(grad + i, rest, 0.0F), mv, vv, vmax != nullptr ? &xv : nullptr,
                a);
    V::store_partial(p + i, pv, rest);
    V::store_partial(m + i, mv, rest);
    V::store_partial(v + i, vv, rest);
    if (vmax != nullptr) V::store_partial(vmax + i, xv, rest);
  }
};

struct ScalarSqrt {
  static float sqrt(float x) { return std::sqrt(x); }
};

// The f32 buffers as they are take whole chunks; gradients to widen, or
// values to publish, go in blocks of kBlock through an L1-sized scratch. Each
// element's arithmetic is the same either way (element-wise updates).
constexpr std::int64_t kBlock = 2048;

template <class Update>
void in_blocks(std::int64_t n, const GradientSource& grad, const PublishedValues& publish,
               const float* p, Update&& update) {
  const bool direct = plain_f32(grad) && publish.data == nullptr;
  const std::int64_t chunks = (n + kChunk - 1) / kChunk;
  parallel_for(chunks, 1, [&](std::int64_t first, std::int64_t last) {
    const std::int64_t begin = first * kChunk, end = std::min(n, last * kChunk);
    if (direct) {
      update(begin, end - begin, static_cast<const float*>(grad.data) + begin);
      return;
    }
    float scratch[kBlock];
    for (std::int64_t b = begin; b < end; b += kBlock) {
      const std::int64_t count = std::min(kBlock, end - b);
      update(b, count, gradients_at(grad, b, count, scratch));
      cpu::publish(publish, b, count, p + b);
    }
  });
}

}  // namespace

void adam_update(std::int64_t n, float* p, const GradientSource& grad, float* m, float* v,
                 float* vmax, const AdamUpdate& args, const PublishedValues& publish) {
  in_blocks(n, grad, publish, p, [&](std::int64_t first, std::int64_t count, const float* g) {
    simd::dispatch<AdamKernel>(std::int64_t{0}, count, p + first, g, m + first, v + first,
                               vmax != nullptr ? vmax + first : nullptr, args);
  });
}

void sgd_update(std::int64_t n, float* p, const GradientSource& grad, float* buffer,
                const SgdUpdate& a, const PublishedValues& publish) {
  in_blocks(n, grad, publish, p, [&](std::int64_t first, std::int64_t count, const float* g) {
    float* q = p + first;
    if (buffer == nullptr) {
      for (std::int64_t i = 0; i < count; ++i) math::sgd_step(q[i], g[i], nullptr, a);
    } else {
      float* b = buffer + first;
      for (std::int64_t i = 0; i < count; ++i) math::sgd_step(q[i], g[i], b + i, a);
    }
  });
}

void novograd_update(float* p_all, const float* g_all, float* m_all, float* ema,
                     const FlatSlice* slices, std::int64_t count, const NovogradUpdate& a) {
  for (std::int64_t l = 0; l < count; ++l) {
    const auto [offset, n] = slices[l];
    float* __restrict p = p_all + offset;
    const float* __restrict g = g_all + offset;
    float* __restrict m = m_all + offset;
    double sum_sq = 0.0;
    for (std::int64_t i = 0; i < n; ++i) sum_sq += static_cast<double>(g[i]) * g[i];
    ema[l] = math::novograd_ema(ema[l], sum_sq, a);
    const math::NovogradFactors factors = math::novograd_factors<ScalarSqrt>(ema[l], a);
    for (std::int64_t i = 0; i < n; ++i) math::novograd_step(p[i], g[i], m[i], factors, a);
  }
}

}  // namespace rig::cpu
