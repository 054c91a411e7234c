#include "ops/op_util.hpp"

#include <algorithm>
#include <stdexcept>
#include <utility>
#include <vector>

#include <fmt/format.h>

namespace rig::ops::detail {

std::int64_t normalize_axis(std::int64_t axis, std::int64_t dim, std::string_view op,
                            const Shape& shape) {
  const std::int64_t a = axis < 0 ? axis + dim : axis;
  if (a < 0 || a >= dim) {
    throw std::invalid_argument(
        fmt::format("{}: axis {} out of range for {}", op, axis, to_string(shape)));
  }
  return a;
}

void require_defined(std::string_view op, const Tensor& t, std::string_view role) {
  if (!t.defined()) throw std::invalid_argument(fmt::format("{}: {} is undefined", op, role));
}

void require_dtype(std::string_view op, const Tensor& t, std::string_view role,
                   std::initializer_list<DType> allowed) {
  require_defined(op, t, role);
  if (std::find(allowed.begin(), allowed.end(), t.dtype()) != allowed.end()) return;
  std::vector<std::string_view> names;
  for (DType d : allowed) names.push_back(dtype_name(d));
  throw std::invalid_argument(fmt::format("{}: {} must be {}, got {} {}", op, role,
                                          fmt::join(names, " or "), dtype_name(t.dtype()),
                                          to_string(t.shape())));
}

void require_floating(std::string_view op, const Tensor& t, std::string_view role) {
  require_dtype(op, t, role, {DType::f32, DType::f16, DType::bf16});
}

void require_same_device(std::string_view op, std::initializer_list<const Tensor*> tensors) {
  const Tensor* first = nullptr;
  bool same = true;
  for (const Tensor* t : tensors) {
    if (t == nullptr || !t->defined()) continue;
    if (first == nullptr) {
      first = t;
    } else if (!(t->device() == first->device())) {
      same = false;
    }
  }
  if (same) return;
  std::vector<std::string> parts;
  for (const Tensor* t : tensors) {
    if (t == nullptr || !t->defined()) continue;
    parts.push_back(fmt::format("{} on {}", to_string(t->shape()), to_string(t->device())));
  }
  throw std::invalid_argument(
      fmt::format("{}: tensors on different devices: {}", op, fmt::join(parts, ", ")));
}

backend::Backend& backend_of(const Tensor& t) {
  return backend::backend_for(t.device());
}

std::int64_t index_value_at(const Tensor& index, std::int64_t position) {
  return index.reshape({index.numel()}).slice(0, position, position + 1).to_int_vector().front();
}

Tensor empty_on(const Tensor& like, Shape shape, DType dtype) {
  return Tensor::empty(std::move(shape), dtype, like.device());
}

Tensor zeros_on(const Tensor& like, Shape shape, DType dtype) {
  return Tensor::zeros(std::move(shape), dtype, like.device());
}

Tensor gradient_buffer(bool needed, const Tensor& into, const Tensor& like, Shape shape,
                       DType dtype) {
  if (!needed) return {};
  return into.defined() ? into : empty_on(like, std::move(shape), dtype);
}

std::string shape_str(const Tensor& t, bool transposed) {
  return to_string(t.shape()) + (transposed ? "^T" : "");
}

Tensor as_f32(const Tensor& t) {
  return t.dtype() == DType::f32 ? t : t.to(DType::f32);
}

}  // namespace rig::ops::detail
