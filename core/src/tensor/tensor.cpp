// Tensor, Storage, dtype helpers and grad mode.
#include "rig/tensor.hpp"

#include <algorithm>
#include <cstring>
#include <stdexcept>

#include <fmt/format.h>

#include "rig/autograd.hpp"

namespace rig {

namespace {

thread_local bool g_grad_mode = true;

TensorImpl& checked(const std::shared_ptr<TensorImpl>& impl, const char* what) {
  if (!impl) throw std::logic_error(fmt::format("Tensor::{}: the tensor is undefined", what));
  return *impl;
}

}  // namespace

std::size_t dtype_size(DType dtype) {
  switch (dtype) {
    case DType::f32:
    case DType::i32:
      return 4;
    case DType::f16:
    case DType::bf16:
      return 2;
    case DType::i64:
      return 8;
    case DType::u8:
      return 1;
  }
  throw std::invalid_argument("dtype_size: unknown dtype");
}

std::string_view dtype_name(DType dtype) {
  switch (dtype) {
    case DType::f32:
      return "f32";
    case DType::f16:
      return "f16";
    case DType::bf16:
      return "bf16";
    case DType::i32:
      return "i32";
    case DType::i64:
      return "i64";
    case DType::u8:
      return "u8";
  }
  return "unknown";
}

std::string to_string(Device device) {
  return device.type == Device::Type::cpu ? std::string("cpu")
                                          : fmt::format("cuda:{}", device.index);
}

std::string to_string(const Shape& shape) {
  return fmt::format("[{}]", fmt::join(shape, ","));
}

std::int64_t shape_numel(const Shape& shape) {
  std::int64_t n = 1;
  for (auto d : shape) {
    if (d < 0) throw std::invalid_argument("negative dimension in shape " + to_string(shape));
    n *= d;
  }
  return n;
}

Storage::Storage(std::size_t bytes, Device device)
    : bytes_(std::make_unique_for_overwrite<std::byte[]>(bytes)), size_(bytes), device_(device) {
  if (device.type != Device::Type::cpu) {
    throw std::invalid_argument(fmt::format(
        "Storage: device {} is not supported by this build (cpu only)", to_string(device)));
  }
}

Tensor Tensor::empty(Shape shape, DType dtype, Device device) {
  const auto bytes = static_cast<std::size_t>(shape_numel(shape)) * dtype_size(dtype);
  auto impl = std::make_shared<TensorImpl>();
  impl->shape = std::move(shape);
  impl->dtype = dtype;
  impl->storage = std::make_shared<Storage>(bytes, device);
  return Tensor(std::move(impl));
}

Tensor Tensor::zeros(Shape shape, DType dtype, Device device) {
  Tensor t = empty(std::move(shape), dtype, device);
  if (t.nbytes() > 0) std::memset(t.raw_data(), 0, t.nbytes());
  return t;
}

Tensor Tensor::full(Shape shape, float value) {
  Tensor t = empty(std::move(shape), DType::f32);
  t.fill_(value);
  return t;
}

Tensor Tensor::from_vector(const std::vector<float>& values, Shape shape) {
  if (static_cast<std::int64_t>(values.size()) != shape_numel(shape)) {
    throw std::invalid_argument(fmt::format("Tensor::from_vector: {} values for shape {}",
                                            values.size(), to_string(shape)));
  }
  Tensor t = empty(std::move(shape), DType::f32);
  std::copy(values.begin(), values.end(), t.data<float>());
  return t;
}

Tensor Tensor::from_vector(const std::vector<std::int64_t>& values, Shape shape) {
  if (static_cast<std::int64_t>(values.size()) != shape_numel(shape)) {
    throw std::invalid_argument(fmt::format("Tensor::from_vector: {} values for shape {}",
                                            values.size(), to_string(shape)));
  }
  Tensor t = empty(std::move(shape), DType::i64);
  std::copy(values.begin(), values.end(), t.data<std::int64_t>());
  return t;
}

Tensor Tensor::view_of(std::shared_ptr<Storage> storage, std::size_t byte_offset, Shape shape,
                       DType dtype) {
  if (!storage) throw std::invalid_argument("Tensor::view_of: no storage");
  const auto bytes = static_cast<std::size_t>(shape_numel(shape)) * dtype_size(dtype);
  if (byte_offset + bytes > storage->size()) {
    throw std::invalid_argument(
        fmt::format("Tensor::view_of: {} {} at byte {} does not fit in a storage of {} bytes",
                    dtype_name(dtype), to_string(shape), byte_offset, storage->size()));
  }
  auto impl = std::make_shared<TensorImpl>();
  impl->shape = std::move(shape);
  impl->dtype = dtype;
  impl->storage = std::move(storage);
  impl->byte_offset = byte_offset;
  return Tensor(std::move(impl));
}

const Shape& Tensor::shape() const {
  return checked(impl_, "shape").shape;
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
  return impl.storage->data() + impl.byte_offset;
}

template <class T>
T* Tensor::data() {
  return const_cast<T*>(static_cast<const Tensor*>(this)->data<T>());
}

template <class T>
const T* Tensor::data() const {
  if (dtype() != dtype_of<T>()) {
    throw std::invalid_argument(fmt::format("Tensor::data<{}>() on a {} tensor",
                                            dtype_name(dtype_of<T>()), dtype_name(dtype())));
  }
  return reinterpret_cast<const T*>(raw_data());
}

template float* Tensor::data<float>();
template const float* Tensor::data<float>() const;
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
  switch (dtype()) {
    case DType::f32:
      return *data<float>();
    case DType::i32:
      return static_cast<float>(*data<std::int32_t>());
    case DType::i64:
      return static_cast<float>(*data<std::int64_t>());
    case DType::u8:
      return static_cast<float>(*data<std::uint8_t>());
    default:
      throw std::invalid_argument(
          fmt::format("Tensor::item: dtype {} is not supported", dtype_name(dtype())));
  }
}

std::vector<float> Tensor::to_vector() const {
  const float* p = data<float>();
  return std::vector<float>(p, p + numel());
}

Tensor Tensor::reshape(Shape requested) const {
  const auto n = numel();
  // One dimension may be -1: inferred from the others.
  Shape new_shape = requested;
  if (auto inferred = std::find(new_shape.begin(), new_shape.end(), -1);
      inferred != new_shape.end()) {
    *inferred = 1;
    const auto rest = shape_numel(new_shape);
    *inferred = rest > 0 && n % rest == 0 ? n / rest : -1;  // -1 fails below
  }
  if (std::any_of(new_shape.begin(), new_shape.end(), [](auto d) { return d < 0; }) ||
      shape_numel(new_shape) != n) {
    throw std::invalid_argument(fmt::format("Tensor::reshape: {} ({} elements) to {}",
                                            to_string(shape()), n, to_string(requested)));
  }
  auto impl = std::make_shared<TensorImpl>();
  impl->shape = new_shape;
  impl->dtype = impl_->dtype;
  impl->storage = impl_->storage;
  impl->byte_offset = impl_->byte_offset;
  Shape old_shape = shape();
  return autograd::record(
      Tensor(std::move(impl)), "reshape", {*this},
      [old_shape](const Tensor& g) -> std::vector<Tensor> { return {g.reshape(old_shape)}; });
}

Tensor Tensor::clone() const {
  Tensor t = empty(shape(), dtype(), device());
  if (nbytes() > 0) std::memcpy(t.raw_data(), raw_data(), nbytes());
  return t;
}

void Tensor::fill_(float value) {
  const auto n = numel();
  switch (dtype()) {
    case DType::f32:
      std::fill_n(data<float>(), n, value);
      return;
    case DType::i32:
      std::fill_n(data<std::int32_t>(), n, static_cast<std::int32_t>(value));
      return;
    case DType::i64:
      std::fill_n(data<std::int64_t>(), n, static_cast<std::int64_t>(value));
      return;
    case DType::u8:
      std::fill_n(data<std::uint8_t>(), n, static_cast<std::uint8_t>(value));
      return;
    default:
      throw std::invalid_argument(
          fmt::format("Tensor::fill_: dtype {} is not supported", dtype_name(dtype())));
  }
}

void Tensor::copy_from(const Tensor& other) {
  if (shape() != other.shape() || dtype() != other.dtype()) {
    throw std::invalid_argument(fmt::format("Tensor::copy_from: {} {} from {} {}",
                                            dtype_name(dtype()), to_string(shape()),
                                            dtype_name(other.dtype()), to_string(other.shape())));
  }
  if (nbytes() > 0) std::memmove(raw_data(), other.raw_data(), nbytes());
}

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
  if (value && impl.dtype != DType::f32) {
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
  auto impl = std::make_shared<TensorImpl>();
  impl->shape = src.shape;
  impl->dtype = src.dtype;
  impl->storage = src.storage;
  impl->byte_offset = src.byte_offset;
  return Tensor(std::move(impl));
}

NoGradGuard::NoGradGuard() : previous_(g_grad_mode) {
  g_grad_mode = false;
}
NoGradGuard::~NoGradGuard() {
  g_grad_mode = previous_;
}
bool grad_mode_enabled() {
  return g_grad_mode;
}

}  // namespace rig
