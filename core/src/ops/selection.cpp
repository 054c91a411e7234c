// Selecting ops: where, masked_fill (differentiable), argmax, topk.
#include <cstring>
#include <stdexcept>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "ops/op_util.hpp"
#include "rig/autograd.hpp"
#include "rig/ops.hpp"

namespace rig::ops {

namespace {

using detail::backend_of;
using detail::empty_on;
using detail::normalize_axis;
using detail::require_defined;
using detail::require_dtype;
using detail::require_same_device;

// t's strides over `shape` (which t broadcasts to): 0 on broadcast axes.
Strides broadcast_strides(const Tensor& t, const Shape& shape) {
  Strides strides(shape.size(), 0);
  const std::size_t lead = shape.size() - t.shape().size();
  for (std::size_t d = 0; d < t.shape().size(); ++d) {
    if (t.shape()[d] != 1) strides[lead + d] = t.strides()[d];
  }
  return strides;
}

backend::SelectOperand operand(const Tensor& t, const Shape& shape) {
  return {t.raw_data(), broadcast_strides(t, shape)};
}

// cond ? value : t, or cond ? t : value when `value_if_false` (t of `shape`).
Tensor select_scalar(const Tensor& cond, const Tensor& t, float value, bool value_if_false) {
  const Shape& shape = t.shape();
  Tensor out = empty_on(t, shape, t.dtype());
  // The value as one element of t's dtype on t's device, read with stride 0.
  const Tensor scalar = Tensor::full({}, value, t.dtype(), t.device());
  const auto c = operand(cond, shape);
  const auto x = operand(t, shape);
  const backend::SelectOperand v{scalar.raw_data(), Strides(shape.size(), 0)};
  backend_of(t).select(shape, dtype_size(t.dtype()), c, value_if_false ? x : v,
                       value_if_false ? v : x, out.raw_data());
  return out;
}

// Sums a gradient of `shape` over the axes where `target` was broadcast.
Tensor reduce_to(const Tensor& g, const Shape& target) {
  if (g.shape() == target) return g;
  Axes axes;
  const std::size_t lead = g.shape().size() - target.size();
  for (std::size_t d = 0; d < g.shape().size(); ++d) {
    if (d < lead || (target[d - lead] == 1 && g.shape()[d] != 1)) {
      axes.push_back(static_cast<std::int64_t>(d));
    }
  }
  return ops::sum(g, axes, true).reshape(target);
}

}  // namespace

Tensor where(const Tensor& condition, const Tensor& a, const Tensor& b) {
  require_dtype("where", condition, "condition", {DType::u8});
  require_defined("where", a, "a");
  require_defined("where", b, "b");
  require_same_device("where", {&condition, &a, &b});
  if (a.dtype() != b.dtype()) {
    throw std::invalid_argument(fmt::format("where: a {} {} and b {} {}: dtypes differ",
                                            dtype_name(a.dtype()), to_string(a.shape()),
                                            dtype_name(b.dtype()), to_string(b.shape())));
  }
  const Shape shape =
      broadcast_shapes(broadcast_shapes(condition.shape(), a.shape(), "where"), b.shape(), "where");
  Tensor out = empty_on(a, shape, a.dtype());
  backend_of(a).select(shape, dtype_size(a.dtype()), operand(condition, shape), operand(a, shape),
                       operand(b, shape), out.raw_data());
  return autograd::record(
      std::move(out), "where", {condition, a, b},
      [cond = condition.detach(), a_shape = a.shape(), b_shape = b.shape(),
       need_a = a.requires_grad(), need_b = b.requires_grad()](const Tensor& g) {
        const Tensor gc = g.contiguous();
        Tensor da = need_a ? reduce_to(select_scalar(cond, gc, 0.0F, true), a_shape) : Tensor();
        Tensor db = need_b ? reduce_to(select_scalar(cond, gc, 0.0F, false), b_shape) : Tensor();
        return autograd::TensorList{Tensor(), da, db};
      });
}

Tensor masked_fill(const Tensor& x, const Tensor& mask, float value) {
  require_defined("masked_fill", x, "x");
  require_dtype("masked_fill", mask, "mask", {DType::u8});
  require_same_device("masked_fill", {&x, &mask});
  if (broadcast_shapes(x.shape(), mask.shape(), "masked_fill") != x.shape()) {
    throw std::invalid_argument(fmt::format("masked_fill: mask {} does not broadcast to x {}",
                                            to_string(mask.shape()), to_string(x.shape())));
  }
  Tensor out = select_scalar(mask, x, value, false);
  return autograd::record(
      std::move(out), "masked_fill", {x, mask}, [m = mask.detach()](const Tensor& g) {
        const Tensor gc = g.contiguous();
        return autograd::TensorList{select_scalar(m, gc, 0.0F, false), Tensor()};
      });
}

Tensor argmax(const Tensor& x, std::int64_t axis) {
  require_defined("argmax", x, "x");
  require_same_device("argmax", {&x});
  const std::int64_t ax = normalize_axis(axis, x.dim(), "argmax", x.shape());
  if (x.size(ax) == 0) {
    throw std::invalid_argument(
        fmt::format("argmax: axis {} of {} is empty", axis, to_string(x.shape())));
  }
  Tensor data = x.detach();
  if (data.dtype() == DType::f16 || data.dtype() == DType::bf16) data = data.to(DType::f32);
  data = data.contiguous();
  Shape shape = x.shape();
  shape.erase(shape.begin() + ax);
  Tensor out = empty_on(data, shape, DType::i64);
  std::int64_t outer = 1, inner = 1;
  for (std::int64_t d = 0; d < ax; ++d) outer *= x.size(d);
  for (std::int64_t d = ax + 1; d < x.dim(); ++d) inner *= x.size(d);
  backend_of(data).argmax({data.raw_data(), data.dtype(), data.shape()}, outer, x.size(ax), inner,
                          out.data<std::int64_t>());
  return out;
}

std::pair<Tensor, Tensor> topk(const Tensor& x, std::int64_t k, std::int64_t axis) {
  require_defined("topk", x, "x");
  require_same_device("topk", {&x});
  const std::int64_t ax = normalize_axis(axis, x.dim(), "topk", x.shape());
  const std::int64_t n = x.size(ax);
  if (k < 0 || k > n) {
    throw std::invalid_argument(
        fmt::format("topk: k = {} out of range [0, {}] for {} along axis {}", k, n,
                    to_string(x.shape()), axis));
  }
  if (k > backend_of(x).topk_max_k()) {
    // Wider than the device's kernel selects (a GPU's 64: beam search with
    // more than 32 beams): on the host, the result back on x's device.
    auto [values, indices] = topk(x.detach().to(Device::cpu()), k, axis);
    return {values.to(x.device()), indices.to(x.device())};
  }
  const std::int64_t last = x.dim() - 1;
  Tensor data = x.detach();
  if (data.dtype() == DType::f16 || data.dtype() == DType::bf16) data = data.to(DType::f32);
  if (ax != last) data = data.transpose(ax, last);
  data = data.contiguous();
  Shape shape = data.shape();
  shape.back() = k;
  Tensor values = empty_on(data, shape, data.dtype());
  Tensor indices = empty_on(data, shape, DType::i64);
  backend_of(data).topk({data.raw_data(), data.dtype(), data.shape()},
                        n == 0 ? 0 : data.numel() / n, n, k, values.raw_data(),
                        indices.data<std::int64_t>());
  if (ax != last) {
    values = values.transpose(ax, last).contiguous();
    indices = indices.transpose(ax, last).contiguous();
  }
  if (values.dtype() != x.dtype()) values = values.to(x.dtype());
  return {values, indices};
}

}  // namespace rig::ops
