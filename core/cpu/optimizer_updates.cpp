#include "cpu/optimizer_updates.hpp"

#include <algorithm>
#include <cmath>

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

}  // namespace

void adam_update(std::int64_t n, float* p, const float* grad, float* m, float* v, float* vmax,
                 const AdamUpdate& args) {
  const std::int64_t chunks = (n + kChunk - 1) / kChunk;
  parallel_for(chunks, 1, [&](std::int64_t first, std::int64_t last) {
    simd::dispatch<AdamKernel>(first * kChunk, std::min(n, last * kChunk), p, grad, m, v, vmax,
                               args);
  });
}

void sgd_update(std::int64_t n, float* p, const float* grad, float* buffer, const SgdUpdate& a) {
  constexpr std::int64_t kGrain = 1 << 15;
  parallel_for(n, kGrain, [&](std::int64_t begin, std::int64_t end) {
    if (buffer == nullptr) {
      for (std::int64_t i = begin; i < end; ++i) math::sgd_step(p[i], grad[i], nullptr, a);
    } else {
      for (std::int64_t i = begin; i < end; ++i) math::sgd_step(p[i], grad[i], buffer + i, a);
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
