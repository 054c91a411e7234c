// A minimal CPU tensor with define-by-run autograd: enough for the walking
// skeleton. The tensor issue grows this type (strides, views, more dtypes in
// use, devices, a caching allocator); plugin code written against it stays valid.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "rig/export.hpp"

namespace rig {

enum class DType : std::uint8_t { f32, f16, bf16, i32, i64, u8 };
std::size_t dtype_size(DType dtype);
std::string_view dtype_name(DType dtype);
template <class T>
constexpr DType dtype_of();
template <>
constexpr DType dtype_of<float>() {
  return DType::f32;
}
template <>
constexpr DType dtype_of<std::int32_t>() {
  return DType::i32;
}
template <>
constexpr DType dtype_of<std::int64_t>() {
  return DType::i64;
}
template <>
constexpr DType dtype_of<std::uint8_t>() {
  return DType::u8;
}

struct Device {
  enum class Type : std::uint8_t { cpu, cuda };
  Type type = Type::cpu;
  int index = 0;
  static Device cpu() { return {}; }
  friend bool operator==(const Device&, const Device&) = default;
};
std::string to_string(Device device);

using Shape = std::vector<std::int64_t>;
std::string to_string(const Shape& shape);  // "[32,64]"
std::int64_t shape_numel(const Shape& shape);

// Bytes of one tensor's data. Several tensors may share one storage (views
// into the flat parameter buffer do).
class RIG_API Storage {
 public:
  Storage(std::size_t bytes, Device device);
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;
  std::byte* data() { return bytes_.get(); }
  const std::byte* data() const { return bytes_.get(); }
  std::size_t size() const { return size_; }
  Device device() const { return device_; }

 private:
  std::unique_ptr<std::byte[]> bytes_;
  std::size_t size_;
  Device device_;
};

class Tensor;
namespace autograd {
struct Node;
}

struct TensorImpl {
  Shape shape;
  DType dtype = DType::f32;
  std::shared_ptr<Storage> storage;
  std::size_t byte_offset = 0;
  // Autograd: a leaf that requires grad accumulates into `grad` (for
  // parameters, a view of the flat gradient buffer); a non-leaf has grad_fn.
  bool requires_grad = false;
  std::shared_ptr<TensorImpl> grad;
  std::shared_ptr<autograd::Node> grad_fn;
};

class RIG_API Tensor {
 public:
  Tensor() = default;
  explicit Tensor(std::shared_ptr<TensorImpl> impl) : impl_(std::move(impl)) {}

  // Uninitialised / zero-filled / filled contiguous tensors.
  static Tensor empty(Shape shape, DType dtype = DType::f32, Device device = Device::cpu());
  static Tensor zeros(Shape shape, DType dtype = DType::f32, Device device = Device::cpu());
  static Tensor full(Shape shape, float value);
  static Tensor from_vector(const std::vector<float>& values, Shape shape);
  static Tensor from_vector(const std::vector<std::int64_t>& values, Shape shape);
  static Tensor scalar(float value) { return full({}, value); }
  // A view of `numel(shape)` elements of `storage` starting at byte_offset.
  static Tensor view_of(std::shared_ptr<Storage> storage, std::size_t byte_offset, Shape shape,
                        DType dtype);

  bool defined() const { return impl_ != nullptr; }
  const Shape& shape() const;
  std::int64_t dim() const { return static_cast<std::int64_t>(shape().size()); }
  std::int64_t size(std::int64_t axis) const;  // negative axis counts from the end
  std::int64_t numel() const { return shape_numel(shape()); }
  DType dtype() const;
  Device device() const;
  std::size_t nbytes() const { return static_cast<std::size_t>(numel()) * dtype_size(dtype()); }

  // Typed access; throws if T does not match dtype().
  template <class T>
  T* data();
  template <class T>
  const T* data() const;
  std::byte* raw_data();
  const std::byte* raw_data() const;

  float item() const;                    // the single value of a one-element f32 tensor
  std::vector<float> to_vector() const;  // an f32 tensor's values
  Tensor reshape(Shape shape) const;     // same storage, new shape (numel must match)
  Tensor clone() const;                  // a copy with its own storage, no autograd history
  void fill_(float value);
  void copy_from(const Tensor& other);  // same shape and dtype, values copied

  // Autograd.
  bool requires_grad() const;
  Tensor& set_requires_grad(bool value);
  Tensor grad() const;                // undefined until backward reached this leaf
  void set_grad(const Tensor& grad);  // where backward accumulates this leaf's gradient
  void backward() const;              // this tensor must hold one element
  Tensor detach() const;              // same data, no history

  TensorImpl* impl() const { return impl_.get(); }
  const std::shared_ptr<TensorImpl>& impl_ptr() const { return impl_; }

 private:
  std::shared_ptr<TensorImpl> impl_;
};

// While alive, ops record no autograd history on this thread.
class RIG_API NoGradGuard {
 public:
  NoGradGuard();
  ~NoGradGuard();
  NoGradGuard(const NoGradGuard&) = delete;
  NoGradGuard& operator=(const NoGradGuard&) = delete;

 private:
  bool previous_;
};
bool grad_mode_enabled();

}  // namespace rig
