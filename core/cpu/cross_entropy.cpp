#include "cpu/cross_entropy.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

#include "cpu/kernel_attributes.hpp"
#include "cpu/parallel.hpp"
#include "cpu/vec_math.hpp"

namespace rig::cpu {

namespace {

constexpr std::int64_t kGrain = 8192;  // elements per task

RIG_CPU_KERNEL void forward_rows(const float* x, const std::int64_t* labels, std::int64_t rows,
                                 std::int64_t c, float on, float off, float* loss, float* lse) {
  for (std::int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * c;
    float lanes[16];
    std::fill(lanes, lanes + 16, -std::numeric_limits<float>::infinity());
    std::int64_t i = 0;
    for (; i + 16 <= c; i += 16) {
      for (int l = 0; l < 16; ++l) lanes[l] = xr[i + l] > lanes[l] ? xr[i + l] : lanes[l];
    }
    float m = -std::numeric_limits<float>::infinity();
    for (; i < c; ++i) m = xr[i] > m ? xr[i] : m;
    const float lane_max = vec::tree_max16(lanes);
    m = lane_max > m ? lane_max : m;

    float es[16] = {};
    float xs[16] = {};
    i = 0;
    for (; i + 16 <= c; i += 16) {
      for (int l = 0; l < 16; ++l) {
        es[l] += vec::exp(xr[i + l] - m);
        xs[l] += xr[i + l];
      }
    }
    float e = 0.0F;
    float sx = 0.0F;
    for (; i < c; ++i) {
      e += vec::exp(xr[i] - m);
      sx += xr[i];
    }
    e += vec::tree_sum16(es);
    sx += vec::tree_sum16(xs);
    const float row_lse = m + std::log(e);
    lse[r] = row_lse;
    const float target = xr[labels[r]];
    loss[r] = row_lse - (on - off) * target - (off != 0.0F ? off * sx : 0.0F);
  }
}

RIG_CPU_KERNEL void backward_rows(const float* x, const std::int64_t* labels, const float* lse,
                                  const float* row_scale, float scale, std::int64_t rows,
                                  std::int64_t c, float on, float off, float* dx) {
  for (std::int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * c;
    float* dr = dx + r * c;
    const float s = row_scale != nullptr ? scale * row_scale[r] : scale;
    const float shift = lse[r];
    for (std::int64_t j = 0; j < c; ++j) dr[j] = (vec::exp(xr[j] - shift) - off) * s;
    dr[labels[r]] -= (on - off) * s;
  }
}

}  // namespace

void cross_entropy_forward(const float* x, const std::int64_t* labels, std::int64_t rows,
                           std::int64_t c, float on, float off, float* loss, float* lse) {
  const std::int64_t grain = std::max<std::int64_t>(1, kGrain / std::max<std::int64_t>(1, c));
  parallel_for(rows, grain, [&](std::int64_t begin, std::int64_t end) {
    forward_rows(x + begin * c, labels + begin, end - begin, c, on, off, loss + begin, lse + begin);
  });
}

void cross_entropy_backward(const float* x, const std::int64_t* labels, const float* lse,
                            const float* row_scale, float scale, std::int64_t rows, std::int64_t c,
                            float on, float off, float* dx) {
  const std::int64_t grain = std::max<std::int64_t>(1, kGrain / std::max<std::int64_t>(1, c));
  parallel_for(rows, grain, [&](std::int64_t begin, std::int64_t end) {
    backward_rows(x + begin * c, labels + begin, lse + begin,
                  row_scale == nullptr ? nullptr : row_scale + begin, scale, end - begin, c, on,
                  off, dx + begin * c);
  });
}

}  // namespace rig::cpu
