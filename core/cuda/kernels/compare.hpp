// Comparisons (Backend::compare, core/cpu/compare.cpp): u8 out = a == b,
// a < b, or double(a) != scalar, over a backend::StridedPlan<3> (operands 0
// out, 1 a, 2 b; element strides, 0 on broadcast axes), a and b of one dtype
// (f32, i32, i64 or u8) compared as that type (not_equal_scalar: widened to
// double, so 0.5 against an integer tensor is never rounded; b is not read).
// Bit-exact with the CPU (no arithmetic).
//
// Wiring, per entry point:
//   compare: one CompareKernel, its ndim / shape / strides copied from the
//     plan (op = CompareOp(backend::Compare), same order). No scratch, no
//     host copies. Launches nothing for an empty plan.
#pragma once

#include <cstdint>

#include "cuda/kernels/common.hpp"
#include "rig/dtype.hpp"

namespace rig::kernels {

// backend::Compare, in the same order.
enum class CompareOp : std::uint8_t { equal, less, not_equal_scalar };

template <class T>
RIG_HD_INLINE bool compare_values(CompareOp op, T x, T y, double scalar) {
  switch (op) {
    case CompareOp::equal:
      return x == y;
    case CompareOp::less:
      return x < y;
    default:
      return static_cast<double>(x) != scalar;
  }
}

struct CompareKernel {
  CompareOp op = CompareOp::equal;
  DType dtype = DType::f32;  // of a and b: f32, i32, i64 or u8
  int ndim = 1;              // >= 1, <= kMaxDims
  std::int64_t shape[kMaxDims] = {};
  std::int64_t strides[3][kMaxDims] = {};  // [0] out, [1] a, [2] b
  const void* a = nullptr;
  const void* b = nullptr;  // unused (may be null) for not_equal_scalar
  double scalar = 0.0;
  std::uint8_t* out = nullptr;

  simt::LaunchShape plan(const simt::DeviceProperties& device) const {
    return plan_grid_stride(device, shape_elements(ndim, shape), 1, 52);  // ptxas: 52
  }

  template <class Ctx>
  RIG_HD void operator()(Ctx& ctx) const {
    switch (dtype) {  // uniform over the launch
      case DType::i32:
        return typed<std::int32_t>(ctx);
      case DType::i64:
        return typed<std::int64_t>(ctx);
      case DType::u8:
        return typed<std::uint8_t>(ctx);
      default:
        return typed<float>(ctx);
    }
  }

 private:
  template <class T, class Ctx>
  RIG_HD void typed(Ctx& ctx) const {
    const T* pa = static_cast<const T*>(a);
    const T* pb = static_cast<const T*>(op == CompareOp::not_equal_scalar ? a : b);
    const std::int64_t n = shape_elements(ndim, shape);
    for (std::int64_t i = global_thread(ctx); i < n; i += grid_threads(ctx)) {
      std::int64_t off[3];
      strided_offsets(i, ndim, shape, strides, off);
      const T x = pa[off[1]];
      const T y = op == CompareOp::not_equal_scalar ? x : pb[off[2]];
      out[off[0]] = compare_values(op, x, y, scalar) ? 1 : 0;
    }
  }
};

}  // namespace rig::kernels
