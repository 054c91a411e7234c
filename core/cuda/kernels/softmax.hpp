// Row-wise softmax and log-softmax over contiguous rows [rows, cols], one
// block per row (the semantics of Backend::softmax_forward/backward and
// core/cpu/softmax.cpp):
//   forward: an optional u8 keep-mask of the same shape (0 = masked out)
//     excludes elements: probability 0 (log: -inf). A row with nothing kept
//     (every element masked, or every kept logit -inf) is all 0 (log: -inf).
//   backward: softmax dx = y (g - sum(g y)); log-softmax dx = g - exp(y)
//     sum(g) over the kept elements (y > -inf), 0 where y is -inf.
#pragma once

#include <cstdint>

#include "cuda/kernels/common.hpp"
#include "rig/math/device_math.hpp"
#include "simt/collectives.hpp"

namespace rig::kernels {

struct SoftmaxForward {
  const float* x = nullptr;
  const std::uint8_t* mask = nullptr;  // [rows, cols] or null (all kept)
  float* y = nullptr;                  // [rows, cols]; must not alias x when mask is set
  std::int64_t rows = 0, cols = 0;
  bool log = false;

  simt::LaunchShape plan(const simt::DeviceProperties& device) const {
    return plan_row_kernel(device, rows, cols);
  }

  template <class Ctx>
  RIG_HD void operator()(Ctx& ctx) const {
    using M = math::DeviceMath;
    const std::int64_t row = block_row(ctx);
    if (row >= rows) return;
    const std::int64_t first = ctx.thread_rank();
    const std::int64_t step = ctx.block_threads();
    const float* xr = x + row * cols;
    const std::uint8_t* mr = mask != nullptr ? mask + row * cols : nullptr;
    float* yr = y + row * cols;
    const float ninf = neg_inf();

    float m = ninf;
    for (std::int64_t j = first; j < cols; j += step) {
      const float v = mr == nullptr || mr[j] != 0 ? xr[j] : ninf;
      m = simt::Max{}(m, v);
    }
    m = simt::block_max(ctx, m);
    if (m == ninf) {  // nothing kept: the whole block leaves here
      for (std::int64_t j = first; j < cols; j += step) yr[j] = log ? ninf : 0.0F;
      return;
    }
    // Each thread writes e^(x - m) over its own elements and reads them back.
    float s = 0.0F;
    for (std::int64_t j = first; j < cols; j += step) {
      const float v = mr == nullptr || mr[j] != 0 ? xr[j] : ninf;
      const float e = M::exp(v - m);
      if (!log) yr[j] = e;
      s += e;
    }
    s = simt::block_sum(ctx, s);
    if (log) {
      const float shift = m + M::log(s);
      for (std::int64_t j = first; j < cols; j += step) {
        yr[j] = mr == nullptr || mr[j] != 0 ? xr[j] - shift : ninf;
      }
      return;
    }
    const float inv = 1.0F / s;
    for (std::int64_t j = first; j < cols; j += step) yr[j] *= inv;
  }
};

struct SoftmaxBackward {
  const float* y = nullptr;  // the forward's output
  const float* g = nullptr;  // upstream gradient
  float* dx = nullptr;       // may alias g
  std::int64_t rows = 0, cols = 0;
  bool log = false;

  simt::LaunchShape plan(const simt::DeviceProperties& device) const {
    return plan_row_kernel(device, rows, cols);
  }

  template <class Ctx>
  RIG_HD void operator()(Ctx& ctx) const {
    using M = math::DeviceMath;
    const std::int64_t row = block_row(ctx);
    if (row >= rows) return;
    const std::int64_t first = ctx.thread_rank();
    const std::int64_t step = ctx.block_threads();
    const float* yr = y + row * cols;
    const float* gr = g + row * cols;
    float* dr = dx + row * cols;
    const float ninf = neg_inf();
    float acc = 0.0F;
    if (log) {
      for (std::int64_t j = first; j < cols; j += step) acc += yr[j] == ninf ? 0.0F : gr[j];
    } else {
      for (std::int64_t j = first; j < cols; j += step) acc += gr[j] * yr[j];
    }
    acc = simt::block_sum(ctx, acc);
    if (log) {
      for (std::int64_t j = first; j < cols; j += step) {
        const float yj = yr[j];
        dr[j] = yj == ninf ? 0.0F : gr[j] - M::exp(yj) * acc;
      }
    } else {
      for (std::int64_t j = first; j < cols; j += step) dr[j] = yr[j] * (gr[j] - acc);
    }
  }
};

}  // namespace rig::kernels
