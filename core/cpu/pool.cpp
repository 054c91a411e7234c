// Pooling, one plane (one image, one channel) per task; padding is never
// read. Max: per output, a scan of its window with selects instead of
// branches (a data-dependent branch mispredicts half the time on random data:
// 5.5 ms against 1.0 ms forward for [128,32,14,14], 3x3 stride 2, two
// threads), in PyTorch's row-major order so ties and NaNs resolve as in
// PyTorch; the argmax is recorded for backward (4 bytes an output), which then
// is a scatter. Average: each output row is built as a vector over its
// columns, out[ox] += in[r][ox * stride - pad + kx] over the columns whose
// input is inside the image. Backward passes accumulate within a plane, so
// overlapping windows need no synchronisation.
//
// Channels last (NHWC): one task per image and block of up to 64 channels,
// the innermost loops running over the block's channels (contiguous, so
// vectorised) and every channel seeing the NCHW code's order: the window in
// row-major order for max and average, backward's accumulation in the same
// (output row, kernel column) order, global pooling's 16 lanes. NHWC gives
// the bits of NCHW on the transposed data, and the CUDA kernels' bits
// (core/cuda/kernels/pool.hpp).
#include "cpu/pool.hpp"

#include <algorithm>
#include <limits>
#include <vector>

#include "cpu/parallel.hpp"
#include "rig/kernel_attributes.hpp"

namespace rig::cpu {

namespace {

// Planes per task: enough work to be worth a thread handoff.
std::int64_t plane_grain(std::int64_t plane_work) {
  return std::max<std::int64_t>(1, 16384 / std::max<std::int64_t>(1, plane_work));
}

// The output columns [lo, hi) whose input column ox * stride - pad + kx is inside [0, w).
struct Columns {
  std::int64_t lo, hi;
};

inline Columns columns(const Pool2dShape& s, std::int64_t kx) {
  const std::int64_t offset = kx - s.pad_w;  // input column of output column 0
  const std::int64_t lo = offset >= 0 ? 0 : (-offset + s.stride_w - 1) / s.stride_w;
  const std::int64_t last = s.w - 1 - offset;  // ox * stride <= last
  const std::int64_t hi = last < 0 ? 0 : std::min(s.out_w, last / s.stride_w + 1);
  return {lo, std::max(lo, hi)};
}

// Input rows [r0, r1) of output row oy.
inline void rows_of(const Pool2dShape& s, std::int64_t oy, std::int64_t& r0, std::int64_t& r1) {
  const std::int64_t start = oy * s.stride_h - s.pad_h;
  r0 = std::max<std::int64_t>(start, 0);
  r1 = std::min(start + s.kernel_h, s.h);
}

// The inside columns [c0, c1) of output column ox's window.
inline void columns_of(const Pool2dShape& s, std::int64_t ox, std::int64_t& c0, std::int64_t& c1) {
  const std::int64_t start = ox * s.stride_w - s.pad_w;
  c0 = std::max<std::int64_t>(start, 0);
  c1 = std::min(start + s.kernel_w, s.w);
}

// One output row of the max and of its (plane) index with PyTorch's rule
// (scanning the window row by row, a larger value or a NaN takes over): the
// first maximum, or the last NaN if there is one. Selects, not branches.
[[gnu::always_inline]] inline void max_row(const Pool2dShape& s, const float* plane,
                                           std::int64_t oy, float* best_out,
                                           std::int32_t* index_out) {
  std::int64_t r0 = 0, r1 = 0;
  rows_of(s, oy, r0, r1);
  for (std::int64_t ox = 0; ox < s.out_w; ++ox) {
    const std::int64_t start = ox * s.stride_w - s.pad_w;
    const std::int64_t c0 = std::max<std::int64_t>(start, 0);
    const std::int64_t c1 = std::min(start + s.kernel_w, s.w);
    float best = -std::numeric_limits<float>::infinity();
    auto index = static_cast<std::int32_t>(r0 * s.w + c0);  // a window of -inf: its first pixel
    std::int32_t nan_index = -1;
    for (std::int64_t r = r0; r < r1; ++r) {
      for (std::int64_t c = c0; c < c1; ++c) {
        const auto at = static_cast<std::int32_t>(r * s.w + c);
        const float v = plane[at];
        const bool take = v > best;
        best = take ? v : best;
        index = take ? at : index;
        nan_index = v != v ? at : nan_index;
      }
    }
    best_out[ox] = nan_index >= 0 ? std::numeric_limits<float>::quiet_NaN() : best;
    index_out[ox] = nan_index >= 0 ? nan_index : index;
  }
}

// columns(s, kx) for every kx (integer division is too slow for the inner
// loops), in a per-thread table that stays allocated.
const Columns* column_table(const Pool2dShape& s) {
  thread_local std::vector<Columns> table;
  table.resize(static_cast<std::size_t>(s.kernel_w));
  for (std::int64_t kx = 0; kx < s.kernel_w; ++kx) {
    table[static_cast<std::size_t>(kx)] = columns(s, kx);
  }
  return table.data();
}

// A per-thread row of indices (out_w entries) when the caller keeps none.
std::int32_t* index_buffer(std::int64_t n) {
  thread_local std::vector<std::int32_t> buffer;
  if (buffer.size() < static_cast<std::size_t>(n)) buffer.resize(static_cast<std::size_t>(n));
  return buffer.data();
}

// `index` null: the argmax rows go to a scratch row and are dropped.
RIG_CPU_KERNEL void max_planes(const Pool2dShape& s, const float* x, float* y, std::int32_t* index,
                               std::int32_t* scratch, std::int64_t begin, std::int64_t end) {
  const std::int64_t out_size = s.out_h * s.out_w;
  for (std::int64_t p = begin; p < end; ++p) {
    const float* plane = x + p * s.h * s.w;
    for (std::int64_t oy = 0; oy < s.out_h; ++oy) {
      const std::int64_t at = p * out_size + oy * s.out_w;
      max_row(s, plane, oy, y + at, index != nullptr ? index + at : scratch);
    }
  }
}

RIG_CPU_KERNEL void max_planes_backward(const Pool2dShape& s, const std::int32_t* index,
                                        const float* dy, float* dx, std::int64_t begin,
                                        std::int64_t end) {
  const std::int64_t in_size = s.h * s.w;
  const std::int64_t out_size = s.out_h * s.out_w;
  for (std::int64_t p = begin; p < end; ++p) {
    const float* g = dy + p * out_size;
    const std::int32_t* at = index + p * out_size;
    float* d = dx + p * in_size;
    std::fill(d, d + in_size, 0.0F);
    for (std::int64_t o = 0; o < out_size; ++o) d[at[o]] += g[o];
  }
}

RIG_CPU_KERNEL void avg_planes(const Pool2dShape& s, const Columns* cols, const float* x, float* y,
                               std::int64_t begin, std::int64_t end) {
  const float inv_area = 1.0F / static_cast<float>(s.kernel_h * s.kernel_w);
  for (std::int64_t p = begin; p < end; ++p) {
    const float* plane = x + p * s.h * s.w;
    for (std::int64_t oy = 0; oy < s.out_h; ++oy) {
      float* out = y + (p * s.out_h + oy) * s.out_w;
      std::fill(out, out + s.out_w, 0.0F);
      std::int64_t r0 = 0, r1 = 0;
      rows_of(s, oy, r0, r1);
      for (std::int64_t r = r0; r < r1; ++r) {
        const float* row = plane + r * s.w;
        for (std::int64_t kx = 0; kx < s.kernel_w; ++kx) {
          const Columns c = cols[kx];
          const std::int64_t offset = kx - s.pad_w;
          for (std::int64_t ox = c.lo; ox < c.hi; ++ox) out[ox] += row[ox * s.stride_w + offset];
        }
      }
      for (std::int64_t ox = 0; ox < s.out_w; ++ox) out[ox] *= inv_area;
    }
  }
}

RIG_CPU_KERNEL void avg_planes_backward(const Pool2dShape& s, const Columns* cols, const float* dy,
                                        float* dx, std::int64_t begin, std::int64_t end) {
  const std::int64_t in_size = s.h * s.w;
  const float inv_area = 1.0F / static_cast<float>(s.kernel_h * s.kernel_w);
  for (std::int64_t p = begin; p < end; ++p) {
    float* d = dx + p * in_size;
    std::fill(d, d + in_size, 0.0F);
    for (std::int64_t oy = 0; oy < s.out_h; ++oy) {
      const float* g = dy + (p * s.out_h + oy) * s.out_w;
      std::int64_t r0 = 0, r1 = 0;
      rows_of(s, oy, r0, r1);
      for (std::int64_t r = r0; r < r1; ++r) {
        float* row = d + r * s.w;
        for (std::int64_t kx = 0; kx < s.kernel_w; ++kx) {
          const Columns c = cols[kx];
          const std::int64_t offset = kx - s.pad_w;
          // Distinct ox hit distinct columns: no conflicts within this loop.
          for (std::int64_t ox = c.lo; ox < c.hi; ++ox) {
            row[ox * s.stride_w + offset] += g[ox] * inv_area;
          }
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

std::int64_t window_work(const Pool2dShape& s) {
  return s.out_h * s.out_w * s.kernel_h * s.kernel_w;
}

// ---- Channels last ----------------------------------------------------------------

// Channels of a channels-last task: a block small enough for per-channel
// accumulators on the stack, wide enough for the vector units.
constexpr std::int64_t kChannelBlock = 64;

// Image n, channels [c0, c0 + count) of an [images, ..., channels] array.
struct ChannelTask {
  std::int64_t n, c0, count;
};

struct ChannelBlocks {
  std::int64_t images = 0, channels = 1, blocks = 1;

  std::int64_t tasks() const { return images * blocks; }
  ChannelTask task(std::int64_t t) const {
    const std::int64_t n = t / blocks;
    const std::int64_t c0 = (t - n * blocks) * kChannelBlock;
    return {n, c0, std::min(kChannelBlock, channels - c0)};
  }
  // Tasks per parallel_for chunk for `plane_work` operations per channel.
  std::int64_t grain(std::int64_t plane_work) const {
    return plane_grain(plane_work * std::min(channels, kChannelBlock));
  }
};

ChannelBlocks channel_blocks(std::int64_t planes, std::int64_t channels) {
  return {planes / channels, channels, (channels + kChannelBlock - 1) / kChannelBlock};
}

RIG_CPU_KERNEL void max_nhwc(const Pool2dShape& s, const ChannelBlocks& blocks, const float* x,
                             float* y, std::int32_t* index, std::int64_t begin, std::int64_t end) {
  const std::int64_t ch = s.channels;
  for (std::int64_t t = begin; t < end; ++t) {
    const ChannelTask k = blocks.task(t);
    const float* image = x + k.n * s.h * s.w * ch + k.c0;
    for (std::int64_t oy = 0; oy < s.out_h; ++oy) {
      std::int64_t r0 = 0, r1 = 0;
      rows_of(s, oy, r0, r1);
      for (std::int64_t ox = 0; ox < s.out_w; ++ox) {
        std::int64_t c0 = 0, c1 = 0;
        columns_of(s, ox, c0, c1);
        float best[kChannelBlock];
        std::int32_t at[kChannelBlock], nan_at[kChannelBlock];
        const auto first = static_cast<std::int32_t>(r0 * s.w + c0);  // a window of -inf
        for (std::int64_t c = 0; c < k.count; ++c) {
          best[c] = -std::numeric_limits<float>::infinity();
          at[c] = first;
          nan_at[c] = -1;
        }
        for (std::int64_t r = r0; r < r1; ++r) {
          for (std::int64_t col = c0; col < c1; ++col) {
            const auto pixel = static_cast<std::int32_t>(r * s.w + col);
            const float* v = image + pixel * ch;
            for (std::int64_t c = 0; c < k.count; ++c) {
              const float value = v[c];
              const bool take = value > best[c];
              best[c] = take ? value : best[c];
              at[c] = take ? pixel : at[c];
              nan_at[c] = value != value ? pixel : nan_at[c];
            }
          }
        }
        const std::int64_t o = ((k.n * s.out_h + oy) * s.out_w + ox) * ch + k.c0;
        for (std::int64_t c = 0; c < k.count; ++c) {
          y[o + c] = nan_at[c] >= 0 ? std::numeric_limits<float>::quiet_NaN() : best[c];
        }
        if (index != nullptr) {
          for (std::int64_t c = 0; c < k.count; ++c) {
            index[o + c] = nan_at[c] >= 0 ? nan_at[c] : at[c];
          }
        }
      }
    }
  }
}

// Zeroes channels [k.c0, k.c0 + k.count) of `pixels` pixels of C channels.
inline void zero_channels(float* image, std::int64_t pixels, std::int64_t ch,
                          const ChannelTask& k) {
  for (std::int64_t i = 0; i < pixels; ++i) std::fill_n(image + i * ch, k.count, 0.0F);
}

RIG_CPU_KERNEL void max_nhwc_backward(const Pool2dShape& s, const ChannelBlocks& blocks,
                                      const std::int32_t* index, const float* dy, float* dx,
                                      std::int64_t begin, std::int64_t end) {
  const std::int64_t ch = s.channels;
  const std::int64_t in_size = s.h * s.w;
  const std::int64_t out_size = s.out_h * s.out_w;
  for (std::int64_t t = begin; t < end; ++t) {
    const ChannelTask k = blocks.task(t);
    float* d = dx + k.n * in_size * ch + k.c0;
    zero_channels(d, in_size, ch, k);
    const std::int64_t first = k.n * out_size * ch + k.c0;
    // Per channel, outputs in ascending order: the NCHW scatter's order.
    for (std::int64_t o = 0; o < out_size; ++o) {
      const float* g = dy + first + o * ch;
      const std::int32_t* at = index + first + o * ch;
      for (std::int64_t c = 0; c < k.count; ++c) d[at[c] * ch + c] += g[c];
    }
  }
}

RIG_CPU_KERNEL void avg_nhwc(const Pool2dShape& s, const ChannelBlocks& blocks, const float* x,
                             float* y, std::int64_t begin, std::int64_t end) {
  const std::int64_t ch = s.channels;
  const float inv_area = 1.0F / static_cast<float>(s.kernel_h * s.kernel_w);
  for (std::int64_t t = begin; t < end; ++t) {
    const ChannelTask k = blocks.task(t);
    const float* image = x + k.n * s.h * s.w * ch + k.c0;
    for (std::int64_t oy = 0; oy < s.out_h; ++oy) {
      std::int64_t r0 = 0, r1 = 0;
      rows_of(s, oy, r0, r1);
      for (std::int64_t ox = 0; ox < s.out_w; ++ox) {
        std::int64_t c0 = 0, c1 = 0;
        columns_of(s, ox, c0, c1);
        float sum[kChannelBlock];
        std::fill_n(sum, k.count, 0.0F);
        // Row by row, column by column: the order avg_planes adds the window in.
        for (std::int64_t r = r0; r < r1; ++r) {
          for (std::int64_t col = c0; col < c1; ++col) {
            const float* v = image + (r * s.w + col) * ch;
            for (std::int64_t c = 0; c < k.count; ++c) sum[c] += v[c];
          }
        }
        float* out = y + ((k.n * s.out_h + oy) * s.out_w + ox) * ch + k.c0;
        for (std::int64_t c = 0; c < k.count; ++c) out[c] = sum[c] * inv_area;
      }
    }
  }
}

RIG_CPU_KERNEL void avg_nhwc_backward(const Pool2dShape& s, const ChannelBlocks& blocks,
                                      const Columns* cols, const float* dy, float* dx,
                                      std::int64_t begin, std::int64_t end) {
  const std::int64_t ch = s.channels;
  const float inv_area = 1.0F / static_cast<float>(s.kernel_h * s.kernel_w);
  for (std::int64_t t = begin; t < end; ++t) {
    const ChannelTask k = blocks.task(t);
    float* image = dx + k.n * s.h * s.w * ch + k.c0;
    zero_channels(image, s.h * s.w, ch, k);
    // avg_planes_backward's loops (output row, window row, kernel column,
    // output column) around the channels: each channel's order and bits.
    for (std::int64_t oy = 0; oy < s.out_h; ++oy) {
      const float* g = dy + (k.n * s.out_h + oy) * s.out_w * ch + k.c0;
      std::int64_t r0 = 0, r1 = 0;
      rows_of(s, oy, r0, r1);
      for (std::int64_t r = r0; r < r1; ++r) {
        float* row = image + r * s.w * ch;
        for (std::int64_t kx = 0; kx < s.kernel_w; ++kx) {
          const Columns c = cols[kx];
          const std::int64_t offset = kx - s.pad_w;
          for (std::int64_t ox = c.lo; ox < c.hi; ++ox) {
            float* d = row + (ox * s.stride_w + offset) * ch;
            const float* go = g + ox * ch;
            for (std::int64_t q = 0; q < k.count; ++q) d[q] += go[q] * inv_area;
          }
        }
      }
    }
  }
}

RIG_CPU_KERNEL void means_nhwc(std::int64_t size, const ChannelBlocks& blocks, const float* x,
                               float* y, std::int64_t begin, std::int64_t end) {
  constexpr int kLanes = 16;  // plane_means' lanes
  const std::int64_t ch = blocks.channels;
  for (std::int64_t t = begin; t < end; ++t) {
    const ChannelTask k = blocks.task(t);
    const float* v = x + k.n * size * ch + k.c0;
    float lanes[kLanes][kChannelBlock];
    for (auto& lane : lanes) std::fill_n(lane, k.count, 0.0F);
    std::int64_t i = 0;
    for (; i + kLanes <= size; i += kLanes) {
      for (int l = 0; l < kLanes; ++l) {
        const float* e = v + (i + l) * ch;
        for (std::int64_t c = 0; c < k.count; ++c) lanes[l][c] += e[c];
      }
    }
    float total[kChannelBlock];
    std::fill_n(total, k.count, 0.0F);
    for (; i < size; ++i) {
      const float* e = v + i * ch;
      for (std::int64_t c = 0; c < k.count; ++c) total[c] += e[c];
    }
    for (int l = 0; l < kLanes; ++l) {
      for (std::int64_t c = 0; c < k.count; ++c) total[c] += lanes[l][c];
    }
    float* out = y + k.n * ch + k.c0;
    for (std::int64_t c = 0; c < k.count; ++c) out[c] = total[c] / static_cast<float>(size);
  }
}

RIG_CPU_KERNEL void fill_nhwc(std::int64_t size, const ChannelBlocks& blocks, const float* dy,
                              float* dx, std::int64_t begin, std::int64_t end) {
  const std::int64_t ch = blocks.channels;
  const float inv = 1.0F / static_cast<float>(size);
  for (std::int64_t t = begin; t < end; ++t) {
    const ChannelTask k = blocks.task(t);
    float value[kChannelBlock];
    const float* g = dy + k.n * ch + k.c0;
    for (std::int64_t c = 0; c < k.count; ++c) value[c] = g[c] * inv;
    float* d = dx + k.n * size * ch + k.c0;
    for (std::int64_t i = 0; i < size; ++i) std::copy_n(value, k.count, d + i * ch);
  }
}

// Channels last with at least one plane (a [0, ...] batch has nothing to do).
bool nhwc(const Pool2dShape& s) {
  return s.channels_last && s.planes > 0;
}

}  // namespace

void max_pool2d_forward(const Pool2dShape& s, const float* x, float* y, std::int32_t* index) {
  if (nhwc(s)) {
    const ChannelBlocks blocks = channel_blocks(s.planes, s.channels);
    parallel_for(blocks.tasks(), blocks.grain(window_work(s)),
                 [&](std::int64_t b, std::int64_t e) { max_nhwc(s, blocks, x, y, index, b, e); });
    return;
  }
  parallel_for(s.planes, plane_grain(window_work(s)), [&](std::int64_t b, std::int64_t e) {
    max_planes(s, x, y, index, index_buffer(s.out_w), b, e);
  });
}

void max_pool2d_backward(const Pool2dShape& s, const std::int32_t* index, const float* dy,
                         float* dx) {
  if (nhwc(s)) {
    const ChannelBlocks blocks = channel_blocks(s.planes, s.channels);
    parallel_for(blocks.tasks(), blocks.grain(s.h * s.w), [&](std::int64_t b, std::int64_t e) {
      max_nhwc_backward(s, blocks, index, dy, dx, b, e);
    });
    return;
  }
  parallel_for(s.planes, plane_grain(s.h * s.w), [&](std::int64_t b, std::int64_t e) {
    max_planes_backward(s, index, dy, dx, b, e);
  });
}

void avg_pool2d_forward(const Pool2dShape& s, const float* x, float* y) {
  if (nhwc(s)) {
    const ChannelBlocks blocks = channel_blocks(s.planes, s.channels);
    parallel_for(blocks.tasks(), blocks.grain(window_work(s)),
                 [&](std::int64_t b, std::int64_t e) { avg_nhwc(s, blocks, x, y, b, e); });
    return;
  }
  const Columns* cols = column_table(s);
  parallel_for(s.planes, plane_grain(window_work(s)),
               [&](std::int64_t b, std::int64_t e) { avg_planes(s, cols, x, y, b, e); });
}

void avg_pool2d_backward(const Pool2dShape& s, const float* dy, float* dx) {
  const Columns* cols = column_table(s);
  if (nhwc(s)) {
    const ChannelBlocks blocks = channel_blocks(s.planes, s.channels);
    parallel_for(blocks.tasks(), blocks.grain(window_work(s)), [&](std::int64_t b, std::int64_t e) {
      avg_nhwc_backward(s, blocks, cols, dy, dx, b, e);
    });
    return;
  }
  parallel_for(s.planes, plane_grain(window_work(s)),
               [&](std::int64_t b, std::int64_t e) { avg_planes_backward(s, cols, dy, dx, b, e); });
}

void global_avg_pool_forward(std::int64_t planes, std::int64_t size, std::int64_t channels,
                             const float* x, float* y) {
  if (channels > 1 && planes > 0) {
    const ChannelBlocks blocks = channel_blocks(planes, channels);
    parallel_for(blocks.tasks(), blocks.grain(size),
                 [&](std::int64_t b, std::int64_t e) { means_nhwc(size, blocks, x, y, b, e); });
    return;
  }
  parallel_for(planes, plane_grain(size),
               [&](std::int64_t b, std::int64_t e) { plane_means(size, x, y, b, e); });
}

void global_avg_pool_backward(std::int64_t planes, std::int64_t size, std::int64_t channels,
                              const float* dy, float* dx) {
  if (channels > 1 && planes > 0) {
    const ChannelBlocks blocks = channel_blocks(planes, channels);
    parallel_for(blocks.tasks(), blocks.grain(size),
                 [&](std::int64_t b, std::int64_t e) { fill_nhwc(size, blocks, dy, dx, b, e); });
    return;
  }
  parallel_for(planes, plane_grain(size),
               [&](std::int64_t b, std::int64_t e) { plane_fill(size, dy, dx, b, e); });
}

}  // namespace rig::cpu
