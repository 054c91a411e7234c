// Sum, mean and max reductions (and sum_to, the reduction that undoes
// broadcasting in backward passes). f16/bf16 inputs are reduced in f32 and
// the result cast back.
#include <algorithm>
#include <stdexcept>

#include <fmt/format.h>

#include "ops/op_util.hpp"
#include "rig/autograd.hpp"
#include "rig/ops.hpp"

namespace rig::ops {

namespace {

using detail::backend_of;
using detail::empty_on;
using detail::require_floating;

// Sorted, de-duplicated, normalised axes; throws on repeats.
Axes normalize_axes(const char* op, const Axes& axes, const Shape& shape) {
  Axes out;
  const auto dim = static_cast<std::int64_t>(shape.size());
  for (auto axis : axes) out.push_back(detail::normalize_axis(axis, dim, op, shape));
  std::sort(out.begin(), out.end());
  if (std::adjacent_find(out.begin(), out.end()) != out.end()) {
    throw std::invalid_argument(fmt::format("{}: axes [{}] repeat an axis of {}", op,
                                            fmt::join(axes, ","), to_string(shape)));
  }
  return out;
}

// Sums contiguous f32 `x` over sorted `axes`, keeping them as size 1; no history.
Tensor sum_keepdim(const Tensor& x, const Axes& axes, float scale) {
  Tensor cur = x.contiguous();
  Shape shape = cur.shape();
  // Reduce runs of adjacent axes, last run first: each is one [outer, r, inner] pass.
  std::size_t i = axes.size();
  while (i > 0) {
    std::size_t j = i - 1;
    while (j > 0 && axes[j - 1] + 1 == axes[j]) --j;
    const auto lo = static_cast<std::size_t>(axes[j]);
    const auto hi = static_cast<std::size_t>(axes[i - 1]) + 1;
    std::int64_t outer = 1, r = 1, inner = 1;
    for (std::size_t d = 0; d < lo; ++d) outer *= shape[d];
    for (std::size_t d = lo; d < hi; ++d) r *= shape[d];
    for (std::size_t d = hi; d < shape.size(); ++d) inner *= shape[d];
    Shape next = shape;
    for (std::size_t d = lo; d < hi; ++d) next[d] = 1;
    Tensor out = empty_on(cur, next);
    // Apply the scale once, on the last pass.
    backend_of(cur).sum_axis(cur.data<float>(), out.data<float>(), outer, r, inner,
                             j == 0 ? scale : 1.0F);
    cur = out;
    shape = next;
    i = j;
  }
  return cur;
}

// g (of `keep_shape`, broadcastable to `shape`) copied out to `shape`, times scale.
Tensor broadcast_back(const Tensor& g, const Shape& keep_shape, const Shape& shape, float scale) {
  const Tensor gk = g.contiguous().reshape(keep_shape);
  Tensor out = empty_on(gk, shape);
  if (out.numel() == 0) return out;
  backend::Backend& be = backend_of(gk);
  const Strides so = contiguous_strides(shape);
  const Strides sg = backend::broadcast_strides(gk.shape(), gk.strides(), shape);
  const auto plan = backend::make_strided_plan<2>(shape, {&so, &sg});
  be.broadcast_copy(plan, gk.data<float>(), out.data<float>());
  if (scale != 1.0F) {
    be.unary(backend::Unary::mul_scalar, out.data<float>(), out.data<float>(), out.numel(), scale);
  }
  return out;
}

Tensor reduce_axes(const char* name, const Tensor& a, const Axes& axes, bool keepdim, bool mean) {
  require_floating(name, a, "x");
  if (a.dtype() != DType::f32) {
    return reduce_axes(name, a.to(DType::f32), axes, keepdim, mean).to(a.dtype());
  }
  const Shape& shape = a.shape();
  const auto sorted = normalize_axes(name, axes, shape);
  std::int64_t count = 1;
  for (auto axis : sorted) count *= shape[static_cast<std::size_t>(axis)];
  if (mean && count == 0) {
    throw std::invalid_argument(fmt::format("{}: no elements to average over axes [{}] of {}", name,
                                            fmt::join(axes, ","), to_string(shape)));
  }
  const float scale = mean ? 1.0F / static_cast<float>(count) : 1.0F;
  Shape keep_shape = shape;
  for (auto axis : sorted) keep_shape[static_cast<std::size_t>(axis)] = 1;
  Shape out_shape;
  for (std::size_t d = 0; d < shape.size(); ++d) {
    if (!std::binary_search(sorted.begin(), sorted.end(), static_cast<std::int64_t>(d))) {
      out_shape.push_back(shape[d]);
    } else if (keepdim) {
      out_shape.push_back(1);
    }
  }
  // No axes: nothing is reduced (NumPy's convention), a copy.
  Tensor out = sorted.empty() ? a.detach().clone() : sum_keepdim(a.detach(), sorted, scale);
  out = out.reshape(out_shape);
  return autograd::record(
      std::move(out), name, {a}, [keep_shape, shape = a.shape(), scale](const Tensor& g) {
        return autograd::TensorList{broadcast_back(g, keep_shape, shape, scale)};
      });
}

Tensor reduce_all(const char* name, const Tensor& a, bool mean) {
  require_floating(name, a, "x");
  if (a.dtype() != DType::f32) return reduce_all(name, a.to(DType::f32), mean).to(a.dtype());
  const auto n = a.numel();
  if (mean && n == 0) {
    throw std::invalid_argument(fmt::format("{}: empty tensor {}", name, to_string(a.shape())));
  }
  const Tensor x = a.contiguous();
  Tensor total = empty_on(x, {});
  backend_of(x).sum_all(x.data<float>(), n, mean ? static_cast<double>(n) : 1.0,
                        total.data<float>());
  const float scale = mean ? 1.0F / static_cast<float>(n) : 1.0F;
  Shape keep_shape(a.shape().size(), 1);
  return autograd::record(
      std::move(total), name, {a}, [shape = a.shape(), keep_shape, scale](const Tensor& g) {
        return autograd::TensorList{broadcast_back(g, keep_shape, shape, scale)};
      });
}

}  // namespace

namespace detail {

Tensor sum_to(const Tensor& g, const Shape& target) {
  if (g.shape() == target) return g;
  const Shape& shape = g.shape();
  Axes axes;
  const std::size_t lead = shape.size() - target.size();
  for (std::size_t d = 0; d < shape.size(); ++d) {
    if (d < lead || (target[d - lead] == 1 && shape[d] != 1)) {
      axes.push_back(static_cast<std::int64_t>(d));
    }
  }
  const Tensor gf = as_f32(g);
  Tensor summed = axes.empty() ? gf.contiguous() : sum_keepdim(gf, axes, 1.0F);
  return summed.detach().reshape(target);
}

}  // namespace detail

Tensor sum(const Tensor& a) {
  return reduce_all("sum", a, false);
}
Tensor mean(const Tensor& a) {
  return reduce_all("mean", a, true);
}

Tensor sum(const Tensor& a, const Axes& axes, bool keepdim) {
  return reduce_axes("sum", a, axes, keepdim, false);
}
Tensor mean(const Tensor& a, const Axes& axes, bool keepdim) {
  return reduce_axes("mean", a, axes, keepdim, true);
}

Tensor max(const Tensor& a, std::int64_t axis, bool keepdim) {
  require_floating("max", a, "x");
  if (a.dtype() != DType::f32) return max(a.to(DType::f32), axis, keepdim).to(a.dtype());
  const Shape& shape = a.shape();
  const auto ax = static_cast<std::size_t>(detail::normalize_axis(axis, a.dim(), "max", shape));
  if (shape[ax] == 0) {
    throw std::invalid_argument(fmt::format("max: axis {} of {} is empty", axis, to_string(shape)));
  }
  std::int64_t outer = 1, inner = 1;
  for (std::size_t d = 0; d < ax; ++d) outer *= shape[d];
  for (std::size_t d = ax + 1; d < shape.size(); ++d) inner *= shape[d];
  const std::int64_t r = shape[ax];
  Shape keep_shape = shape;
  keep_shape[ax] = 1;
  const Tensor x = a.contiguous();
  Tensor values = empty_on(x, keep_shape);
  Tensor index = empty_on(x, keep_shape, DType::i64);
  backend_of(x).max_axis(x.data<float>(), values.data<float>(), index.data<std::int64_t>(), outer,
                         r, inner);
  Shape out_shape = shape;
  if (keepdim) {
    out_shape[ax] = 1;
  } else {
    out_shape.erase(out_shape.begin() + static_cast<std::ptrdiff_t>(ax));
  }
  Tensor out = values.reshape(out_shape);
  return autograd::record(
      std::move(out), "max", {a}, [index, shape = a.shape(), outer, r, inner](const Tensor& g) {
        const Tensor gc = g.contiguous();
        Tensor dx = empty_on(gc, shape);
        backend_of(gc).max_axis_backward(gc.data<float>(), index.data<std::int64_t>(),
                                         dx.data<float>(), outer, r, inner);
        return autograd::TensorList{dx};
      });
}

}  // namespace rig::ops
