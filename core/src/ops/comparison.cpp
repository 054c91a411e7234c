// Comparisons giving u8 (1 true, 0 false); not differentiable. equal
// broadcasts; operands of different dtypes are compared as i64 when both are
// integers, else as f32.
#include <cstdint>
#include <stdexcept>

#include <fmt/format.h>

#include "ops/op_util.hpp"
#include "rig/ops.hpp"

namespace rig::ops {

namespace {

// a op b broadcast, compared in one dtype.
Tensor compare_tensors(const char* name, backend::Compare op, const Tensor& a, const Tensor& b) {
  detail::require_defined(name, a, "a");
  detail::require_defined(name, b, "b");
  detail::require_same_device(name, {&a, &b});
  const Shape shape = broadcast_shapes(a.shape(), b.shape(), name);
  // One dtype for both: f16/bf16 and mixed float/integer pairs compare in f32.
  DType common = a.dtype();
  if (a.dtype() != b.dtype() || !(a.dtype() == DType::f32 || !is_floating(a.dtype()))) {
    common = !is_floating(a.dtype()) && !is_floating(b.dtype()) ? DType::i64 : DType::f32;
  }
  const Tensor ac = a.dtype() == common ? a.detach() : a.detach().to(common);
  const Tensor bc = b.dtype() == common ? b.detach() : b.detach().to(common);
  Tensor out = detail::empty_on(ac, shape, DType::u8);
  if (out.numel() == 0) return out;
  const Strides so = contiguous_strides(shape);
  const Strides sa = backend::broadcast_strides(ac.shape(), ac.strides(), shape);
  const Strides sb = backend::broadcast_strides(bc.shape(), bc.strides(), shape);
  const auto plan = backend::make_strided_plan<3>(shape, {&so, &sa, &sb});
  detail::backend_of(ac).compare(op, plan, common, ac.raw_data(), bc.raw_data(), 0.0,
                                 out.data<std::uint8_t>());
  return out;
}

}  // namespace

Tensor equal(const Tensor& a, const Tensor& b) {
  return compare_tensors("equal", backend::Compare::equal, a, b);
}

Tensor less(const Tensor& a, const Tensor& b) {
  return compare_tensors("less", backend::Compare::less, a, b);
}

Tensor not_equal_scalar(const Tensor& a, float scalar) {
  detail::require_defined("not_equal_scalar", a, "a");
  detail::require_same_device("not_equal_scalar", {&a});
  const Tensor ac =
      a.dtype() == DType::f16 || a.dtype() == DType::bf16 ? a.detach().to(DType::f32) : a.detach();
  Tensor out = detail::empty_on(ac, a.shape(), DType::u8);
  if (out.numel() == 0) return out;
  if (!(ac.dtype() == DType::f32 || !is_floating(ac.dtype()))) {
    throw std::logic_error("not_equal_scalar: unexpected dtype");
  }
  // The scalar is compared in double (an integer tensor against 0.5 is never
  // rounded); operand 2 of the plan is unused.
  const Shape& shape = a.shape();
  const Strides so = contiguous_strides(shape);
  const Strides zero(shape.size(), 0);
  const auto plan = backend::make_strided_plan<3>(shape, {&so, &ac.strides(), &zero});
  detail::backend_of(ac).compare(backend::Compare::not_equal_scalar, plan, ac.dtype(),
                                 ac.raw_data(), ac.raw_data(), scalar, out.data<std::uint8_t>());
  return out;
}

}  // namespace rig::ops
