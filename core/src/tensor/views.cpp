// Views: tensors that share their input's storage with other shape, strides
// or offset. Each records autograd history whose backward maps the gradient
// back to the input's shape.
#include <algorithm>
#include <optional>
#include <stdexcept>

#include <fmt/format.h>

#include "backend/backend.hpp"
#include "rig/autograd.hpp"
#include "rig/tensor.hpp"
#include "tensor/object_pool.hpp"

namespace rig {

namespace {

Tensor make_view(const Tensor& base, Shape shape, Strides strides, std::int64_t offset) {
  auto impl = detail::make_pooled<TensorImpl>();
  impl->shape = std::move(shape);
  impl->strides = std::move(strides);
  impl->offset = offset;
  impl->dtype = base.dtype();
  impl->storage = base.impl()->storage;
  return Tensor(std::move(impl));
}

std::int64_t normalize_axis(const char* op, std::int64_t axis, std::int64_t ndim,
                            const Shape& shape) {
  const auto a = axis < 0 ? axis + ndim : axis;
  if (a < 0 || a >= ndim) {
    throw std::invalid_argument(
        fmt::format("Tensor::{}: axis {} out of range for {}", op, axis, to_string(shape)));
  }
  return a;
}

// `requested` with a -1 inferred from `numel`; throws naming op and both shapes.
Shape infer_shape(const char* op, const Shape& from, const Shape& requested) {
  const auto n = shape_numel(from);
  Shape shape = requested;
  const auto unknown = std::count(shape.begin(), shape.end(), -1);
  bool ok = unknown <= 1;
  if (ok && unknown == 1) {
    auto it = std::find(shape.begin(), shape.end(), -1);
    *it = 1;
    const bool negative = std::any_of(shape.begin(), shape.end(), [](auto d) { return d < 0; });
    const auto rest = negative ? 0 : shape_numel(shape);
    *it = rest > 0 && n % rest == 0 ? n / rest : -1;
  }
  ok = ok && std::none_of(shape.begin(), shape.end(), [](auto d) { return d < 0; }) &&
       shape_numel(shape) == n;
  if (!ok) {
    throw std::invalid_argument(fmt::format("Tensor::{}: {} ({} elements) to {}", op,
                                            to_string(from), n, to_string(requested)));
  }
  return shape;
}

// Strides that view (shape, strides) as `target` without copying, if any
// (PyTorch's computeStride): each run of input axes that is contiguous in
// memory may be split or merged freely.
std::optional<Strides> view_strides(const Shape& shape, const Strides& strides,
                                    const Shape& target) {
  if (shape.empty() || shape_numel(shape) == 0) return contiguous_strides(target);
  Strides out(target.size());
  auto view_d = static_cast<std::int64_t>(target.size()) - 1;
  std::int64_t chunk_base_stride = strides.back();
  std::int64_t tensor_numel = 1;
  std::int64_t view_numel = 1;
  for (auto tensor_d = static_cast<std::int64_t>(shape.size()) - 1; tensor_d >= 0; --tensor_d) {
    const auto td = static_cast<std::size_t>(tensor_d);
    tensor_numel *= shape[td];
    if (tensor_d == 0 ||
        (shape[td - 1] != 1 && strides[td - 1] != tensor_numel * chunk_base_stride)) {
      while (view_d >= 0 &&
             (view_numel < tensor_numel || target[static_cast<std::size_t>(view_d)] == 1)) {
        out[static_cast<std::size_t>(view_d)] = view_numel * chunk_base_stride;
        view_numel *= target[static_cast<std::size_t>(view_d)];
        --view_d;
      }
      if (view_numel != tensor_numel) return std::nullopt;
      if (tensor_d > 0) {
        chunk_base_stride = strides[td - 1];
        tensor_numel = 1;
        view_numel = 1;
      }
    }
  }
  if (view_d != -1) return std::nullopt;
  return out;
}

Tensor record_view(Tensor view, const char* op, const Tensor& input,
                   autograd::BackwardFn backward) {
  return autograd::record(std::move(view), op, {input}, std::move(backward));
}

// Strides of `shape`/`strides` broadcast to `target` (stride 0 on new or
// size-1 axes); throws naming op when they do not broadcast.
Strides broadcast_strides(const char* op, const Shape& shape, const Strides& strides,
                          const Shape& target) {
  if (target.size() < shape.size()) {
    throw std::invalid_argument(
        fmt::format("Tensor::{}: {} to {}: fewer axes", op, to_string(shape), to_string(target)));
  }
  const std::size_t lead = target.size() - shape.size();
  Strides out(target.size(), 0);
  for (std::size_t i = 0; i < shape.size(); ++i) {
    const auto t = target[lead + i];
    if (shape[i] == t) {
      out[lead + i] = strides[i];
    } else if (shape[i] != 1) {
      throw std::invalid_argument(
          fmt::format("Tensor::{}: {} to {}: axis {} has size {}, not 1 or {}", op,
                      to_string(shape), to_string(target), i, shape[i], t));
    }
  }
  return out;
}

// The gradient of an expand: g summed over the broadcast axes, in `shape`.
Tensor sum_to_shape(const Tensor& g, const Shape& shape) {
  if (g.shape() == shape) return g;
  Tensor out = Tensor::zeros(shape, g.dtype(), g.device());
  const Strides strides = broadcast_strides("expand", shape, out.strides(), g.shape());
  backend::backend_for(out.device())
      .add_strided(g.shape(), out.raw_data(), strides, out.dtype(), g.raw_data(), g.strides(),
                   g.dtype());
  return out;
}

}  // namespace

Tensor Tensor::view(Shape requested) const {
  const Shape target = infer_shape("view", shape(), requested);
  auto strides_or = view_strides(shape(), strides(), target);
  if (!strides_or) {
    throw std::invalid_argument(fmt::format(
        "Tensor::view: {} with strides {} cannot be viewed as {} without a copy; use reshape()",
        to_string(shape()), to_string(strides()), to_string(requested)));
  }
  return record_view(
      make_view(*this, target, std::move(*strides_or), offset()), "view", *this,
      [old = shape()](const Tensor& g) { return autograd::TensorList{g.reshape(old)}; });
}

Tensor Tensor::reshape(Shape requested) const {
  const Shape target = infer_shape("reshape", shape(), requested);
  auto strides_or = view_strides(shape(), strides(), target);
  if (!strides_or) return contiguous().view(target);  // clone + view, both recorded
  return record_view(
      make_view(*this, target, std::move(*strides_or), offset()), "reshape", *this,
      [old = shape()](const Tensor& g) { return autograd::TensorList{g.reshape(old)}; });
}

Tensor Tensor::transpose(std::int64_t axis0, std::int64_t axis1) const {
  const auto a = static_cast<std::size_t>(normalize_axis("transpose", axis0, dim(), shape()));
  const auto b = static_cast<std::size_t>(normalize_axis("transpose", axis1, dim(), shape()));
  Shape s = shape();
  Strides st = strides();
  std::swap(s[a], s[b]);
  std::swap(st[a], st[b]);
  return record_view(
      make_view(*this, std::move(s), std::move(st), offset()), "transpose", *this,
      [axis0, axis1](const Tensor& g) { return autograd::TensorList{g.transpose(axis0, axis1)}; });
}

Tensor Tensor::permute(const Axes& axes) const {
  const auto n = dim();
  Axes inverse(static_cast<std::size_t>(n), -1);
  bool ok = static_cast<std::int64_t>(axes.size()) == n;
  for (std::size_t i = 0; ok && i < axes.size(); ++i) {
    const auto a = axes[i] < 0 ? axes[i] + n : axes[i];
    ok = a >= 0 && a < n && inverse[static_cast<std::size_t>(a)] == -1;
    if (ok) inverse[static_cast<std::size_t>(a)] = static_cast<std::int64_t>(i);
  }
  if (!ok) {
    throw std::invalid_argument(
        fmt::format("Tensor::permute: [{}] is not a permutation of the axes of {}",
                    fmt::join(axes, ","), to_string(shape())));
  }
  Shape s(axes.size());
  Strides st(axes.size());
  for (std::size_t i = 0; i < axes.size(); ++i) {
    const auto a = static_cast<std::size_t>(axes[i] < 0 ? axes[i] + n : axes[i]);
    s[i] = shape()[a];
    st[i] = strides()[a];
  }
  return record_view(
      make_view(*this, std::move(s), std::move(st), offset()), "permute", *this,
      [inverse](const Tensor& g) { return autograd::TensorList{g.permute(inverse)}; });
}

Tensor Tensor::slice(std::int64_t axis, std::int64_t start, std::int64_t end,
                     std::int64_t step) const {
  const auto a = static_cast<std::size_t>(normalize_axis("slice", axis, dim(), shape()));
  if (step <= 0) {
    throw std::invalid_argument(
        fmt::format("Tensor::slice: step {} of {} must be positive", step, to_string(shape())));
  }
  const auto size = shape()[a];
  // Python's slice semantics: negative counts from the end, then clamped.
  auto clamp = [size](std::int64_t i) {
    return std::clamp(i < 0 ? i + size : i, std::int64_t{0}, size);
  };
  const auto first = clamp(start);
  const auto last = std::max(first, clamp(end));
  const auto length = (last - first + step - 1) / step;
  Shape s = shape();
  Strides st = strides();
  s[a] = length;
  const auto new_offset = offset() + (length > 0 ? first * st[a] : 0);
  st[a] *= step;
  return record_view(make_view(*this, std::move(s), std::move(st), new_offset), "slice", *this,
                     [shape = shape(), axis, first, last, step](const Tensor& g) {
                       Tensor dx = zeros(shape, g.dtype(), g.device());
                       dx.slice(axis, first, last, step).copy_from(g);
                       return autograd::TensorList{dx};
                     });
}

Tensor Tensor::expand(Shape requested) const {
  Shape target = requested;
  const std::size_t lead = target.size() >= shape().size() ? target.size() - shape().size() : 0;
  for (std::size_t i = 0; i < target.size(); ++i) {
    if (target[i] != -1) continue;
    if (i < lead) {
      throw std::invalid_argument(fmt::format("Tensor::expand: {} to {}: -1 on a new axis",
                                              to_string(shape()), to_string(requested)));
    }
    target[i] = shape()[i - lead];
  }
  for (auto d : target) {
    if (d < 0) {
      throw std::invalid_argument(fmt::format("Tensor::expand: {} to {}: negative size",
                                              to_string(shape()), to_string(requested)));
    }
  }
  Strides st = broadcast_strides("expand", shape(), strides(), target);
  return record_view(
      make_view(*this, target, std::move(st), offset()), "expand", *this,
      [shape = shape()](const Tensor& g) { return autograd::TensorList{sum_to_shape(g, shape)}; });
}

Tensor Tensor::unsqueeze(std::int64_t axis) const {
  const auto a = static_cast<std::size_t>(normalize_axis("unsqueeze", axis, dim() + 1, shape()));
  Shape s = shape();
  Strides st = strides();
  const std::int64_t stride = a < s.size() ? st[a] * std::max<std::int64_t>(s[a], 1) : 1;
  s.insert(s.begin() + static_cast<std::ptrdiff_t>(a), 1);
  st.insert(st.begin() + static_cast<std::ptrdiff_t>(a), stride);
  return record_view(make_view(*this, std::move(s), std::move(st), offset()), "unsqueeze", *this,
                     [a](const Tensor& g) {
                       return autograd::TensorList{g.squeeze(static_cast<std::int64_t>(a))};
                     });
}

Tensor Tensor::squeeze(std::int64_t axis) const {
  const auto a = static_cast<std::size_t>(normalize_axis("squeeze", axis, dim(), shape()));
  if (shape()[a] != 1) {
    throw std::invalid_argument(fmt::format("Tensor::squeeze: axis {} of {} has size {}, not 1",
                                            axis, to_string(shape()), shape()[a]));
  }
  Shape s = shape();
  Strides st = strides();
  s.erase(s.begin() + static_cast<std::ptrdiff_t>(a));
  st.erase(st.begin() + static_cast<std::ptrdiff_t>(a));
  return record_view(make_view(*this, std::move(s), std::move(st), offset()), "squeeze", *this,
                     [a](const Tensor& g) {
                       return autograd::TensorList{g.unsqueeze(static_cast<std::int64_t>(a))};
                     });
}

Tensor Tensor::flatten(std::int64_t start_axis, std::int64_t end_axis) const {
  if (dim() == 0) return reshape({1});
  const auto a = static_cast<std::size_t>(normalize_axis("flatten", start_axis, dim(), shape()));
  const auto b = static_cast<std::size_t>(normalize_axis("flatten", end_axis, dim(), shape()));
  if (a > b) {
    throw std::invalid_argument(fmt::format("Tensor::flatten: axes {} to {} of {}", start_axis,
                                            end_axis, to_string(shape())));
  }
  Shape s(shape().begin(), shape().begin() + static_cast<std::ptrdiff_t>(a));
  std::int64_t n = 1;
  for (std::size_t i = a; i <= b; ++i) n *= shape()[i];
  s.push_back(n);
  s.insert(s.end(), shape().begin() + static_cast<std::ptrdiff_t>(b) + 1, shape().end());
  return reshape(std::move(s));
}

}  // namespace rig
