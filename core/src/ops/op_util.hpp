// Checks shared by the op layer (core/src/ops/*.cpp): axis normalisation,
// dtype and device requirements. Every failure throws std::invalid_argument
// naming the op and the shapes involved.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <stdexcept>
#include <string>
#include <string_view>

#include "backend/backend.hpp"
#include "rig/tensor.hpp"

namespace rig::ops::detail {

// `axis` in [-dim, dim) -> [0, dim); throws "<op>: axis 3 out of range for [2,3]".
std::int64_t normalize_axis(std::int64_t axis, std::int64_t dim, std::string_view op,
                            const Shape& shape);

// `t` is defined and has one of `allowed` dtypes; `role` names it in the message
// ("matmul: b must be f32, got i64 [3,4]").
void require_dtype(std::string_view op, const Tensor& t, std::string_view role,
                   std::initializer_list<DType> allowed);
// `t` is defined and floating (f32, f16, bf16).
void require_floating(std::string_view op, const Tensor& t, std::string_view role);
// `t` is defined ("<op>: <role> is undefined").
void require_defined(std::string_view op, const Tensor& t, std::string_view role);

// All (defined) tensors are on one device; otherwise "<op>: tensors on
// different devices: ..." lists each shape and device.
void require_same_device(std::string_view op, std::initializer_list<const Tensor*> tensors);

// The backend of t's device: where every kernel of an op on t runs.
backend::Backend& backend_of(const Tensor& t);

// Value `position` of the contiguous i32 / i64 tensor `index` (read from its device).
std::int64_t index_value_at(const Tensor& index, std::int64_t position);

// Every value of the contiguous i32 / i64 tensor `index` is in [0, limit);
// else std::invalid_argument(format(position, value, args...)). Checked at
// once where the back end checks at once (no allocation: args by reference);
// where it defers the check (the GPU, Backend::check_index), args are copied
// into the message it keeps until its next read of the device.
template <class Format, class... Args>
void check_index_range(const Tensor& index, std::int64_t limit, Format format,
                       const Args&... args) {
  backend::Backend& be = backend_of(index);
  if (be.defers_index_checks()) {
    be.check_index(index.raw_data(), index.dtype(), index.numel(), limit,
                   [format, args...](std::int64_t position, std::int64_t value) {
                     return format(position, value, args...);
                   });
    return;
  }
  const std::int64_t bad =
      be.first_out_of_range(index.raw_data(), index.dtype(), index.numel(), limit);
  if (bad >= 0) throw std::invalid_argument(format(bad, index_value_at(index, bad), args...));
}

// A new contiguous tensor on `like`'s device.
Tensor empty_on(const Tensor& like, Shape shape, DType dtype = DType::f32);
Tensor zeros_on(const Tensor& like, Shape shape, DType dtype = DType::f32);
// Where a backward function writes one gradient: `into` (a gradient it adds
// to, autograd::accumulation_target) where defined, else a new one; none
// where not needed.
Tensor gradient_buffer(bool needed, const Tensor& into, const Tensor& like, Shape shape,
                       DType dtype);

// "[2,3]" or "[2,3]^T".
std::string shape_str(const Tensor& t, bool transposed = false);

// A gradient of a broadcast result summed back to `target` (the shape of the
// input that was broadcast): over leading axes and axes where target has 1.
// Returns g itself when the shapes already match. Records no history.
Tensor sum_to(const Tensor& g, const Shape& target);

// matmul of f32 tensors (shapes already checked) without autograd history,
// at `precision`; the backward passes of matmul and of other ops use it.
Tensor matmul_f32(const Tensor& a, const Tensor& b, bool transpose_a, bool transpose_b,
                  MatmulPrecision precision);

// The f32 version of a floating tensor (itself if already f32), as a
// differentiable cast: ops compute f16/bf16 inputs in f32 and cast back.
Tensor as_f32(const Tensor& t);

}  // namespace rig::ops::detail
