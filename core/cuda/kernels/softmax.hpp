// Row-wise softmax and log-softmax over contiguous rows [rows, cols], one
// block per row (the semantics of Backend::softmax_forward/backward and
// core/cpu/softmax.cpp):
//   forward: an optional u8 keep-mask of the same shape (0 = masked out)
//     excludes elements: probability 0 (log: -inf). A row with nothing kept
//     (every element masked, or every kept logit -inf) is all 0 (log: -inf).
//   backward: softmax dx = y (g - sum(g y)); log-softmax dx = g - exp(y)
//     sum(g) over the kept elements (y > -inf), 0 where y is -inf.
// Storage type: `type` (f32, f16 or bf16) is the type of every float tensor
// (x, y, g, dx); the pointers keep their float* types, and for f16/bf16 they
// hold 16-bit values (read and written through load_element/store_element).
// The math is f32 throughout; each output is rounded once, at its store.
#pragma once

#include <cstdint>

#include "cuda/kernels/common.hpp"
#include "cuda/kernels/element_type.hpp"
#include "rig/math/device_math.hpp"
#include "simt/collectives.hpp"

namespace rig::kernels {

struct SoftmaxForward {
  const float* x = nullptr;
  const std::uint8_t* mask = nullptr;  // [rows, cols] or null (all kept)
  float* y = nullptr;                  // [rows, cols]; must not alias x when mask is set
  std::int64_t rows = 0, cols = 0;
  bool log = false;
  ElementType type = ElementType::f32;  // of x and y

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
    const std::int64_t base = row * cols;  // element offset of the row
    const std::uint8_t* mr = mask != nullptr ? mask + base : nullptr;
    const float ninf = neg_inf();

    float m = ninf;
    for (std::int64_t j = first; j < cols; j += step) {
      const float v = mr == nullptr || mr[j] != 0 ? load_element(x, type, base + j) : ninf;
      m = simt::Max{}(m, v);
    }
    m = simt::block_max(ctx, m);
    if (m == ninf) {  // nothing kept: the whole block leaves here
      for (std::int64_t j = first; j < cols; j += step) {
        store_element(y, type, base + j, log ? ninf : 0.0F);
      }
      return;
    }
    float s = 0.0F;
    for (std::int64_t j = first; j < cols; j += step) {
      const float v = mr == nullptr || mr[j] != 0 ? load_element(x, type, base + j) : ninf;
      s += M::exp(v - m);
    }
    s = simt::block_sum(ctx, s);
    if (log) {
      const float shift = m + M::log(s);
      for (std::int64_t j = first; j < cols; j += step) {
        store_element(y, type, base + j,
                      mr == nullptr || mr[j] != 0 ? load_element(x, type, base + j) - shift : ninf);
      }
      return;
    }
    // e^(x - m) again (the same bits as in the sum), scaled and rounded once.
    const float inv = 1.0F / s;
    for (std::int64_t j = first; j < cols; j += step) {
      const float v = mr == nullptr || mr[j] != 0 ? load_element(x, type, base + j) : ninf;
      store_element(y, type, base + j, M::exp(v - m) * inv);
    }
  }
};

struct SoftmaxBackward {
  const float* y = nullptr;  // the forward's output
  const float* g = nullptr;  // upstream gradient
  float* dx = nullptr;       // may alias g
  std::int64_t rows = 0, cols = 0;
  bool log = false;
  ElementType type = ElementType::f32;  // of y, g and dx

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
    const std::int64_t base = row * cols;  // element offset of the row
    const float ninf = neg_inf();
    float acc = 0.0F;
    if (log) {
      for (std::int64_t j = first; j < cols; j += step) {
        acc += load_element(y, type, base + j) == ninf ? 0.0F : load_element(g, type, base + j);
      }
    } else {
      for (std::int64_t j = first; j < cols; j += step) {
        acc += load_element(g, type, base + j) * load_element(y, type, base + j);
      }
    }
    acc = simt::block_sum(ctx, acc);
    if (log) {
      for (std::int64_t j = first; j < cols; j += step) {
        const float yj = load_element(y, type, base + j);
        store_element(dx, type, base + j,
                      yj == ninf ? 0.0F : load_element(g, type, base + j) - M::exp(yj) * acc);
      }
    } else {
      for (std::int64_t j = first; j < cols; j += step) {
        const float yj = load_element(y, type, base + j);
        store_element(dx, type, base + j, yj * (load_element(g, type, base + j) - acc));
      }
    }
  }
};

}  // namespace rig::kernels
