// Strided accumulation (Backend::add_strided, core/cpu/tensor_copy.cpp):
// dst += src over n-d operands with element strides, dst and src f32, f16 or
// bf16, summed in f32. dst may repeat elements (stride 0 on broadcast axes,
// the gradient of an expand): such an element gets the sum of everything
// that maps to it, computed by one thread in a fixed order, with no atomics.
//
// Bit-exact with the CPU back end: plan_add_strided orders the axes as the
// CPU's layout does (size-1 axes dropped, sorted by descending |src stride|,
// then |dst stride|, contiguous runs merged), so every destination element
// receives its contributions in the CPU's order and is rounded to its dtype
// where the CPU rounds: after each addition, except along an innermost
// broadcast axis, which the CPU sums in f32 from the element's value and
// rounds once per row (row_sum).
//
// Wiring, per entry point:
//   add_strided: AddStrided k = plan_add_strided(shape.size(), shape.data(),
//     dst, dst_strides.data(), dst_dtype, src, src_strides.data(),
//     src_dtype); run(k). One kernel, no scratch, no host copies; launches
//     nothing when the shape is empty. plan_add_strided throws
//     std::invalid_argument for non-floating dtypes (as the CPU) and for
//     more than kMaxDims axes of either kind after merging.
// Speed: one thread per distinct destination element (kUnroll per step of
// an unrolled loop without broadcast axes); a destination with
// few elements and long broadcast axes (a scalar's gradient) is summed by
// few threads, sequentially: the price of the CPU's order.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <utility>

#include "cuda/kernels/common.hpp"
#include "cuda/kernels/copy.hpp"
#include "rig/dtype.hpp"
#include "rig/half.hpp"

namespace rig::kernels {

// v rounded to t (f32, f16, bf16) and widened back.
RIG_HD_INLINE float round_to_dtype(DType t, float v) {
  switch (t) {
    case DType::f16:
      return half_bits_to_float(float_to_half_bits(v));
    case DType::bf16:
      return bfloat16_bits_to_float(float_to_bfloat16_bits(v));
    default:
      return v;
  }
}

struct AddStrided {
  // The distinct destination elements: row-major over shape[0, ndim).
  int ndim = 1;  // >= 1, <= kMaxDims
  std::int64_t shape[kMaxDims] = {};
  std::int64_t strides[2][kMaxDims] = {};  // [0] dst, [1] src
  // The broadcast axes (dst stride 0), walked row-major for each of them,
  // src stepping rstrides[0][d]; a single axis of 1 when there is none.
  int rdim = 1;  // >= 1, <= kMaxDims
  std::int64_t rshape[kMaxDims] = {1};
  std::int64_t rstrides[1][kMaxDims] = {};
  // The last broadcast axis is summed in f32 and rounded to dst_type once.
  bool row_sum = false;
  void* dst = nullptr;
  DType dst_type = DType::f32;
  const void* src = nullptr;  // must not overlap dst
  DType src_type = DType::f32;

  simt::LaunchShape plan(const simt::DeviceProperties& device) const {
    const bool reduces = shape_elements(rdim, rshape) != 1;
    return plan_grid_stride(device, shape_elements(ndim, shape), reduces ? 1 : kUnroll,
                            52);  // ptxas: 52
  }

  template <class Ctx>
  RIG_HD void operator()(Ctx& ctx) const {
    const std::int64_t n = shape_elements(ndim, shape);
    if (shape_elements(rdim, rshape) == 1) {  // no broadcast axis: dst += src element-wise
      accumulate_elements(ctx, n);
      return;
    }
    const std::int64_t outer = shape_elements(rdim - 1, rshape);
    const std::int64_t inner = rshape[rdim - 1];
    const std::int64_t inner_stride = rstrides[0][rdim - 1];
    for (std::int64_t t = global_thread(ctx); t < n; t += grid_threads(ctx)) {
      std::int64_t off[2];
      strided_offsets(t, ndim, shape, strides, off);
      // value: the element as stored (widened); sum: the last f32 sum, whose
      // conversion is stored at the end (the CPU's bits, NaN payloads too).
      float value = load_float(dst, dst_type, off[0]);
      float sum = value;
      for (std::int64_t o = 0; o < outer; ++o) {
        std::int64_t roff[1];
        strided_offsets(o, rdim - 1, rshape, rstrides, roff);
        const std::int64_t base = off[1] + roff[0];
        if (row_sum) {  // uniform over the launch
          sum = value;
          for (std::int64_t j = 0; j < inner; ++j) {
            sum += load_float(src, src_type, base + j * inner_stride);
          }
          value = round_to_dtype(dst_type, sum);
        } else {
          for (std::int64_t j = 0; j < inner; ++j) {
            sum = value + load_float(src, src_type, base + j * inner_stride);
            value = round_to_dtype(dst_type, sum);
          }
        }
      }
      store_float_as(dst, dst_type, off[0], sum);
    }
  }

 private:
  // dst + src summed in f32 and stored once (the loop above with one term).
  template <class Ctx>
  RIG_HD void accumulate_elements(Ctx& ctx, std::int64_t n) const {
    struct Loaded {
      std::int64_t dst;
      float value, term;
    };
    unrolled_grid_stride(
        ctx, n,
        [&](std::int64_t i) {
          std::int64_t off[2];
          strided_offsets(i, ndim, shape, strides, off);
          return Loaded{off[0], load_float(dst, dst_type, off[0]),
                        load_float(src, src_type, off[1])};
        },
        [&](std::int64_t, const Loaded& v) {
          store_float_as(dst, dst_type, v.dst, v.value + v.term);
        });
  }
};

namespace detail {
inline std::int64_t abs64(std::int64_t v) {
  return v < 0 ? -v : v;
}
}  // namespace detail

// The AddStrided of dst += src over `rank` axes of `shape` (the Backend's
// arguments), its axes in the CPU back end's order.
inline AddStrided plan_add_strided(int rank, const std::int64_t* shape, void* dst,
                                   const std::int64_t* dst_strides, DType dst_type, const void* src,
                                   const std::int64_t* src_strides, DType src_type) {
  if (!dtype_floating(dst_type) || !dtype_floating(src_type)) {
    throw std::invalid_argument("add_strided: floating dtypes only");
  }
  AddStrided k;
  k.dst = dst;
  k.dst_type = dst_type;
  k.src = src;
  k.src_type = src_type;
  constexpr int kAxes = 64;
  if (rank > kAxes) throw std::invalid_argument("add_strided: too many axes");
  std::int64_t size[kAxes] = {}, ds[kAxes] = {}, ss[kAxes] = {};
  int n = 0;
  std::int64_t numel = 1;
  for (int i = 0; i < rank; ++i) {
    numel *= shape[i];
    if (shape[i] == 1) continue;
    size[n] = shape[i];
    ds[n] = dst_strides[i];
    ss[n] = src_strides[i];
    ++n;
  }
  if (numel == 0) {
    k.shape[0] = 0;
    return k;
  }
  // The CPU's insertion sort: descending |src stride|, then |dst stride|; stable.
  auto less = [&](int a, int b) {
    if (detail::abs64(ss[a]) != detail::abs64(ss[b])) {
      return detail::abs64(ss[a]) < detail::abs64(ss[b]);
    }
    return detail::abs64(ds[a]) < detail::abs64(ds[b]);
  };
  for (int i = 1; i < n; ++i) {
    for (int j = i; j > 0 && less(j - 1, j); --j) {
      std::swap(size[j - 1], size[j]);
      std::swap(ds[j - 1], ds[j]);
      std::swap(ss[j - 1], ss[j]);
    }
  }
  // Merge an axis into the previous (outer) one when both operands continue it.
  int m = 0;
  for (int i = 0; i < n; ++i) {
    if (m > 0 && ds[m - 1] == ds[i] * size[i] && ss[m - 1] == ss[i] * size[i]) {
      size[m - 1] *= size[i];
      ds[m - 1] = ds[i];
      ss[m - 1] = ss[i];
      continue;
    }
    size[m] = size[i];
    ds[m] = ds[i];
    ss[m] = ss[i];
    ++m;
  }
  int nd = 0, nr = 0;
  for (int i = 0; i < m; ++i) {
    if (ds[i] == 0) {
      if (nr == kMaxDims) throw std::invalid_argument("add_strided: too many broadcast axes");
      k.rshape[nr] = size[i];
      k.rstrides[0][nr] = ss[i];
      ++nr;
    } else {
      if (nd == kMaxDims) throw std::invalid_argument("add_strided: too many axes");
      k.shape[nd] = size[i];
      k.strides[0][nd] = ds[i];
      k.strides[1][nd] = ss[i];
      ++nd;
    }
  }
  k.row_sum = m > 0 && ds[m - 1] == 0;
  if (nd == 0) {  // one destination element
    k.shape[0] = 1;
    nd = 1;
  }
  if (nr == 0) {
    k.rshape[0] = 1;
    nr = 1;
  }
  k.ndim = nd;
  k.rdim = nr;
  return k;
}

}  // namespace rig::kernels
