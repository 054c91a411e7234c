// Pooling: one plane (one image, one channel) per task, windows clipped to
// the image (padding is never read). Backward passes accumulate within a
// plane, so overlapping windows need no synchronisation.
#include "cpu/pool.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

#include "cpu/kernel_attributes.hpp"
#include "cpu/parallel.hpp"

namespace rig::cpu {

namespace {

// Planes per task: enough work to be worth a thread handoff.
std::int64_t plane_grain(std::int64_t plane_work) {
  return std::max<std::int64_t>(1, 16384 / std::max<std::int64_t>(1, plane_work));
}

struct Window {
  std::int64_t h0, h1, w0, w1;
};

inline Window window(const Pool2dShape& s, std::int64_t oy, std::int64_t ox) {
  const std::int64_t hs = oy * s.stride_h - s.pad_h;
  const std::int64_t ws = ox * s.stride_w - s.pad_w;
  return {std::max<std::int64_t>(hs, 0), std::min(hs + s.kernel_h, s.h),
          std::max<std::int64_t>(ws, 0), std::min(ws + s.kernel_w, s.w)};
}

// Index (within the plane) of the window's maximum, scanning rows then
// columns with PyTorch's rule: a larger value or a NaN takes over.
inline std::int64_t argmax_in(const float* plane, std::int64_t width, const Window& win) {
  float best = -std::numeric_limits<float>::infinity();
  std::int64_t index = win.h0 * width + win.w0;
  for (std::int64_t y = win.h0; y < win.h1; ++y) {
    for (std::int64_t x = win.w0; x < win.w1; ++x) {
      const float v = plane[y * width + x];
      if (v > best || std::isnan(v)) {
        best = v;
        index = y * width + x;
      }
    }
  }
  return index;
}

RIG_CPU_KERNEL void max_planes(const Pool2dShape& s, const float* x, float* y, std::int64_t begin,
                               std::int64_t end) {
  const std::int64_t in_size = s.h * s.w;
  const std::int64_t out_size = s.out_h * s.out_w;
  for (std::int64_t p = begin; p < end; ++p) {
    const float* plane = x + p * in_size;
    float* out = y + p * out_size;
    for (std::int64_t oy = 0; oy < s.out_h; ++oy) {
      for (std::int64_t ox = 0; ox < s.out_w; ++ox) {
        out[oy * s.out_w + ox] = plane[argmax_in(plane, s.w, window(s, oy, ox))];
      }
    }
  }
}

RIG_CPU_KERNEL void max_planes_backward(const Pool2dShape& s, const float* x, const float* dy,
                                        float* dx, std::int64_t begin, std::int64_t end) {
  const std::int64_t in_size = s.h * s.w;
  const std::int64_t out_size = s.out_h * s.out_w;
  for (std::int64_t p = begin; p < end; ++p) {
    const float* plane = x + p * in_size;
    const float* g = dy + p * out_size;
    float* d = dx + p * in_size;
    std::fill(d, d + in_size, 0.0F);
    for (std::int64_t oy = 0; oy < s.out_h; ++oy) {
      for (std::int64_t ox = 0; ox < s.out_w; ++ox) {
        d[argmax_in(plane, s.w, window(s, oy, ox))] += g[oy * s.out_w + ox];
      }
    }
  }
}

RIG_CPU_KERNEL void avg_planes(const Pool2dShape& s, const float* x, float* y, std::int64_t begin,
                               std::int64_t end) {
  const std::int64_t in_size = s.h * s.w;
  const std::int64_t out_size = s.out_h * s.out_w;
  const float inv_area = 1.0F / static_cast<float>(s.kernel_h * s.kernel_w);
  for (std::int64_t p = begin; p < end; ++p) {
    const float* plane = x + p * in_size;
    float* out = y + p * out_size;
    for (std::int64_t oy = 0; oy < s.out_h; ++oy) {
      for (std::int64_t ox = 0; ox < s.out_w; ++ox) {
        const Window win = window(s, oy, ox);
        float total = 0.0F;
        for (std::int64_t r = win.h0; r < win.h1; ++r) {
          for (std::int64_t c = win.w0; c < win.w1; ++c) total += plane[r * s.w + c];
        }
        out[oy * s.out_w + ox] = total * inv_area;
      }
    }
  }
}

RIG_CPU_KERNEL void avg_planes_backward(const Pool2dShape& s, const float* dy, float* dx,
                                        std::int64_t begin, std::int64_t end) {
  const std::int64_t in_size = s.h * s.w;
  const std::int64_t out_size = s.out_h * s.out_w;
  const float inv_area = 1.0F / static_cast<float>(s.kernel_h * s.kernel_w);
  for (std::int64_t p = begin; p < end; ++p) {
    const float* g = dy + p * out_size;
    float* d = dx + p * in_size;
    std::fill(d, d + in_size, 0.0F);
    for (std::int64_t oy = 0; oy < s.out_h; ++oy) {
      for (std::int64_t ox = 0; ox < s.out_w; ++ox) {
        const Window win = window(s, oy, ox);
        const float share = g[oy * s.out_w + ox] * inv_area;
        for (std::int64_t r = win.h0; r < win.h1; ++r) {
          for (std::int64_t c = win.w0; c < win.w1; ++c) d[r * s.w + c] += share;
        }
      }
    }
  }
}

RIG_CPU_KERNEL void plane_means(std::int64_t size, const float* x, float* y, std::int64_t begin,
                                std::int64_t end) {
  constexpr int kLanes = 16;  // independent partial sums GCC can vectorise
  for (std::int64_t p = begin; p < end; ++p) {
    const float* v = x + p * size;
    float lanes[kLanes] = {};
    std::int64_t i = 0;
    for (; i + kLanes <= size; i += kLanes) {
      for (int l = 0; l < kLanes; ++l) lanes[l] += v[i + l];
    }
    float total = 0.0F;
    for (; i < size; ++i) total += v[i];
    for (int l = 0; l < kLanes; ++l) total += lanes[l];
    y[p] = total / static_cast<float>(size);
  }
}

RIG_CPU_KERNEL void plane_fill(std::int64_t size, const float* dy, float* dx, std::int64_t begin,
                               std::int64_t end) {
  const float inv = 1.0F / static_cast<float>(size);
  for (std::int64_t p = begin; p < end; ++p) {
    const float value = dy[p] * inv;
    float* d = dx + p * size;
    for (std::int64_t i = 0; i < size; ++i) d[i] = value;
  }
}

}  // namespace

void max_pool2d_forward(const Pool2dShape& s, const float* x, float* y) {
  parallel_for(s.planes, plane_grain(s.out_h * s.out_w * s.kernel_h * s.kernel_w),
               [&](std::int64_t b, std::int64_t e) { max_planes(s, x, y, b, e); });
}

void max_pool2d_backward(const Pool2dShape& s, const float* x, const float* dy, float* dx) {
  parallel_for(s.planes, plane_grain(s.out_h * s.out_w * s.kernel_h * s.kernel_w),
               [&](std::int64_t b, std::int64_t e) { max_planes_backward(s, x, dy, dx, b, e); });
}

void avg_pool2d_forward(const Pool2dShape& s, const float* x, float* y) {
  parallel_for(s.planes, plane_grain(s.out_h * s.out_w * s.kernel_h * s.kernel_w),
               [&](std::int64_t b, std::int64_t e) { avg_planes(s, x, y, b, e); });
}

void avg_pool2d_backward(const Pool2dShape& s, const float* dy, float* dx) {
  parallel_for(s.planes, plane_grain(s.out_h * s.out_w * s.kernel_h * s.kernel_w),
               [&](std::int64_t b, std::int64_t e) { avg_planes_backward(s, dy, dx, b, e); });
}

void global_avg_pool_forward(std::int64_t planes, std::int64_t size, const float* x, float* y) {
  parallel_for(planes, plane_grain(size),
               [&](std::int64_t b, std::int64_t e) { plane_means(size, x, y, b, e); });
}

void global_avg_pool_backward(std::int64_t planes, std::int64_t size, const float* dy, float* dx) {
  parallel_for(planes, plane_grain(size),
               [&](std::int64_t b, std::int64_t e) { plane_fill(size, dy, dx, b, e); });
}

}  // namespace rig::cpu
