// Comparisons giving u8 (1 true, 0 false); not differentiable. equal
// broadcasts; operands of different dtypes are compared as i64 when both are
// integers, else as f32.
#include <cstdint>
#include <stdexcept>

#include <fmt/format.h>

#include "cpu/parallel.hpp"
#include "cpu/strided.hpp"
#include "ops/op_util.hpp"
#include "rig/ops.hpp"

namespace rig::ops {

namespace {

template <class T>
const T* typed(const Tensor& t) {
  return reinterpret_cast<const T*>(t.raw_data());
}

// out[i] = pred(a[i], b[i]) over a plan with operands 0: out (u8), 1: a, 2: b.
template <class T, class Pred>
void compare(const cpu::StridedPlan<3>& plan, const T* a, const T* b, std::uint8_t* out,
             Pred pred) {
  const std::int64_t inner = plan.inner();
  const std::int64_t so = plan.inner_stride(0);
  const std::int64_t sa = plan.inner_stride(1);
  const std::int64_t sb = plan.inner_stride(2);
  const std::int64_t grain = std::max<std::int64_t>(1, 16384 / std::max<std::int64_t>(1, inner));
  cpu::parallel_for(plan.outer(), grain, [&](std::int64_t begin, std::int64_t end) {
    cpu::for_each_row(plan, begin, end, [&](const std::array<std::int64_t, 3>& off) {
      const T* pa = a + off[1];
      const T* pb = b + off[2];
      std::uint8_t* po = out + off[0];
      for (std::int64_t i = 0; i < inner; ++i) po[i * so] = pred(pa[i * sa], pb[i * sb]) ? 1 : 0;
    });
  });
}

template <class Pred>
void compare_dtype(DType dtype, const cpu::StridedPlan<3>& plan, const Tensor& a, const Tensor& b,
                   std::uint8_t* out, Pred pred) {
  switch (dtype) {
    case DType::f32:
      return compare(plan, typed<float>(a), typed<float>(b), out, pred);
    case DType::i32:
      return compare(plan, typed<std::int32_t>(a), typed<std::int32_t>(b), out, pred);
    case DType::i64:
      return compare(plan, typed<std::int64_t>(a), typed<std::int64_t>(b), out, pred);
    case DType::u8:
      return compare(plan, typed<std::uint8_t>(a), typed<std::uint8_t>(b), out, pred);
    case DType::f16:
    case DType::bf16:
      break;
  }
  throw std::logic_error("compare: unexpected dtype");
}

}  // namespace

Tensor equal(const Tensor& a, const Tensor& b) {
  detail::require_defined("equal", a, "a");
  detail::require_defined("equal", b, "b");
  detail::require_same_cpu("equal", {&a, &b});
  const Shape shape = broadcast_shapes(a.shape(), b.shape(), "equal");
  // One dtype for both: f16/bf16 and mixed float/integer pairs compare in f32.
  DType common = a.dtype();
  if (a.dtype() != b.dtype() || !(a.dtype() == DType::f32 || !is_floating(a.dtype()))) {
    common = !is_floating(a.dtype()) && !is_floating(b.dtype()) ? DType::i64 : DType::f32;
  }
  const Tensor ac = a.dtype() == common ? a.detach() : a.detach().to(common);
  const Tensor bc = b.dtype() == common ? b.detach() : b.detach().to(common);
  Tensor out = Tensor::empty(shape, DType::u8);
  if (out.numel() == 0) return out;
  const Strides so = contiguous_strides(shape);
  const Strides sa = cpu::broadcast_strides(ac.shape(), ac.strides(), shape);
  const Strides sb = cpu::broadcast_strides(bc.shape(), bc.strides(), shape);
  const auto plan = cpu::make_strided_plan<3>(shape, {&so, &sa, &sb});
  compare_dtype(common, plan, ac, bc, out.data<std::uint8_t>(),
                [](auto x, auto y) { return x == y; });
  return out;
}

Tensor not_equal_scalar(const Tensor& a, float scalar) {
  detail::require_defined("not_equal_scalar", a, "a");
  detail::require_cpu("not_equal_scalar", {&a});
  const Tensor ac =
      a.dtype() == DType::f16 || a.dtype() == DType::bf16 ? a.detach().to(DType::f32) : a.detach();
  Tensor out = Tensor::empty(a.shape(), DType::u8);
  if (out.numel() == 0) return out;
  // The scalar as a stride-0 operand of a's dtype would round it (e.g. 0.5 vs
  // an integer tensor); compare in double instead.
  const Shape& shape = a.shape();
  const Strides so = contiguous_strides(shape);
  const Strides zero(shape.size(), 0);
  const auto plan = cpu::make_strided_plan<3>(shape, {&so, &ac.strides(), &zero});
  const double s = scalar;
  std::uint8_t* o = out.data<std::uint8_t>();
  auto ne = [s](auto x, auto) { return static_cast<double>(x) != s; };
  switch (ac.dtype()) {
    case DType::f32:
      compare(plan, typed<float>(ac), typed<float>(ac), o, ne);
      break;
    case DType::i32:
      compare(plan, typed<std::int32_t>(ac), typed<std::int32_t>(ac), o, ne);
      break;
    case DType::i64:
      compare(plan, typed<std::int64_t>(ac), typed<std::int64_t>(ac), o, ne);
      break;
    case DType::u8:
      compare(plan, typed<std::uint8_t>(ac), typed<std::uint8_t>(ac), o, ne);
      break;
    default:
      throw std::logic_error("not_equal_scalar: unexpected dtype");
  }
  return out;
}

}  // namespace rig::ops
