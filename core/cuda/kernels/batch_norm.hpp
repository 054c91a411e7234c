// Batch normalisation over contiguous f32 (or, through each kernel's `type`,
// f16 / bf16 x, y, dy and dx, computed in f32 and rounded at the store)
// viewed as [n, c, inner]
// (Backend::batch_norm_*, core/cpu/batch_norm.cpp). M = n * inner elements
// per channel, split into chunks of kBatchNormChunk (batch_norm_chunks(M) per
// channel); per-channel reductions run in two stages, a block per (channel,
// chunk) and then a thread per channel combining the chunks in order, so the
// result depends on the shape only, never on the grid or the device.
//
//   batch_norm_stats(s, x, mean, var), scratch batch_norm_stats_scratch(s)
//   floats (part = scratch):
//     1. BatchNormStatsPartial{x, n, c, inner, part, part + c * chunks}:
//        block (channel, chunk): two passes over the chunk (the second from
//        cache), both with simt::block_sum: the mean of the deviations from
//        the chunk's first element x0, then the sum of squared deviations
//        from that mean; writes x0 + mean and that sum. A constant channel
//        gives its value and a variance of exactly 0.
//     2. BatchNormStatsFinish{part, part + c * chunks, n, c, inner, mean, var}:
//        thread per channel, the chunks combined in order in f64 (Chan et
//        al.'s pairwise update); mean and biased variance rounded to f32.
//        M == 0 gives NaNs, as the CPU.
//   batch_norm_prepare(args), no scratch:
//     1. BatchNormPrepareChannels{...args' fields}: thread per channel, the
//        CPU's f32 arithmetic in its order (the same bits).
//   batch_norm_apply(s, x, scale, shift, y), no scratch:
//     1. BatchNormApply{x, scale, shift, y, n, c, inner}: elementwise
//        y = fmaf(x, scale[c], shift[c]): fused, as the CPU's AVX2 / AVX-512
//        clones fuse it (GCC's default contraction), so the emulator, the
//        GPU and those clones give the same bits; the CPU's baseline clone
//        rounds the product (within an ulp of the larger term).
//   batch_norm_apply_relu and batch_norm_backward_relu (a relu after the
//   batch norm, fused): BatchNormApply with `relu`, and BatchNormGradPartial
//   and BatchNormBackwardDx with `relu_y` (relu's backward folded into their
//   reads of dy): the bits of the unfused kernels, two passes fewer.
//   batch_norm_backward(s, x, dy, mean, invstd, gamma, batch_stats, dx,
//   dgamma, dbeta), scratch batch_norm_backward_scratch(s) floats (coef =
//   scratch: a, b, k of c floats each; part = scratch + 3 c):
//     1. only when dgamma || dbeta || (dx && batch_stats) (`sums`):
//        BatchNormGradPartial{x, dy, mean, n, c, inner, part, part + c * chunks}:
//        block (channel, chunk): the chunk's sum(dy) and sum(dy (x - mean)).
//     2. BatchNormGradFinish{part, part + c * chunks, sums, n, c, inner, mean,
//        invstd, gamma, batch_stats, dx != null, dgamma, dbeta, coef}: thread
//        per channel: the chunk sums added in order in f64, rounded to f32;
//        dgamma = sum_gx invstd, dbeta = sum_g (each when not null); for dx
//        the CPU's coefficients a, b, k from them in its f32 order.
//     3. only when dx: BatchNormBackwardDx{x, dy, coef, dx, n, c, inner}:
//        elementwise dx = fmaf(dy, a[c], fmaf(x, b[c], k[c])); without batch
//        statistics (b = k = 0) that is the CPU's rounded dy a[c], bits and
//        all.
//
// Against the CPU (which sums 16 float lanes into f64 per plane): the sums
// differ in rounding order only. Tested: mean within 1e-6 max|x|, var within
// 1e-5 relative, dgamma / dbeta within 1e-6 of the sum of the magnitudes of
// their terms, dx (batch_stats) within 1e-5 max|a| max|dy| (+1e-5 relative;
// the cancellation in dy - mean(dy) - xhat mean(dy xhat)), apply
// within an ulp (bit-equal to fmaf); prepare and dx without batch statistics
// bit-equal. The per-element multiply-adds are written as fmaf (fused under
// -fmad=false too); the per-channel f32 / f64 formulas (prepare, the finish
// kernels) are the CPU's unfused ones: instantiate these kernels with
// -fmad=false (kernel_runs_exact.cu) for the emulator's and the CPU's bits on
// the GPU. Reads are coalesced when inner >= 32; for [N, C] data (inner 1)
// the per-channel reductions read with a stride of c.
#pragma once

#include <cmath>
#include <cstdint>

#include "cuda/kernels/common.hpp"
#include "cuda/kernels/element_type.hpp"
#include "rig/math/bits.hpp"
#include "rig/math/device_math.hpp"
#include "simt/collectives.hpp"

namespace rig::kernels {

// Elements of a channel per block of the partial reductions.
inline constexpr std::int64_t kBatchNormChunk = 16 * kBlockThreads;

// Chunks per channel of M = n * inner elements.
RIG_HD_INLINE std::int64_t batch_norm_chunks(std::int64_t n, std::int64_t inner) {
  return (n * inner + kBatchNormChunk - 1) / kBatchNormChunk;
}

// Scratch floats of batch_norm_stats: two per (channel, chunk).
inline std::int64_t batch_norm_stats_scratch(std::int64_t n, std::int64_t c, std::int64_t inner) {
  return 2 * c * batch_norm_chunks(n, inner);
}

// Scratch floats of batch_norm_backward: the three coefficients per channel,
// then two per (channel, chunk).
inline std::int64_t batch_norm_backward_scratch(std::int64_t n, std::int64_t c,
                                                std::int64_t inner) {
  return 3 * c + 2 * c * batch_norm_chunks(n, inner);
}

namespace batch_norm_detail {

// q = a / b, r = a % b for a >= 0, b > 0; 32-bit division when both fit.
RIG_HD_INLINE void divmod(std::int64_t a, std::int64_t b, std::int64_t& q, std::int64_t& r) {
  if (((a | b) >> 31) == 0) {
    const auto a32 = static_cast<std::uint32_t>(a);
    const auto b32 = static_cast<std::uint32_t>(b);
    const std::uint32_t q32 = a32 / b32;
    q = q32;
    r = a32 - q32 * b32;
  } else {
    q = a / b;
    r = a - q * b;
  }
}

// f(offset in x) for the channel's elements begin, begin + step, ... < end
// (element e of the channel is image e / inner, position e % inner), with one
// division up front and none per element.
template <class F>
RIG_HD_INLINE void for_channel_elements(std::int64_t begin, std::int64_t end, std::int64_t step,
                                        std::int64_t c, std::int64_t inner, std::int64_t ch,
                                        F&& f) {
  if (begin >= end) return;
  std::int64_t i = 0, r = 0, step_i = 0, step_r = 0;
  divmod(begin, inner, i, r);
  divmod(step, inner, step_i, step_r);
  for (std::int64_t e = begin; e < end; e += step) {
    f((i * c + ch) * inner + r);
    r += step_r;
    i += step_i;
    if (r >= inner) {
      r -= inner;
      ++i;
    }
  }
}

// The elements t of [n, c, inner] in an unrolled grid-stride loop (common.hpp's
// unrolled_grid_stride): kUnroll elements per thread and step, a block
// apart, each with its channel tracked without a division per element;
// load(t, channel) for all of a step's elements, then store(t, channel,
// loaded) for each. Plan it with plan_grid_stride(device, n c inner, kUnroll).
template <class Ctx, class Load, class Store>
RIG_HD_INLINE void for_elements_unrolled(Ctx& ctx, std::int64_t n, std::int64_t c,
                                         std::int64_t inner, Load&& load, Store&& store) {
  const std::int64_t total = n * c * inner;
  const std::int64_t block = ctx.block_threads();
  const std::int64_t first =
      static_cast<std::int64_t>(ctx.block_idx().x) * block * kUnroll + ctx.thread_rank();
  if (first >= total) return;
  const std::int64_t step = grid_threads(ctx) * kUnroll;
  std::int64_t r[kUnroll], ch[kUnroll];
  for (int u = 0; u < kUnroll; ++u) {
    std::int64_t plane = 0, dummy = 0;
    divmod(first + u * block, inner, plane, r[u]);
    divmod(plane, c, dummy, ch[u]);
  }
  std::int64_t step_planes = 0, step_r = 0, step_ch = 0, dummy = 0;
  divmod(step, inner, step_planes, step_r);
  divmod(step_planes, c, dummy, step_ch);
  for (std::int64_t base = first; base < total; base += step) {
    decltype(load(base, ch[0])) loaded[kUnroll]{};
    for (int u = 0; u < kUnroll; ++u) {
      if (base + u * block < total) loaded[u] = load(base + u * block, ch[u]);
    }
    for (int u = 0; u < kUnroll; ++u) {
      if (base + u * block < total) store(base + u * block, ch[u], loaded[u]);
      r[u] += step_r;
      ch[u] += step_ch;
      if (r[u] >= inner) {
        r[u] -= inner;
        ++ch[u];
      }
      if (ch[u] >= c) ch[u] -= c;
    }
  }
}

// Block threads of the partial reductions: enough warps for a chunk.
inline unsigned partial_threads(std::int64_t n, std::int64_t inner) {
  const std::int64_t m = n * inner;
  return row_block_threads(m < kBatchNormChunk ? m : kBatchNormChunk);
}

// dy at `at`, or with a relu after the batch norm (relu_y: its output, or
// null) relu's backward of it first: relu_y > 0 ? dy : 0, as UnaryBackward.
RIG_HD_INLINE float grad_at(const float* dy, const float* relu_y, ElementType type,
                            std::int64_t at) {
  if (relu_y != nullptr && !(load_element(relu_y, type, at) > 0.0F)) return 0.0F;
  return load_element(dy, type, at);
}

}  // namespace batch_norm_detail

struct BatchNormStatsPartial {
  const float* x = nullptr;  // [n, c, inner]
  std::int64_t n = 0, c = 0, inner = 1;
  float* part_mean = nullptr;           // [c, chunks]
  float* part_m2 = nullptr;             // [c, chunks]
  ElementType type = ElementType::f32;  // of x

  simt::LaunchShape plan(const simt::DeviceProperties& device) const {
    return simt::plan_rows(
        device, c * batch_norm_chunks(n, inner),
        simt::KernelResources{batch_norm_detail::partial_threads(n, inner), 0, 32});
  }

  template <class Ctx>
  RIG_HD void operator()(Ctx& ctx) const {
    const std::int64_t chunks = batch_norm_chunks(n, inner);
    const std::int64_t row = block_row(ctx);
    if (row >= c * chunks) return;
    std::int64_t ch = 0, j = 0;
    batch_norm_detail::divmod(row, chunks, ch, j);
    const std::int64_t m = n * inner;
    const std::int64_t lo = j * kBatchNormChunk;
    const std::int64_t hi = lo + kBatchNormChunk < m ? lo + kBatchNormChunk : m;
    const std::int64_t first = lo + ctx.thread_rank();
    const std::int64_t step = ctx.block_threads();
    // Deviations from the chunk's first element, so a constant chunk gives
    // exactly its value and 0 (and large means lose nothing to the sums).
    std::int64_t i0 = 0, r0 = 0;
    batch_norm_detail::divmod(lo, inner, i0, r0);
    const float shift = load_element(x, type, (i0 * c + ch) * inner + r0);
    const float* xs = x;  // the lambdas capture locals, not the kernel's `this`
    const ElementType ty = type;
    float s = 0.0F;
    batch_norm_detail::for_channel_elements(first, hi, step, c, inner, ch, [&](std::int64_t at) {
      s += load_element(xs, ty, at) - shift;
    });
    const float dev = simt::block_sum(ctx, s) / static_cast<float>(hi - lo);
    float q = 0.0F;
    batch_norm_detail::for_channel_elements(first, hi, step, c, inner, ch, [&](std::int64_t at) {
      const float d = (load_element(xs, ty, at) - shift) - dev;
      q = ::fmaf(d, d, q);
    });
    const float m2 = simt::block_sum(ctx, q);
    if (ctx.thread_rank() == 0) {
      part_mean[row] = shift + dev;
      part_m2[row] = m2;
    }
  }
};

struct BatchNormStatsFinish {
  const float* part_mean = nullptr;  // [c, chunks]
  const float* part_m2 = nullptr;    // [c, chunks]
  std::int64_t n = 0, c = 0, inner = 1;
  float* mean = nullptr;  // [c]
  float* var = nullptr;   // [c]

  simt::LaunchShape plan(const simt::DeviceProperties& device) const {
    return plan_grid_stride(device, c);
  }

  template <class Ctx>
  RIG_HD void operator()(Ctx& ctx) const {
    const std::int64_t m = n * inner;
    const std::int64_t chunks = batch_norm_chunks(n, inner);
    for (std::int64_t ch = global_thread(ctx); ch < c; ch += grid_threads(ctx)) {
      if (m == 0) {
        mean[ch] = math::bits_float(0x7FC00000U);
        var[ch] = math::bits_float(0x7FC00000U);
        continue;
      }
      double mu = 0.0, m2 = 0.0, count = 0.0;
      for (std::int64_t j = 0; j < chunks; ++j) {
        const std::int64_t left = m - j * kBatchNormChunk;
        const auto nb = static_cast<double>(left < kBatchNormChunk ? left : kBatchNormChunk);
        const double total = count + nb;
        const double delta = static_cast<double>(part_mean[ch * chunks + j]) - mu;
        mu += delta * (nb / total);
        m2 += static_cast<double>(part_m2[ch * chunks + j]) + delta * delta * (count * nb / total);
        count = total;
      }
      mean[ch] = static_cast<float>(mu);
      var[ch] = static_cast<float>(m2 / count);
    }
  }
};

// BatchNormPrepare's fields (backend/kernel_args.hpp) as plain arguments.
struct BatchNormPrepareChannels {
  std::int64_t c = 0;
  bool training = true;
  float momentum = 0.1F, eps = 1e-5F, unbias = 1.0F;
  float* mean = nullptr;
  const float* var = nullptr;  // training only
  float* running_mean = nullptr;
  float* running_var = nullptr;
  const float* gamma = nullptr;  // [c] of param_type, or null (1)
  const float* beta = nullptr;   // [c] of param_type, or null (0)
  float* invstd = nullptr;
  float* scale = nullptr;
  float* shift = nullptr;
  ElementType param_type = ElementType::f32;

  simt::LaunchShape plan(const simt::DeviceProperties& device) const {
    return plan_grid_stride(device, c);
  }

  template <class Ctx>
  RIG_HD void operator()(Ctx& ctx) const {
    using M = math::DeviceMath;
    for (std::int64_t ch = global_thread(ctx); ch < c; ch += grid_threads(ctx)) {
      float v = 0.0F;
      if (training) {
        v = var[ch];
        if (running_mean != nullptr) {
          running_mean[ch] = (1.0F - momentum) * running_mean[ch] + momentum * mean[ch];
        }
        if (running_var != nullptr) {
          running_var[ch] = (1.0F - momentum) * running_var[ch] + momentum * v * unbias;
        }
      } else {
        mean[ch] = running_mean[ch];
        v = running_var[ch];
      }
      const float is = 1.0F / M::sqrt(v + eps);
      invstd[ch] = is;
      const float k = (gamma != nullptr ? load_element(gamma, param_type, ch) : 1.0F) * is;
      scale[ch] = k;
      shift[ch] = (beta != nullptr ? load_element(beta, param_type, ch) : 0.0F) - mean[ch] * k;
    }
  }
};

struct BatchNormApply {
  const float* x = nullptr;      // [n, c, inner]
  const float* scale = nullptr;  // [c]
  const float* shift = nullptr;  // [c]
  float* y = nullptr;            // [n, c, inner]
  std::int64_t n = 0, c = 0, inner = 1;
  ElementType type = ElementType::f32;  // of x and y
  // y = relu(y as stored), relu's rule (x < 0 ? 0 : x, NaN kept): the bits
  // of this kernel and then UnaryForward's relu, in one pass.
  bool relu = false;

  simt::LaunchShape plan(const simt::DeviceProperties& device) const {
    return plan_grid_stride(device, n * c * inner, kUnroll, 48);  // ptxas: 48
  }

  template <class Ctx>
  RIG_HD void operator()(Ctx& ctx) const {
    const float* xs = x;  // the lambdas capture locals, not the kernel's `this`
    const float* sc = scale;
    const float* sh = shift;
    float* ys = y;
    const ElementType ty = type;
    const bool rl = relu;
    batch_norm_detail::for_elements_unrolled(
        ctx, n, c, inner, [&](std::int64_t t, std::int64_t) { return load_element(xs, ty, t); },
        [&](std::int64_t t, std::int64_t ch, float xv) {
          const float v = ::fmaf(xv, sc[ch], sh[ch]);
          store_element(ys, ty, t, rl ? relu_of_stored(ty, v) : v);
        });
  }
};

struct BatchNormGradPartial {
  const float* x = nullptr;     // [n, c, inner]
  const float* dy = nullptr;    // [n, c, inner]
  const float* mean = nullptr;  // [c]
  std::int64_t n = 0, c = 0, inner = 1;
  float* part_g = nullptr;              // [c, chunks]: sum(dy)
  float* part_gx = nullptr;             // [c, chunks]: sum(dy (x - mean))
  ElementType type = ElementType::f32;  // of x, dy and relu_y
  // The forward's relu output where a relu followed (BatchNormApply::relu):
  // dy where relu_y > 0, else 0 (relu's backward, folded in). Or null.
  const float* relu_y = nullptr;

  simt::LaunchShape plan(const simt::DeviceProperties& device) const {
    return simt::plan_rows(
        device, c * batch_norm_chunks(n, inner),
        simt::KernelResources{batch_norm_detail::partial_threads(n, inner), 0, 32});
  }

  template <class Ctx>
  RIG_HD void operator()(Ctx& ctx) const {
    const std::int64_t chunks = batch_norm_chunks(n, inner);
    const std::int64_t row = block_row(ctx);
    if (row >= c * chunks) return;
    std::int64_t ch = 0, j = 0;
    batch_norm_detail::divmod(row, chunks, ch, j);
    const std::int64_t m = n * inner;
    const std::int64_t lo = j * kBatchNormChunk;
    const std::int64_t hi = lo + kBatchNormChunk < m ? lo + kBatchNormChunk : m;
    const float mu = mean[ch];
    const float* xs = x;  // the lambda captures locals, not the kernel's `this`
    const float* gs = dy;
    const float* ry = relu_y;
    const ElementType ty = type;
    float sg = 0.0F, sgx = 0.0F;
    batch_norm_detail::for_channel_elements(
        lo + ctx.thread_rank(), hi, ctx.block_threads(), c, inner, ch, [&](std::int64_t at) {
          const float g = batch_norm_detail::grad_at(gs, ry, ty, at);
          sg += g;
          sgx = ::fmaf(g, load_element(xs, ty, at) - mu, sgx);
        });
    sg = simt::block_sum(ctx, sg);
    sgx = simt::block_sum(ctx, sgx);
    if (ctx.thread_rank() == 0) {
      part_g[row] = sg;
      part_gx[row] = sgx;
    }
  }
};

struct BatchNormGradFinish {
  const float* part_g = nullptr;   // [c, chunks]; read only when sums
  const float* part_gx = nullptr;  // [c, chunks]; read only when sums
  bool sums = true;                // BatchNormGradPartial ran
  std::int64_t n = 0, c = 0, inner = 1;
  const float* mean = nullptr;    // [c]
  const float* invstd = nullptr;  // [c]
  const float* gamma = nullptr;   // [c] of param_type, or null (1)
  bool batch_stats = true;
  bool dx = true;           // write the coefficients of BatchNormBackwardDx
  float* dgamma = nullptr;  // [c] of param_type, or null
  float* dbeta = nullptr;   // [c] of param_type, or null
  float* coef = nullptr;    // [3 c]: a, b, k
  // gamma, dgamma and dbeta: f32, or a 16-bit model's parameters and their
  // gradients (rounded once, at the store).
  ElementType param_type = ElementType::f32;

  simt::LaunchShape plan(const simt::DeviceProperties& device) const {
    return plan_grid_stride(device, c);
  }

  template <class Ctx>
  RIG_HD void operator()(Ctx& ctx) const {
    const std::int64_t chunks = batch_norm_chunks(n, inner);
    const auto count = static_cast<float>(n * inner);
    for (std::int64_t ch = global_thread(ctx); ch < c; ch += grid_threads(ctx)) {
      float sum_g = 0.0F, sum_gx = 0.0F;
      if (sums) {
        double a = 0.0, b = 0.0;
        for (std::int64_t j = 0; j < chunks; ++j) {
          a += part_g[ch * chunks + j];
          b += part_gx[ch * chunks + j];
        }
        sum_g = static_cast<float>(a);
        sum_gx = static_cast<float>(b);
      }
      const float is = invstd[ch];
      if (dgamma != nullptr) store_element(dgamma, param_type, ch, sum_gx * is);
      if (dbeta != nullptr) store_element(dbeta, param_type, ch, sum_g);
      if (!dx) continue;
      const float a = (gamma != nullptr ? load_element(gamma, param_type, ch) : 1.0F) * is;
      float b = 0.0F, k = 0.0F;
      if (batch_stats) {
        const float slope = a * is * is * sum_gx / count;
        b = -slope;
        k = slope * mean[ch] - a * sum_g / count;
      }
      coef[ch] = a;
      coef[c + ch] = b;
      coef[2 * c + ch] = k;
    }
  }
};

struct BatchNormBackwardDx {
  const float* x = nullptr;     // [n, c, inner]
  const float* dy = nullptr;    // [n, c, inner]
  const float* coef = nullptr;  // [3 c] from BatchNormGradFinish
  float* dx = nullptr;          // [n, c, inner]
  std::int64_t n = 0, c = 0, inner = 1;
  ElementType type = ElementType::f32;  // of x, dy, dx and relu_y
  const float* relu_y = nullptr;        // as BatchNormGradPartial's

  simt::LaunchShape plan(const simt::DeviceProperties& device) const {
    return plan_grid_stride(device, n * c * inner, kUnroll, 72);  // ptxas: 72
  }

  template <class Ctx>
  RIG_HD void operator()(Ctx& ctx) const {
    struct Loaded {
      float g, x;
    };
    const float* xs = x;  // the lambdas capture locals, not the kernel's `this`
    const float* gs = dy;
    const float* a = coef;
    const float* b = coef + c;
    const float* k = coef + 2 * c;
    float* out = dx;
    const float* ry = relu_y;
    const ElementType ty = type;
    batch_norm_detail::for_elements_unrolled(
        ctx, n, c, inner,
        [&](std::int64_t t, std::int64_t) {
          return Loaded{batch_norm_detail::grad_at(gs, ry, ty, t), load_element(xs, ty, t)};
        },
        [&](std::int64_t t, std::int64_t ch, const Loaded& v) {
          store_element(out, ty, t, ::fmaf(v.g, a[ch], ::fmaf(v.x, b[ch], k[ch])));
        });
  }
};

}  // namespace rig::kernels
