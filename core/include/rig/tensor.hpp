// Tensor: shape, strides, dtype, device, and reference-counted storage from a
// caching allocator; define-by-run autograd history. Views (reshape,
// transpose, permute, slice, expand, ...) share storage and are differentiable.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "rig/allocator_stats.hpp"
#include "rig/device.hpp"
#include "rig/dtype.hpp"
#include "rig/export.hpp"
#include "rig/shape.hpp"

namespace rig {

// The counters of one device's caching allocator; give its cached blocks back.
AllocatorStats allocator_stats(Device device = Device::cpu());
// The percentage of recent time DEVICE ran kernels (a GPU: NVML's
// utilisation, as nvidia-smi's GPU-Util), or nothing where that is unknown
// (the CPU, sim, the emulator, a GPU without NVML).
std::optional<double> device_utilisation(Device device);
// Backend::set_convolution_autotuning: true where DEVICE has convolution
// engines to time (cuDNN on a GPU), false where the call changes nothing.
bool set_convolution_autotuning(Device device, bool on);
// Backend::set_tf32: true where DEVICE then computes float32 products and
// convolutions on TF32 tensor cores (a GPU of compute capability 8.0 on).
bool set_tf32(Device device, bool on);
void reset_peak_bytes(Device device = Device::cpu());
// Waits until DEVICE has run everything queued on it (a no-op on the CPU).
void synchronize_device(Device device);
void empty_allocator_cache(Device device = Device::cpu());  // give cached blocks back

// Bytes of one tensor's data, from the device's caching allocator (blocks are
// returned to it, not to the system). Several tensors may share one storage.
namespace detail {
struct LedgerEntry;
}

class RIG_API Storage {
 public:
  // Counted as a tensor of `dtype` and `shape` in rig/memory_labels.hpp's pictures.
  Storage(std::size_t bytes, Device device, DType dtype, const Shape& shape);
  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;
  std::byte* data() { return data_; }
  const std::byte* data() const { return data_; }
  std::size_t size() const { return size_; }
  Device device() const { return device_; }
  // The device stream the bytes were allocated for (0: the default stream;
  // the CPU and sim devices have no other). A caching pool reuses a freed
  // block on that stream without waiting for the device.
  std::uintptr_t stream() const { return stream_; }

 private:
  std::byte* data_ = nullptr;  // owned through the allocator; returned in the destructor
  std::size_t size_ = 0;
  std::size_t capacity_ = 0;  // the allocator's block size
  Device device_;
  std::uintptr_t stream_ = 0;
  detail::LedgerEntry* ledger_entry_ = nullptr;  // where memory_labels.hpp counts it
};

class Tensor;
namespace autograd {
struct Node;
}

struct TensorImpl {
  Shape shape;
  Strides strides;          // in elements
  std::int64_t offset = 0;  // in elements, into storage
  DType dtype = DType::f32;
  std::shared_ptr<Storage> storage;
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

  // New contiguous tensors.
  static Tensor empty(Shape shape, DType dtype = DType::f32, Device device = Device::cpu());
  static Tensor zeros(Shape shape, DType dtype = DType::f32, Device device = Device::cpu());
  static Tensor ones(Shape shape, DType dtype = DType::f32, Device device = Device::cpu());
  static Tensor full(Shape shape, float value, DType dtype = DType::f32,
                     Device device = Device::cpu());
  // Contiguous, with x's shape, dtype and device (x may be strided).
  static Tensor empty_like(const Tensor& x) { return empty(x.shape(), x.dtype(), x.device()); }
  static Tensor zeros_like(const Tensor& x) { return zeros(x.shape(), x.dtype(), x.device()); }
  // Host values copied to `device`.
  static Tensor from_vector(const std::vector<float>& values, Shape shape,
                            Device device = Device::cpu());
  static Tensor from_vector(const std::vector<std::int64_t>& values, Shape shape,
                            Device device = Device::cpu());
  static Tensor from_vector(const std::vector<std::uint8_t>& values, Shape shape,
                            Device device = Device::cpu());
  static Tensor scalar(float value, Device device = Device::cpu()) {
    return full({}, value, DType::f32, device);
  }
  static Tensor arange(std::int64_t n, DType dtype = DType::i64,
                       Device device = Device::cpu());  // 0, 1, ..., n-1
  // A contiguous view of numel(shape) elements of `storage` from element `offset`.
  static Tensor view_of(std::shared_ptr<Storage> storage, std::int64_t offset, Shape shape,
                        DType dtype);

  bool defined() const { return impl_ != nullptr; }
  const Shape& shape() const;
  const Strides& strides() const;
  std::int64_t offset() const;
  std::int64_t dim() const { return static_cast<std::int64_t>(shape().size()); }
  std::int64_t size(std::int64_t axis) const;  // negative axis counts from the end
  std::int64_t numel() const { return shape_numel(shape()); }
  DType dtype() const;
  Device device() const;
  std::size_t nbytes() const { return static_cast<std::size_t>(numel()) * dtype_size(dtype()); }
  bool is_contiguous() const;
  // Two tensors that may read or write the same bytes.
  bool shares_storage(const Tensor& other) const;
  // Whether nothing but this handle reaches its memory (no other handle of
  // its tensor, no other tensor of its storage): it may be written over.
  bool sole_owner() const;

  // Typed pointer to the first element (storage + offset) in the address
  // space of the tensor's device: host code may dereference it only for CPU
  // tensors (a sim tensor's faults, as a GPU's would); ops hand it to their
  // device's backend. Index it with strides() unless is_contiguous(). Throws
  // if T does not match dtype(); f16 and bf16 data are uint16_t bits.
  template <class T>
  T* data();
  template <class T>
  const T* data() const;
  std::byte* raw_data();
  const std::byte* raw_data() const;

  // The only ways back to the host from a device (they wait for it):
  float item() const;                               // one element, any dtype, as float
  std::vector<float> to_vector() const;             // all elements in order, as float
  std::vector<std::int64_t> to_int_vector() const;  // integer dtypes, in order

  // Views: share storage, record autograd history. reshape copies when the
  // strides do not allow a view (like torch.reshape); view() throws instead.
  // One dimension of reshape/view may be -1.
  Tensor reshape(Shape shape) const;
  Tensor view(Shape shape) const;
  Tensor transpose(std::int64_t axis0, std::int64_t axis1) const;
  Tensor permute(const Axes& axes) const;
  Tensor slice(std::int64_t axis, std::int64_t start, std::int64_t end,
               std::int64_t step = 1) const;  // negative start/end count from the end
  Tensor expand(Shape shape) const;           // size-1 axes broadcast (stride 0); -1 keeps
  Tensor unsqueeze(std::int64_t axis) const;
  Tensor squeeze(std::int64_t axis) const;  // the axis must have size 1
  Tensor flatten(std::int64_t start_axis = 0, std::int64_t end_axis = -1) const;

  Tensor contiguous() const;     // itself if contiguous, else a copy (differentiable)
  Tensor clone() const;          // a contiguous copy (differentiable)
  Tensor to(DType dtype) const;  // cast; differentiable between floating types
  // A copy on another device (itself if already there); differentiable
  // for floating dtypes. to_host() is to(Device::cpu()).
  Tensor to(Device device) const;
  Tensor to_host() const;
  // In place, no autograd: copy values from `src` (same shape; any dtype,
  // strides, device).
  void copy_from(const Tensor& src);
  void fill_(float value);
  void zero_() { fill_(0.0F); }

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

// A few tensors (op inputs, gradients), kept inline up to four.
using TensorList = SmallVector<Tensor, 4>;

// While alive, ops record autograd history on this thread or not, as
// `enabled` says; the mode before comes back at its end. GradModeGuard(true)
// records again inside a backward function that recomputes a forward pass
// (nn::recompute).
class RIG_API GradModeGuard {
 public:
  explicit GradModeGuard(bool enabled);
  ~GradModeGuard();
  GradModeGuard(const GradModeGuard&) = delete;
  GradModeGuard& operator=(const GradModeGuard&) = delete;

 private:
  bool previous_;
};
// While alive, ops record no autograd history on this thread.
class RIG_API NoGradGuard : public GradModeGuard {
 public:
  NoGradGuard() : GradModeGuard(false) {}
};
bool grad_mode_enabled();

}  // namespace rig
