#include "cpu/softmax.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

#include "cpu/kernel_attributes.hpp"
#include "cpu/parallel.hpp"
#include "cpu/vec_math.hpp"

namespace rig::cpu {

namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();
constexpr std::int64_t kGrain = 8192;  // elements per task

// Lane-wise partial results vectorise without reassociating the loop.
inline float max_of(const float* x, std::int64_t n) {
  float lanes[16];
  std::fill(lanes, lanes + 16, kNegInf);
  std::int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    for (int l = 0; l < 16; ++l) lanes[l] = x[i + l] > lanes[l] ? x[i + l] : lanes[l];
  }
  float m = kNegInf;
  for (; i < n; ++i) m = x[i] > m ? x[i] : m;
  const float lane_max = vec::tree_max16(lanes);
  return lane_max > m ? lane_max : m;
}

// y[i] = e^(x[i] - shift); returns the sum (x may alias y).
inline float exp_sum(const float* x, float* y, std::int64_t n, float shift) {
  float lanes[16] = {};
  std::int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    for (int l = 0; l < 16; ++l) {
      const float e = vec::exp(x[i + l] - shift);
      y[i + l] = e;
      lanes[l] += e;
    }
  }
  float s = 0.0F;
  for (; i < n; ++i) {
    y[i] = vec::exp(x[i] - shift);
    s += y[i];
  }
  return s + vec::tree_sum16(lanes);
}

RIG_CPU_KERNEL void softmax_row(const float* x, const std::uint8_t* mask, std::int64_t mask_stride,
                                float* y, std::int64_t n, bool log) {
  const float* src = x;
  if (mask != nullptr) {
    if (mask_stride == 0) {
      if (*mask == 0) {  // the whole row is excluded
        std::fill(y, y + n, log ? kNegInf : 0.0F);
        return;
      }
    } else {
      for (std::int64_t i = 0; i < n; ++i) y[i] = mask[i] != 0 ? x[i] : kNegInf;
      src = y;
    }
  }
  const float m = max_of(src, n);
  if (m == kNegInf) {  // nothing kept
    std::fill(y, y + n, log ? kNegInf : 0.0F);
    return;
  }
  const float s = exp_sum(src, y, n, m);
  if (log) {
    // exp_sum overwrote y with e^(x - m): recompute from x (masked entries -> -inf).
    const float shift = m + std::log(s);
    if (src == x) {
      for (std::int64_t i = 0; i < n; ++i) y[i] = x[i] - shift;
    } else {
      for (std::int64_t i = 0; i < n; ++i) y[i] = mask[i] != 0 ? x[i] - shift : kNegInf;
    }
    return;
  }
  const float inv = 1.0F / s;
  for (std::int64_t i = 0; i < n; ++i) y[i] *= inv;
}

RIG_CPU_KERNEL void softmax_backward_rows(const float* y, const float* g, float* dx,
                                          std::int64_t rows, std::int64_t n, bool log) {
  for (std::int64_t r = 0; r < rows; ++r) {
    const float* yr = y + r * n;
    const float* gr = g + r * n;
    float* dr = dx + r * n;
    float lanes[16] = {};
    std::int64_t i = 0;
    if (log) {
      for (; i + 16 <= n; i += 16) {
        for (int l = 0; l < 16; ++l) lanes[l] += yr[i + l] == kNegInf ? 0.0F : gr[i + l];
      }
      float s = 0.0F;
      for (; i < n; ++i) s += yr[i] == kNegInf ? 0.0F : gr[i];
      s += vec::tree_sum16(lanes);
      for (std::int64_t j = 0; j < n; ++j) {
        dr[j] = yr[j] == kNegInf ? 0.0F : gr[j] - vec::exp(yr[j]) * s;
      }
    } else {
      for (; i + 16 <= n; i += 16) {
        for (int l = 0; l < 16; ++l) lanes[l] += gr[i + l] * yr[i + l];
      }
      float dot = 0.0F;
      for (; i < n; ++i) dot += gr[i] * yr[i];
      dot += vec::tree_sum16(lanes);
      for (std::int64_t j = 0; j < n; ++j) dr[j] = yr[j] * (gr[j] - dot);
    }
  }
}

}  // namespace

void softmax_forward(const StridedPlan<2>& plan, const float* x, const std::uint8_t* mask, float* y,
                     bool log) {
  const std::int64_t n = plan.inner();
  const std::int64_t mask_stride = plan.inner_stride(1);
  const std::int64_t grain = std::max<std::int64_t>(1, kGrain / std::max<std::int64_t>(1, n));
  parallel_for(plan.outer(), grain, [&](std::int64_t begin, std::int64_t end) {
    for_each_row(plan, begin, end, [&](const std::array<std::int64_t, 2>& off) {
      softmax_row(x + off[0], mask == nullptr ? nullptr : mask + off[1], mask_stride, y + off[0], n,
                  log);
    });
  });
}

void softmax_backward(const float* y, const float* g, float* dx, std::int64_t rows, std::int64_t n,
                      bool log) {
  const std::int64_t grain = std::max<std::int64_t>(1, kGrain / std::max<std::int64_t>(1, n));
  parallel_for(rows, grain, [&](std::int64_t begin, std::int64_t end) {
    softmax_backward_rows(y + begin * n, g + begin * n, dx + begin * n, end - begin, n, log);
  });
}

}  // namespace rig::cpu
