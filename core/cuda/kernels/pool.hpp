// 2-d pooling over NCHW planes or NHWC images (Backend::max_pool2d_* /
// avg_pool2d_* / global_avg_pool_*, core/cpu/pool.cpp). Every entry point is
// one kernel run, no scratch memory; every kernel is deterministic (no
// atomics) and, in the emulator, gives the CPU back end's bits
// (AvgPool2dBackward: see there).
//
// Channels last (PoolGeometry::channels_last, GlobalAvgPool*::channels > 1):
// x is [N, h, w, C] and y [N, out_h, out_w, C], plane p = n C + c. A thread's
// element is then (n, row, col, c) with c innermost, so neighbouring threads
// read neighbouring channels of one pixel (coalesced), and each (n, c) is
// computed in exactly the NCHW order below: NHWC gives the bits of NCHW on
// the transposed data. Max pooling's index is still the offset in the plane
// (row * w + col), laid out as y.
//
//   max_pool2d_forward(s, x, y, index)  -> MaxPool2dForward{s, x, y, index}
//     one thread per output (per 8 channels of an output pixel where
//     packed(), below): the window scanned row by row, a larger value or
//     a NaN takes over (the first maximum, or the last NaN, whose output is the
//     quiet NaN 0x7FC00000); index (may be null) is the int32 offset in the
//     plane (row * w + col); a window of -inf gives its first pixel.
//   max_pool2d_backward(s, index, dy, dx) -> MaxPool2dBackward{s, index, dy, dx}
//     one thread per input pixel (per 8 channels of one where packed())
//     gathering, in output order (rows, then
//     columns, ascending), the dy of the outputs whose window covers it and
//     whose index names it: the CPU's scatter order, the same bits.
//   avg_pool2d_forward(s, x, y)          -> AvgPool2dForward{s, x, y}
//     one thread per output: the window's inside pixels summed row by row,
//     times 1 / (kernel_h kernel_w) (padding counts in the divisor).
//   avg_pool2d_backward(s, dy, dx)       -> AvgPool2dBackward{s, dy, dx}
//     one thread per input pixel: sum = fmaf(dy[o], 1 / area, sum) over the
//     outputs o covering it, rows ascending and, within a row, columns
//     descending (the CPU's order: kernel column ascending). Fused as the
//     CPU's AVX2 / AVX-512 clones fuse it (GCC's default contraction), so the
//     emulator, the GPU and those clones give the same bits; the CPU's
//     baseline clone (no FMA) rounds the product: within an ulp a term.
//   global_avg_pool_forward(planes, size, channels, x, y) -> GlobalAvgPoolForward{...}
//     planes one after another (channels 1): sixteen lanes per plane (half a
//     warp): lane l sums elements l, l + 16, ... below the last multiple of
//     16, lane 0 the tail in order, then the tail plus the sixteen lane sums
//     in lane order, divided by size: the CPU's 16-lane order, the same bits.
//     Channels last: one thread per plane (n, c), threads of neighbouring
//     channels side by side, keeping the sixteen lane sums in registers: the
//     same order, the same bits.
//   global_avg_pool_backward(planes, size, channels, dy, dx) -> GlobalAvgPoolBackward{...}
//     one thread per element of dx: dy[p] * (1 / size).
//
// None has an unfused multiply-add for -fmad to change (AvgPool2dBackward's
// is an explicit fmaf): the same bits under kernel_runs.cu or
// kernel_runs_exact.cu.
// Windows are assumed non-empty (every output window holds at least one input
// pixel, as PyTorch's output sizes guarantee); so does the CPU back end.
#pragma once

#include <cmath>
#include <cstdint>

#include "cuda/kernels/common.hpp"
#include "cuda/kernels/element_type.hpp"
#include "cuda/kernels/packed.hpp"
#include "rig/math/bits.hpp"

namespace rig::kernels {

// Pool2dShape's numbers (backend/kernel_args.hpp), as plain kernel arguments.
struct PoolGeometry {
  std::int64_t planes = 0;  // N * C
  std::int64_t h = 0, w = 0, out_h = 0, out_w = 0;
  std::int64_t kernel_h = 1, kernel_w = 1, stride_h = 1, stride_w = 1, pad_h = 0, pad_w = 0;
  // Channels last: x [planes / channels, h, w, channels], y [planes /
  // channels, out_h, out_w, channels] (NHWC).
  bool channels_last = false;
  std::int64_t channels = 1;

  RIG_HD_INLINE std::int64_t in_size() const { return h * w; }
  RIG_HD_INLINE std::int64_t out_size() const { return out_h * out_w; }
  // Planes interleaved pixel by pixel: C channels last, 1 for NCHW planes.
  RIG_HD_INLINE std::int64_t interleave() const { return channels_last ? channels : 1; }
};

namespace pool_detail {

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

// Element t of an [outer, rows, cols] iteration: plane, row, column.
RIG_HD_INLINE void split3(std::int64_t t, std::int64_t rows, std::int64_t cols, std::int64_t& p,
                          std::int64_t& r, std::int64_t& c) {
  std::int64_t pr = 0;
  divmod(t, cols, pr, c);
  divmod(pr, rows, p, r);
}

// Element t of an [n, rows, cols, ch] array (ch = 1: NCHW, n the plane): its
// image n, row r, column c and channel k.
RIG_HD_INLINE void split4(std::int64_t t, std::int64_t rows, std::int64_t cols, std::int64_t ch,
                          std::int64_t& n, std::int64_t& r, std::int64_t& c, std::int64_t& k) {
  std::int64_t pixel = t;
  k = 0;
  if (ch != 1) divmod(t, ch, pixel, k);
  split3(pixel, rows, cols, n, r, c);
}

// The outputs [lo, hi) along one axis whose window (o * stride - pad, length
// kernel) covers input position i; hi <= lo when none.
RIG_HD_INLINE void covering(std::int64_t i, std::int64_t kernel, std::int64_t stride,
                            std::int64_t pad, std::int64_t outputs, std::int64_t& lo,
                            std::int64_t& hi) {
  // o * stride <= i + pad and o * stride > i + pad - kernel.
  const std::int64_t top = i + pad;  // >= 0
  const std::int64_t first = top - kernel + 1;
  std::int64_t q = 0, r = 0;
  lo = 0;
  if (first > 0) {
    divmod(first, stride, q, r);
    lo = q + (r != 0 ? 1 : 0);
  }
  divmod(top, stride, q, r);
  hi = q + 1 < outputs ? q + 1 : outputs;
}

// The inside part [begin, end) of the window starting at `start`.
RIG_HD_INLINE void window(std::int64_t start, std::int64_t kernel, std::int64_t size,
                          std::int64_t& begin, std::int64_t& end) {
  begin = start > 0 ? start : 0;
  end = start + kernel < size ? start + kernel : size;
}

// Whether max pooling takes kPack channels a thread: channels last, C a
// multiple of kPack, the input, output and index aligned for packs.
RIG_HD_INLINE bool max_pool_packs(const PoolGeometry& s, const void* in, const void* out,
                                  const std::int32_t* index, ElementType type) {
  return s.channels_last && s.channels % kPack == 0 && pack_aligned<kPack>(in, type) &&
         pack_aligned<kPack>(out, type) && pack_aligned<kPack>(index, ElementType::f32);
}

// Runs k.channels<kPack> where k.packed(), else k.channels<1> (uniform over
// the launch).
template <class Kernel, class Ctx>
RIG_HD_INLINE void by_channel_packs(const Kernel& k, Ctx& ctx) {
  if (k.packed()) {
    k.template channels<kPack>(ctx);
  } else {
    k.template channels<1>(ctx);
  }
}

}  // namespace pool_detail

// Max pooling channels last with C % kPack == 0 takes kPack neighbouring
// channels of a pixel a thread, each window pixel's loaded as one pack
// (packed.hpp), where x, y (dy, dx) and the index are aligned for packs:
// packed(). Either way one body (N channels a thread, N = kPack or 1)
// computes each channel as above, so the bits are the same.
struct MaxPool2dForward {
  PoolGeometry s;
  const float* x = nullptr;       // [planes, h, w] (channels last: [N, h, w, C])
  float* y = nullptr;             // [planes, out_h, out_w] (channels last: [N, out_h, out_w, C])
  std::int32_t* index = nullptr;  // as y, or null
  // Of x and y: a 16-bit maximum is one of its inputs, so y is the f32 path's, rounded exactly.
  ElementType type = ElementType::f32;

  RIG_HD bool packed() const { return pool_detail::max_pool_packs(s, x, y, index, type); }

  simt::LaunchShape plan(const simt::DeviceProperties& device) const {
    const int per_thread = packed() ? kPack : 1;
    return plan_grid_stride(device, s.planes * s.out_size(), per_thread, 60);  // ptxas: 60
  }

  template <class Ctx>
  RIG_HD void operator()(Ctx& ctx) const {
    pool_detail::by_channel_packs(*this, ctx);
  }

  // A thread's N channels of one output pixel (N divides the interleave).
  template <int N, class Ctx>
  RIG_HD void channels(Ctx& ctx) const {
    const std::int64_t n = s.planes * s.out_size() / N;
    const std::int64_t ch = s.interleave();
    for (std::int64_t t = global_thread(ctx); t < n; t += grid_threads(ctx)) {
      std::int64_t p = 0, oy = 0, ox = 0, k0 = 0;
      pool_detail::split4(t * N, s.out_h, s.out_w, ch, p, oy, ox, k0);
      std::int64_t r0 = 0, r1 = 0, c0 = 0, c1 = 0;
      pool_detail::window(oy * s.stride_h - s.pad_h, s.kernel_h, s.h, r0, r1);
      pool_detail::window(ox * s.stride_w - s.pad_w, s.kernel_w, s.w, c0, c1);
      const std::int64_t plane = p * s.in_size() * ch + k0;  // pixel 0 of the plane
      float best[N];
      std::int32_t at[N], nan_at[N];
      for (int e = 0; e < N; ++e) {
        best[e] = neg_inf();
        at[e] = static_cast<std::int32_t>(r0 * s.w + c0);
        nan_at[e] = -1;
      }
      for (std::int64_t r = r0; r < r1; ++r) {
        for (std::int64_t c = c0; c < c1; ++c) {
          const auto k = static_cast<std::int32_t>(r * s.w + c);
          const Pack<N> v = load_elements<N>(x, type, plane + k * ch);
          for (int e = 0; e < N; ++e) {
            if (v.v[e] > best[e]) {
              best[e] = v.v[e];
              at[e] = k;
            }
            if (v.v[e] != v.v[e]) nan_at[e] = k;
          }
        }
      }
      Pack<N> out;
      IntPack<N> where;
      for (int e = 0; e < N; ++e) {
        out.v[e] = nan_at[e] >= 0 ? math::bits_float(0x7FC00000U) : best[e];
        where.v[e] = nan_at[e] >= 0 ? nan_at[e] : at[e];
      }
      store_elements<N>(y, type, t * N, out);
      if (index != nullptr) store_int_elements<N>(index, t * N, where);
    }
  }
};

struct MaxPool2dBackward {
  PoolGeometry s;
  const std::int32_t* index = nullptr;  // as dy, from MaxPool2dForward
  const float* dy = nullptr;            // as MaxPool2dForward's y
  float* dx = nullptr;                  // as MaxPool2dForward's x
  // Of dy and dx: summed in f32 in a fixed order, rounded once (the f32 path's bits).
  ElementType type = ElementType::f32;

  RIG_HD bool packed() const { return pool_detail::max_pool_packs(s, dy, dx, index, type); }

  simt::LaunchShape plan(const simt::DeviceProperties& device) const {
    const int per_thread = packed() ? kPack : 1;
    return plan_grid_stride(device, s.planes * s.in_size(), per_thread, 60);  // ptxas: 60
  }

  template <class Ctx>
  RIG_HD void operator()(Ctx& ctx) const {
    pool_detail::by_channel_packs(*this, ctx);
  }

  // A thread's N channels of one input pixel; dy is read only where an
  // index names the pixel.
  template <int N, class Ctx>
  RIG_HD void channels(Ctx& ctx) const {
    const std::int64_t n = s.planes * s.in_size() / N;
    const std::int64_t ch = s.interleave();
    for (std::int64_t t = global_thread(ctx); t < n; t += grid_threads(ctx)) {
      std::int64_t p = 0, iy = 0, ix = 0, k = 0;
      pool_detail::split4(t * N, s.h, s.w, ch, p, iy, ix, k);
      std::int64_t y0 = 0, y1 = 0, x0 = 0, x1 = 0;
      pool_detail::covering(iy, s.kernel_h, s.stride_h, s.pad_h, s.out_h, y0, y1);
      pool_detail::covering(ix, s.kernel_w, s.stride_w, s.pad_w, s.out_w, x0, x1);
      const auto self = static_cast<std::int32_t>(iy * s.w + ix);
      const std::int64_t base = p * s.out_size() * ch + k;  // output 0 of the plane
      Pack<N> sum{};
      for (std::int64_t oy = y0; oy < y1; ++oy) {
        for (std::int64_t ox = x0; ox < x1; ++ox) {
          const std::int64_t o = base + (oy * s.out_w + ox) * ch;
          const IntPack<N> from = load_int_elements<N>(index, o);
          bool named = false;
          for (int e = 0; e < N; ++e) named = named || from.v[e] == self;
          if (!named) continue;
          const Pack<N> g = load_elements<N>(dy, type, o);
          for (int e = 0; e < N; ++e) {
            if (from.v[e] == self) sum.v[e] += g.v[e];
          }
        }
      }
      store_elements<N>(dx, type, t * N, sum);
    }
  }
};

struct AvgPool2dForward {
  PoolGeometry s;
  const float* x = nullptr;  // [planes, h, w] (channels last: [N, h, w, C])
  float* y = nullptr;        // [planes, out_h, out_w] (channels last: [N, out_h, out_w, C])

  simt::LaunchShape plan(const simt::DeviceProperties& device) const {
    return plan_grid_stride(device, s.planes * s.out_size());
  }

  template <class Ctx>
  RIG_HD void operator()(Ctx& ctx) const {
    const std::int64_t n = s.planes * s.out_size();
    const std::int64_t ch = s.interleave();
    const float inv_area = 1.0F / static_cast<float>(s.kernel_h * s.kernel_w);
    for (std::int64_t t = global_thread(ctx); t < n; t += grid_threads(ctx)) {
      std::int64_t p = 0, oy = 0, ox = 0, k = 0;
      pool_detail::split4(t, s.out_h, s.out_w, ch, p, oy, ox, k);
      std::int64_t r0 = 0, r1 = 0, c0 = 0, c1 = 0;
      pool_detail::window(oy * s.stride_h - s.pad_h, s.kernel_h, s.h, r0, r1);
      pool_detail::window(ox * s.stride_w - s.pad_w, s.kernel_w, s.w, c0, c1);
      const float* plane = x + p * s.in_size() * ch + k;  // pixel 0 of the plane
      float sum = 0.0F;
      for (std::int64_t r = r0; r < r1; ++r) {
        for (std::int64_t c = c0; c < c1; ++c) sum += plane[(r * s.w + c) * ch];
      }
      y[t] = sum * inv_area;
    }
  }
};

struct AvgPool2dBackward {
  PoolGeometry s;
  const float* dy = nullptr;  // as AvgPool2dForward's y
  float* dx = nullptr;        // as AvgPool2dForward's x

  simt::LaunchShape plan(const simt::DeviceProperties& device) const {
    return plan_grid_stride(device, s.planes * s.in_size());
  }

  template <class Ctx>
  RIG_HD void operator()(Ctx& ctx) const {
    const std::int64_t n = s.planes * s.in_size();
    const std::int64_t ch = s.interleave();
    const float inv_area = 1.0F / static_cast<float>(s.kernel_h * s.kernel_w);
    for (std::int64_t t = global_thread(ctx); t < n; t += grid_threads(ctx)) {
      std::int64_t p = 0, iy = 0, ix = 0, k = 0;
      pool_detail::split4(t, s.h, s.w, ch, p, iy, ix, k);
      std::int64_t y0 = 0, y1 = 0, x0 = 0, x1 = 0;
      pool_detail::covering(iy, s.kernel_h, s.stride_h, s.pad_h, s.out_h, y0, y1);
      pool_detail::covering(ix, s.kernel_w, s.stride_w, s.pad_w, s.out_w, x0, x1);
      const float* g = dy + p * s.out_size() * ch + k;  // output 0 of the plane
      float sum = 0.0F;
      for (std::int64_t oy = y0; oy < y1; ++oy) {
        for (std::int64_t ox = x1 - 1; ox >= x0; --ox) {
          sum = ::fmaf(g[(oy * s.out_w + ox) * ch], inv_area, sum);
        }
      }
      dx[t] = sum;
    }
  }
};

// Lanes per plane of GlobalAvgPoolForward: the CPU's 16 float lanes.
inline constexpr unsigned kGlobalPoolLanes = 16;

struct GlobalAvgPoolForward {
  const float* x = nullptr;  // [planes / channels, size, channels]
  float* y = nullptr;        // [planes]
  std::int64_t planes = 0, size = 0;
  ElementType type = ElementType::f32;  // of x and y (summed in f32, y rounded once)
  // Planes interleaved element by element: 1 for [planes, size] (NCHW), C for
  // [N, size, C] (NHWC), plane p = n C + c.
  std::int64_t channels = 1;

  simt::LaunchShape plan(const simt::DeviceProperties& device) const {
    return plan_grid_stride(device, channels != 1 ? planes : planes * kGlobalPoolLanes);
  }

  template <class Ctx>
  RIG_HD void operator()(Ctx& ctx) const {
    if (channels != 1) {
      interleaved(ctx);
      return;
    }
    constexpr unsigned kPerWarp = simt::kWarpSize / kGlobalPoolLanes;  // planes per warp
    const unsigned half = ctx.lane() / kGlobalPoolLanes;
    const unsigned l = ctx.lane() % kGlobalPoolLanes;
    const std::int64_t warp = global_thread(ctx) / simt::kWarpSize;
    const std::int64_t warps = grid_threads(ctx) / simt::kWarpSize;
    const std::int64_t full = size - size % kGlobalPoolLanes;
    const auto count = static_cast<float>(size);
    // Warp-uniform loop: every lane reaches the shuffles.
    for (std::int64_t base = warp * kPerWarp; base < planes; base += warps * kPerWarp) {
      const std::int64_t p = base + half;
      const bool active = p < planes;
      float lane_sum = 0.0F, total = 0.0F;
      if (active) {
        const std::int64_t v = p * size;
        for (std::int64_t i = l; i < full; i += kGlobalPoolLanes) {
          lane_sum += load_element(x, type, v + i);
        }
        if (l == 0) {
          for (std::int64_t i = full; i < size; ++i) total += load_element(x, type, v + i);
        }
      }
      for (unsigned k = 0; k < kGlobalPoolLanes; ++k) {
        total += ctx.shfl(lane_sum, half * kGlobalPoolLanes + k);
      }
      if (active && l == 0) store_element(y, type, p, total / count);
    }
  }

  // Channels last: one thread per plane p = n C + c, sixteen lane sums kept
  // in registers (element i goes to lane i % 16 below the last multiple of
  // 16), then the tail, then the lanes in order: the 16-lane order above.
  template <class Ctx>
  RIG_HD void interleaved(Ctx& ctx) const {
    const std::int64_t full = size - size % kGlobalPoolLanes;
    const std::int64_t step = channels * kGlobalPoolLanes;  // 16 elements of a plane
    const auto count = static_cast<float>(size);
    for (std::int64_t p = global_thread(ctx); p < planes; p += grid_threads(ctx)) {
      std::int64_t n = 0, c = 0;
      pool_detail::divmod(p, channels, n, c);
      const std::int64_t v = n * size * channels + c;  // element 0 of the plane
      float lanes[kGlobalPoolLanes] = {};
      for (std::int64_t at = v; at < v + full * channels; at += step) {
        std::int64_t e = at;
        for (unsigned l = 0; l < kGlobalPoolLanes; ++l, e += channels) {
          lanes[l] += load_element(x, type, e);
        }
      }
      float total = 0.0F;
      for (std::int64_t i = full; i < size; ++i) total += load_element(x, type, v + i * channels);
      for (unsigned l = 0; l < kGlobalPoolLanes; ++l) total += lanes[l];
      store_element(y, type, p, total / count);
    }
  }
};

struct GlobalAvgPoolBackward {
  const float* dy = nullptr;  // [planes]
  float* dx = nullptr;        // [planes / channels, size, channels]
  std::int64_t planes = 0, size = 0;
  ElementType type = ElementType::f32;  // of dy and dx
  std::int64_t channels = 1;            // as GlobalAvgPoolForward's

  simt::LaunchShape plan(const simt::DeviceProperties& device) const {
    return plan_grid_stride(device, planes * size);
  }

  template <class Ctx>
  RIG_HD void operator()(Ctx& ctx) const {
    const std::int64_t n = planes * size;
    const float inv = 1.0F / static_cast<float>(size);
    for (std::int64_t t = global_thread(ctx); t < n; t += grid_threads(ctx)) {
      std::int64_t p = 0, i = 0;
      if (channels != 1) {
        std::int64_t pixel = 0, c = 0, image = 0;
        pool_detail::divmod(t, channels, pixel, c);
        pool_detail::divmod(pixel, size, image, i);
        p = image * channels + c;
      } else {
        pool_detail::divmod(t, size, p, i);
      }
      store_element(dx, type, t, load_element(dy, type, p) * inv);
    }
  }
};

}  // namespace rig::kernels
