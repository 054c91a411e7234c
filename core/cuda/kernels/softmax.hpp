// Row-wise softmax and log-softmax over contiguous rows [rows, cols] (the
// semantics of Backend::softmax_forward/backward and core/cpu/softmax.cpp),
// a warp per row for rows of at most kSoftmaxWarpCols (attention's rows of
// keys: two warp reductions, no block barriers), a block per row for longer
// ones (a vocabulary's log-softmax); one body serves both (RowThreads):
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

// Rows this long or shorter take a warp each.
inline constexpr std::int64_t kSoftmaxWarpCols = 1024;

namespace softmax_detail {

// A thread's elements of its row: base + first, base + first + step, ...
struct Span {
  std::int64_t base = 0;  // element offset of the row
  std::int64_t first = 0, step = 1;
};

// The threads that share a row: its warp, or its block; max and sum combine
// their values.
template <bool Warp>
struct RowThreads {
  // The calling thread's part of its row: false past the last row (the
  // whole warp or block).
  template <class Ctx>
  RIG_HD_INLINE static bool span(const Ctx& ctx, std::int64_t rows, std::int64_t cols, Span& s) {
    std::int64_t row = 0;
    if constexpr (Warp) {
      row = warp_row(ctx, rows);
      s.first = ctx.lane();
      s.step = simt::kWarpSize;
    } else {
      row = block_row(ctx) < rows ? block_row(ctx) : -1;
      s.first = ctx.thread_rank();
      s.step = ctx.block_threads();
    }
    s.base = row * cols;
    return row >= 0;
  }
  template <class Ctx>
  RIG_HD_INLINE static float max(Ctx& ctx, float v) {
    if constexpr (Warp) {
      return simt::warp_max(ctx, v);
    } else {
      return simt::block_max(ctx, v);
    }
  }
  template <class Ctx>
  RIG_HD_INLINE static float sum(Ctx& ctx, float v) {
    if constexpr (Warp) {
      return simt::warp_sum(ctx, v);
    } else {
      return simt::block_sum(ctx, v);
    }
  }
};

// `registers`: the kernel's most per thread (ptxas; SoftmaxForward and
// SoftmaxBackward: at most 42 (sm_75), 36 (sm_90)).
inline simt::LaunchShape plan(const simt::DeviceProperties& device, std::int64_t rows,
                              std::int64_t cols, int registers = 42) {
  return cols <= kSoftmaxWarpCols ? plan_warp_rows(device, rows, registers)
                                  : plan_row_kernel(device, rows, cols, registers);
}

// k.rows_by<true> (a warp per row) or k.rows_by<false> (a block per row),
// uniform over the launch.
template <class Kernel, class Ctx>
RIG_HD_INLINE void by_row_length(const Kernel& k, Ctx& ctx) {
  if (k.cols <= kSoftmaxWarpCols) {
    k.template rows_by<true>(ctx);
  } else {
    k.template rows_by<false>(ctx);
  }
}

}  // namespace softmax_detail

struct SoftmaxForward {
  const float* x = nullptr;
  const std::uint8_t* mask = nullptr;  // [rows, cols] or null (all kept)
  float* y = nullptr;                  // [rows, cols]; must not alias x when mask is set
  std::int64_t rows = 0, cols = 0;
  bool log = false;
  ElementType type = ElementType::f32;  // of x and y

  simt::LaunchShape plan(const simt::DeviceProperties& device) const {
    return softmax_detail::plan(device, rows, cols);
  }

  template <class Ctx>
  RIG_HD void operator()(Ctx& ctx) const {
    softmax_detail::by_row_length(*this, ctx);
  }

  template <bool Warp, class Ctx>
  RIG_HD void rows_by(Ctx& ctx) const {
    using M = math::DeviceMath;
    using T = softmax_detail::RowThreads<Warp>;
    softmax_detail::Span r;
    if (!T::span(ctx, rows, cols, r)) return;  // the whole warp or block
    const std::int64_t first = r.first, step = r.step, base = r.base;
    const std::uint8_t* mr = mask != nullptr ? mask + base : nullptr;
    const float ninf = neg_inf();

    float m = ninf;
    for (std::int64_t j = first; j < cols; j += step) {
      const float v = mr == nullptr || mr[j] != 0 ? load_element(x, type, base + j) : ninf;
      m = simt::Max{}(m, v);
    }
    m = T::max(ctx, m);
    if (m == ninf) {  // nothing kept: the row's threads all leave here
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
    s = T::sum(ctx, s);
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
    return softmax_detail::plan(device, rows, cols);
  }

  template <class Ctx>
  RIG_HD void operator()(Ctx& ctx) const {
    softmax_detail::by_row_length(*this, ctx);
  }

  template <bool Warp, class Ctx>
  RIG_HD void rows_by(Ctx& ctx) const {
    using M = math::DeviceMath;
    using T = softmax_detail::RowThreads<Warp>;
    softmax_detail::Span r;
    if (!T::span(ctx, rows, cols, r)) return;  // the whole warp or block
    const std::int64_t first = r.first, step = r.step, base = r.base;
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
    acc = T::sum(ctx, acc);
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
