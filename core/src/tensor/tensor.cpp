// Tensor: factories, accessors, element access, copies and casts, autograd
// bookkeeping and grad mode. Views are in views.cpp.
#include "rig/tensor.hpp"

#include <algorithm>
#include <stdexcept>

#include <fmt/format.h>

#include "backend/backend.hpp"
#include "rig/autograd.hpp"
#include "tensor/object_pool.hpp"

namespace rig {

namespace {

thread_local bool g_grad_mode = true;

TensorImpl& checked(const std::shared_ptr<TensorImpl>& impl, const char* what) {
  if (!impl) throw std::logic_error(fmt::format("Tensor::{}: the tensor is undefined", what));
  return *impl;
}

backend::Backend& backend_of(const Tensor& t) {
  return backend::backend_for(t.device());
}

template <class T>
Tensor from_values(const std::vector<T>& values, Shape shape, Device device) {
  if (static_cast<std::int64_t>(values.size()) != shape_numel(shape)) {
    throw std::invalid_argument(fmt::format("Tensor::from_vector: {} values for shape {}",
                                            values.size(), to_string(shape)));
  }
  Tensor t = Tensor::empty(std::move(shape), dtype_of<T>(), device);
  if (!values.empty()) {
    backend_of(t).from_host(t.raw_data(), values.data(), values.size() * sizeof(T));
  }
  return t;
}

// The tensor's elements, contiguous, as `dtype` in host memory: copied off
// the device (contiguous first, there), then converted on the host.
template <class T>
std::vector<T> host_values(const Tensor& t, DType dtype) {
  std::vector<T> out(static_cast<std::size_t>(t.numel()));
  if (out.empty()) return out;
  const Tensor c = t.is_contiguous() ? t : t.detach().clone();
  backend::Backend& host = backend::cpu_backend();
  if (c.dtype() == dtype) {
    backend_of(c).to_host(out.data(), c.raw_data(), c.nbytes());
    return out;
  }
  std::vector<std::byte> raw(c.nbytes());
  backend_of(c).to_host(raw.data(), c.raw_data(), c.nbytes());
  const Strides dense = contiguous_strides(c.shape());
  host.copy_strided(c.shape(), out.data(), dense, dtype, raw.data(), dense, c.dtype());
  return out;
}

}  // namespace

// ---- Factories ----------------------------------------------------------------

Tensor Tensor::empty(Shape shape, DType dtype, Device device) {
  const auto bytes = static_cast<std::size_t>(shape_numel(shape)) * dtype_size(dtype);
  auto impl = detail::make_pooled<TensorImpl>();
  impl->strides = contiguous_strides(shape);
  impl->shape = std::move(shape);
  impl->dtype = dtype;
  impl->storage = detail::make_pooled<Storage>(bytes, device, dtype, impl->shape);
  return Tensor(std::move(impl));
}

Tensor Tensor::zeros(Shape shape, DType dtype, Device device) {
  Tensor t = empty(std::move(shape), dtype, device);
  if (t.nbytes() > 0) backend_of(t).zero_bytes(t.raw_data(), static_cast<std::int64_t>(t.nbytes()));
  return t;
}

Tensor Tensor::ones(Shape shape, DType dtype, Device device) {
  return full(std::move(shape), 1.0F, dtype, device);
}

Tensor Tensor::full(Shape shape, float value, DType dtype, Device device) {
  Tensor t = empty(std::move(shape), dtype, device);
  t.fill_(value);
  return t;
}

Tensor Tensor::from_vector(const std::vector<float>& values, Shape shape, Device device) {
  return from_values(values, std::move(shape), device);
}
Tensor Tensor::from_vector(const std::vector<std::int64_t>& values, Shape shape, Device device) {
  return from_values(values, std::move(shape), device);
}
Tensor Tensor::from_vector(const std::vector<std::uint8_t>& values, Shape shape, Device device) {
  return from_values(values, std::move(shape), device);
}

Tensor Tensor::arange(std::int64_t n, DType dtype, Device device) {
  if (n < 0) throw std::invalid_argument(fmt::format("Tensor::arange: negative length {}", n));
  std::vector<std::int64_t> values(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) values[static_cast<std::size_t>(i)] = i;
  const Tensor t = from_values(values, {n}, device);
  return dtype == DType::i64 ? t : t.to(dtype);
}

Tensor Tensor::view_of(std::shared_ptr<Storage> storage, std::int64_t offset, Shape shape,
                       DType dtype) {
  if (!storage) throw std::invalid_argument("Tensor::view_of: no storage");
  const auto n = shape_numel(shape);
  const auto size = static_cast<std::int64_t>(dtype_size(dtype));
  if (offset < 0 || (offset + n) * size > static_cast<std::int64_t>(storage->size())) {
    throw std::invalid_argument(
        fmt::format("Tensor::view_of: {} {} at element {} does not fit in a storage of {} bytes",
                    dtype_name(dtype), to_string(shape), offset, storage->size()));
  }
  auto impl = detail::make_pooled<TensorImpl>();
  impl->strides = contiguous_strides(shape);
  impl->shape = std::move(shape);
  impl->offset = offset;
  impl->dtype = dtype;
  impl->storage = std::move(storage);
  return Tensor(std::move(impl));
}

// ---- Accessors -----------------------------------------------------------------

const Shape& Tensor::shape() const {
  return checked(impl_, "shape").shape;
}
const Strides& Tensor::strides() const {
  return checked(impl_, "strides").strides;
}
std::int64_t Tensor::offset() const {
  return checked(impl_, "offset").offset;
}

std::int64_t Tensor::size(std::int64_t axis) const {
  const auto n = dim();
  const auto a = axis < 0 ? axis + n : axis;
  if (a < 0 || a >= n) {
    throw std::invalid_argument(fmt::format("Tensor::size: axis {} is out of range for shape {}",
                                            axis, to_string(shape())));
  }
  return shape()[static_cast<std::size_t>(a)];
}

DType Tensor::dtype() const {
  return checked(impl_, "dtype").dtype;
}

Device Tensor::device() const {
  auto& impl = checked(impl_, "device");
  return impl.storage ? impl.storage->device() : Device::cpu();
}

bool Tensor::is_contiguous() const {
  const auto& impl = checked(impl_, "is_contiguous");
  std::int64_t expected = 1;
  for (std::size_t i = impl.shape.size(); i-- > 0;) {
    const auto d = impl.shape[i];
    if (d == 0) return true;
    if (d == 1) continue;  // any stride works for a size-1 axis
    if (impl.strides[i] != expected) return false;
    expected *= d;
  }
  return true;
}

bool Tensor::sole_owner() const {
  return impl_ != nullptr && impl_.use_count() == 1 && impl_->storage != nullptr &&
         impl_->storage.use_count() == 1;
}

bool Tensor::shares_storage(const Tensor& other) const {
  const auto& a = checked(impl_, "shares_storage");
  const auto& b = checked(other.impl_, "shares_storage");
  if (!a.storage || a.storage != b.storage || numel() == 0 || other.numel() == 0) return false;
  // Byte ranges [first, last] of the two tensors overlap.
  auto range = [](const TensorImpl& t) {
    std::int64_t last = t.offset;
    for (std::size_t i = 0; i < t.shape.size(); ++i) last += (t.shape[i] - 1) * t.strides[i];
    const auto size = static_cast<std::int64_t>(dtype_size(t.dtype));
    return std::pair{t.offset * size, (last + 1) * size - 1};
  };
  const auto [a0, a1] = range(a);
  const auto [b0, b1] = range(b);
  return a0 <= b1 && b0 <= a1;
}

std::byte* Tensor::raw_data() {
  return const_cast<std::byte*>(static_cast<const Tensor*>(this)->raw_data());
}

const std::byte* Tensor::raw_data() const {
  auto& impl = checked(impl_, "data");
  if (!impl.storage) {
    throw std::logic_error(
        "Tensor::data: the tensor has no storage yet (a parameter used before "
        "ParameterStore::allocate()?)");
  }
  return impl.storage->data() + impl.offset * static_cast<std::int64_t>(dtype_size(impl.dtype));
}

template <class T>
T* Tensor::data() {
  return const_cast<T*>(static_cast<const Tensor*>(this)->data<T>());
}

template <class T>
const T* Tensor::data() const {
  const DType t = dtype();
  bool ok = false;
  std::string_view asked;
  if constexpr (std::is_same_v<T, std::uint16_t>) {
    ok = t == DType::f16 || t == DType::bf16;
    asked = "u16";
  } else {
    ok = t == dtype_of<T>();
    asked = dtype_name(dtype_of<T>());
  }
  if (!ok) {
    throw std::invalid_argument(
        fmt::format("Tensor::data<{}>() on a {} tensor", asked, dtype_name(t)));
  }
  return reinterpret_cast<const T*>(raw_data());
}

template float* Tensor::data<float>();
template const float* Tensor::data<float>() const;
template std::uint16_t* Tensor::data<std::uint16_t>();
template const std::uint16_t* Tensor::data<std::uint16_t>() const;
template std::int32_t* Tensor::data<std::int32_t>();
template const std::int32_t* Tensor::data<std::int32_t>() const;
template std::int64_t* Tensor::data<std::int64_t>();
template const std::int64_t* Tensor::data<std::int64_t>() const;
template std::uint8_t* Tensor::data<std::uint8_t>();
template const std::uint8_t* Tensor::data<std::uint8_t>() const;

float Tensor::item() const {
  if (numel() != 1) {
    throw std::invalid_argument(
        fmt::format("Tensor::item: the tensor has shape {}, not one element", to_string(shape())));
  }
  return host_values<float>(*this, DType::f32).front();
}

std::vector<float> Tensor::to_vector() const {
  return host_values<float>(*this, DType::f32);
}

std::vector<std::int64_t> Tensor::to_int_vector() const {
  if (is_floating(dtype())) {
    throw std::invalid_argument(fmt::format(
        "Tensor::to_int_vector: a {} tensor; integer dtypes only", dtype_name(dtype())));
  }
  return host_values<std::int64_t>(*this, DType::i64);
}

// ---- Copies and casts ----------------------------------------------------------

Tensor Tensor::contiguous() const {
  return is_contiguous() ? *this : clone();
}

Tensor Tensor::clone() const {
  Tensor out = empty(shape(), dtype(), device());
  out.copy_from(*this);
  return autograd::record(std::move(out), "clone", {*this},
                          [](const Tensor& g) { return autograd::TensorList{g}; });
}

Tensor Tensor::to(DType target) const {
  const DType source = dtype();
  if (target == source) return *this;
  Tensor out = empty(shape(), target, device());
  out.copy_from(*this);
  if (!is_floating(source) || !is_floating(target)) return out;
  return autograd::record(std::move(out), "to", {*this},
                          [source](const Tensor& g) { return autograd::TensorList{g.to(source)}; });
}

Tensor Tensor::to(Device target) const {
  const Device source = device();
  if (target == source) return *this;
  const Tensor c = is_contiguous() ? detach() : detach().clone();
  Tensor out = empty(shape(), dtype(), target);
  if (out.nbytes() > 0) {
    if (source.is_cpu()) {
      backend_of(out).from_host(out.raw_data(), c.raw_data(), c.nbytes());
    } else if (target.is_cpu()) {
      backend_of(c).to_host(out.raw_data(), c.raw_data(), c.nbytes());
    } else {  // between two devices: through host memory
      std::vector<std::byte> staging(c.nbytes());
      backend_of(c).to_host(staging.data(), c.raw_data(), c.nbytes());
      backend_of(out).from_host(out.raw_data(), staging.data(), staging.size());
    }
  }
  if (!is_floating(dtype())) return out;
  return autograd::record(std::move(out), "to_device", {*this},
                          [source](const Tensor& g) { return autograd::TensorList{g.to(source)}; });
}

Tensor Tensor::to_host() const {
  return to(Device::cpu());
}

void Tensor::copy_from(const Tensor& src) {
  if (!src.defined() || shape() != src.shape()) {
    throw std::invalid_argument(fmt::format("Tensor::copy_from: {} {} from {} {}: shapes differ",
                                            dtype_name(dtype()), to_string(shape()),
                                            src.defined() ? dtype_name(src.dtype()) : "undefined",
                                            src.defined() ? to_string(src.shape()) : ""));
  }
  if (numel() == 0) return;
  if (device() != src.device()) {
    copy_from(src.detach().to(device()));
    return;
  }
  for (std::size_t i = 0; i < shape().size(); ++i) {
    if (strides()[i] == 0 && shape()[i] > 1) {
      throw std::invalid_argument(fmt::format(
          "Tensor::copy_from: the destination {} with strides {} repeats elements (an expanded "
          "view); copy into a contiguous tensor instead",
          to_string(shape()), to_string(strides())));
    }
  }
  if (shares_storage(src)) {
    if (impl_ == src.impl_) return;
    const Tensor copy = src.detach().clone();  // overlapping: go through a temporary
    copy_from(copy);
    return;
  }
  backend_of(*this).copy_strided(shape(), raw_data(), strides(), dtype(), src.raw_data(),
                                 src.strides(), src.dtype());
}

void Tensor::fill_(float value) {
  if (numel() == 0) return;
  backend_of(*this).fill_strided(shape(), raw_data(), strides(), dtype(), value);
}

// ---- Autograd ------------------------------------------------------------------

bool Tensor::requires_grad() const {
  return checked(impl_, "requires_grad").requires_grad;
}

Tensor& Tensor::set_requires_grad(bool value) {
  auto& impl = checked(impl_, "set_requires_grad");
  if (impl.grad_fn) {
    if (!value) {
      throw std::logic_error("Tensor::set_requires_grad(false) on a non-leaf tensor; use detach()");
    }
    return *this;
  }
  if (value && !is_floating(impl.dtype)) {
    throw std::invalid_argument(
        fmt::format("Tensor::set_requires_grad: a {} tensor cannot require a gradient",
                    dtype_name(impl.dtype)));
  }
  impl.requires_grad = value;
  return *this;
}

Tensor Tensor::grad() const {
  return Tensor(checked(impl_, "grad").grad);
}

void Tensor::set_grad(const Tensor& grad) {
  auto& impl = checked(impl_, "set_grad");
  if (grad.defined() && (grad.shape() != impl.shape || grad.dtype() != impl.dtype)) {
    throw std::invalid_argument(fmt::format("Tensor::set_grad: a {} {} gradient for a {} {} tensor",
                                            dtype_name(grad.dtype()), to_string(grad.shape()),
                                            dtype_name(impl.dtype), to_string(impl.shape)));
  }
  impl.grad = grad.impl_ptr();
}

void Tensor::backward() const {
  autograd::backward(*this);
}

Tensor Tensor::detach() const {
  auto& src = checked(impl_, "detach");
  auto impl = detail::make_pooled<TensorImpl>();
  impl->shape = src.shape;
  impl->strides = src.strides;
  impl->offset = src.offset;
  impl->dtype = src.dtype;
  impl->storage = src.storage;
  return Tensor(std::move(impl));
}

GradModeGuard::GradModeGuard(bool enabled) : previous_(g_grad_mode) {
  g_grad_mode = enabled;
}
GradModeGuard::~GradModeGuard() {
  g_grad_mode = previous_;
}
bool grad_mode_enabled() {
  return g_grad_mode;
}

}  // namespace rig
