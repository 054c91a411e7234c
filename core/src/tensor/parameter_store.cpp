// The flat parameter, gradient and buffer storage, and reproducible initialisers.
#include "rig/parameter_store.hpp"

#include <algorithm>
#include <atomic>
#include <bit>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <vector>

#include <fmt/format.h>

#include "backend/backend.hpp"
#include "rig/random.hpp"

namespace rig {

namespace {

// PyTorch's fans: [out, in, k...] -> (in x prod(k), out x prod(k)); 1-D: (size, size).
std::pair<double, double> fans(const Shape& shape) {
  if (shape.size() < 2) {
    const auto n = static_cast<double>(shape_numel(shape));
    return {n, n};
  }
  const auto receptive = shape_numel(Shape(shape.begin() + 2, shape.end()));
  return {static_cast<double>(shape[1] * receptive), static_cast<double>(shape[0] * receptive)};
}

// Values depend only on (seed, name): Philox stream {seed, 0, 0, purpose_id(name)}.
void initialise(const ParameterInfo& p, std::uint64_t seed, float* out) {
  const auto n = shape_numel(p.shape);
  const RandomKey key{seed, 0, 0, purpose_id(p.name)};
  const auto [fan_in, fan_out] = fans(p.shape);
  switch (p.init.kind) {
    case Initializer::Kind::constant:
      std::fill_n(out, n, p.init.a);
      return;
    case Initializer::Kind::uniform:
      fill_uniform(key, out, n, p.init.a, p.init.b);
      return;
    case Initializer::Kind::normal:
      fill_normal(key, out, n, p.init.a, p.init.b);
      return;
    case Initializer::Kind::xavier_uniform: {
      const double bound =
          fan_in + fan_out > 0 ? p.init.a * std::sqrt(6.0 / (fan_in + fan_out)) : 0.0;
      fill_uniform(key, out, n, static_cast<float>(-bound), static_cast<float>(bound));
      return;
    }
    case Initializer::Kind::kaiming_normal: {
      const double std = fan_in > 0 ? p.init.a / std::sqrt(fan_in) : 0.0;
      fill_normal(key, out, n, 0.0F, static_cast<float>(std));
      return;
    }
  }
}

void check_initializer(const std::string& name, const Initializer& init) {
  if ((init.kind == Initializer::Kind::uniform && !(init.a <= init.b)) ||
      (init.kind == Initializer::Kind::normal && !(init.b >= 0.0F))) {
    throw std::invalid_argument(
        fmt::format("ParameterStore::declare('{}'): bad initialiser parameters {} and {}", name,
                    init.a, init.b));
  }
}

// The checks of ParameterStore::<method> before it declares a <kind>
// ("parameter" or "buffer"): not yet allocated, a name unique across both lists.
void check_declaration(const char* method, const char* kind, bool allocated,
                       const std::string& name, const std::vector<ParameterInfo>& parameters,
                       const std::vector<ParameterInfo>& buffers) {
  if (allocated) {
    throw std::logic_error(
        fmt::format("ParameterStore::{}('{}') after allocate(): declare every {} in the model's "
                    "constructor",
                    method, name, kind));
  }
  if (name.empty()) {
    throw std::invalid_argument(fmt::format("ParameterStore::{}: empty {} name", method, kind));
  }
  auto same = [&](const ParameterInfo& p) { return p.name == name; };
  if (std::any_of(parameters.begin(), parameters.end(), same) ||
      std::any_of(buffers.begin(), buffers.end(), same)) {
    throw std::invalid_argument(
        fmt::format("ParameterStore::{}: {} '{}' is declared twice", method, kind, name));
  }
}

// Appends `name` to `list` at offset `numel` (which grows by its size) and
// returns its tensor, without storage yet: allocate() points it into the flat
// buffer of the list (and gives a parameter the compute dtype).
Tensor declare_in(std::vector<ParameterInfo>& list, std::int64_t& numel, const std::string& name,
                  Shape shape, const Initializer& init) {
  const auto n = shape_numel(shape);  // throws on negative dimensions
  check_initializer(name, init);
  auto impl = std::make_shared<TensorImpl>();
  impl->strides = contiguous_strides(shape);
  impl->shape = shape;
  impl->dtype = DType::f32;
  Tensor value(std::move(impl));
  list.push_back({name, std::move(shape), numel, init, value, Tensor()});
  numel += n;
  return value;
}

}  // namespace

Tensor ParameterStore::declare(const std::string& name, Shape shape, Initializer init) {
  check_declaration("declare", "parameter", allocated(), name, parameters_, buffer_infos_);
  return declare_in(parameters_, numel_, name, std::move(shape), init);
}

Tensor ParameterStore::declare_buffer(const std::string& name, Shape shape, Initializer init) {
  check_declaration("declare_buffer", "buffer", allocated(), name, parameters_, buffer_infos_);
  return declare_in(buffer_infos_, buffer_numel_, name, std::move(shape), init);
}

void ParameterStore::allocate(std::uint64_t seed, DType compute, Device device) {
  if (allocated()) throw std::logic_error("ParameterStore::allocate: already allocated");
  if (!is_floating(compute)) {
    throw std::invalid_argument(fmt::format(
        "ParameterStore::allocate: compute dtype {} is not floating", dtype_name(compute)));
  }
  compute_dtype_ = compute;
  values_ = Tensor::empty({numel_}, DType::f32, device);
  grads_ = Tensor::zeros({numel_}, DType::f32, device);
  buffers_ = Tensor::empty({buffer_numel_}, DType::f32, device);
  const bool low = compute != DType::f32;
  if (low) {
    compute_values_ = Tensor::empty({numel_}, compute, device);
    compute_grads_ = Tensor::zeros({numel_}, compute, device);
  }
  // Initial values are drawn on the host, then copied to the device at once.
  std::vector<float> initial_values(static_cast<std::size_t>(numel_));
  std::vector<float> initial_buffers(static_cast<std::size_t>(buffer_numel_));
  const auto& value_storage = (low ? compute_values_ : values_).impl()->storage;
  const auto& grad_storage = (low ? compute_grads_ : grads_).impl()->storage;
  for (auto& p : parameters_) {
    TensorImpl& impl = *p.value.impl();
    impl.storage = value_storage;
    impl.offset = p.offset;
    impl.dtype = compute;
    impl.requires_grad = true;
    impl.grad = Tensor::view_of(grad_storage, p.offset, p.shape, compute).impl_ptr();
    if (low) {
      // The master is a plain f32 view (no autograd) whose grad() is the master gradient.
      p.master = Tensor::view_of(values_.impl()->storage, p.offset, p.shape, DType::f32);
      p.master.impl()->grad =
          Tensor::view_of(grads_.impl()->storage, p.offset, p.shape, DType::f32).impl_ptr();
    } else {
      p.master = p.value;
    }
    initialise(p, seed, initial_values.data() + p.offset);
  }
  for (auto& b : buffer_infos_) {
    TensorImpl& impl = *b.value.impl();
    impl.storage = buffers_.impl()->storage;
    impl.offset = b.offset;
    b.master = b.value;
    initialise(b, seed, initial_buffers.data() + b.offset);
  }
  values_.copy_from(Tensor::from_vector(initial_values, {numel_}));
  buffers_.copy_from(Tensor::from_vector(initial_buffers, {buffer_numel_}));
  publish_values();
}

Tensor ParameterStore::compute_values() const {
  return compute_values_.defined() ? compute_values_ : values_;
}

Tensor ParameterStore::compute_grads() const {
  return compute_grads_.defined() ? compute_grads_ : grads_;
}

Tensor ParameterStore::unscale_grads(double scale) {
  return unscale_grads(scale, 0, numel_);
}

Tensor ParameterStore::unscale_grads(double scale, std::int64_t offset, std::int64_t count,
                                     bool largest) {
  if (!allocated()) throw std::logic_error("ParameterStore::unscale_grads before allocate()");
  if (offset < 0 || count < 0 || offset + count > numel_) {
    throw std::out_of_range(fmt::format(
        "ParameterStore::unscale_grads: gradients [{}, {}) outside the {} of the flat buffer",
        offset, offset + count, numel_));
  }
  Tensor master = grads_.slice(0, offset, offset + count);
  float* m = master.data<float>();
  const auto s = static_cast<float>(scale);
  Tensor amax = largest ? Tensor::empty({}, DType::f32, grads_.device()) : Tensor();
  float* amax_at = largest ? amax.data<float>() : nullptr;
  backend::Backend& be = backend::backend_for(grads_.device());
  if (compute_grads_.defined()) {
    const Tensor src = compute_grads_.slice(0, offset, offset + count);
    be.unscale(count, compute_dtype_, src.raw_data(), m, s, amax_at);
  } else if (s != 1.0F || largest) {
    // f32 at scale 1: only the overflow check, nothing to write.
    be.unscale(count, DType::f32, m, s == 1.0F ? nullptr : m, s, amax_at);
  }
  return amax;
}

void ParameterStore::publish_values() {
  if (compute_values_.defined()) compute_values_.copy_from(values_);  // rounded to f16 / bf16
}

void ParameterStore::round_values_to(DType dtype) {
  if (!allocated()) throw std::logic_error("ParameterStore::round_values_to before allocate()");
  if (!is_floating(dtype)) {
    throw std::invalid_argument(fmt::format(
        "ParameterStore::round_values_to: {} is not a floating dtype", dtype_name(dtype)));
  }
  if (dtype == DType::f32) return;
  values_.copy_from(values_.to(dtype));  // there and back: rounded to nearest even
}

const ParameterInfo& ParameterStore::find(const std::string& name) const {
  for (const auto& p : parameters_) {
    if (p.name == name) return p;
  }
  for (const auto& b : buffer_infos_) {
    if (b.name == name) return b;
  }
  std::vector<std::string> names;
  names.reserve(parameters_.size() + buffer_infos_.size());
  for (const auto& p : parameters_) names.push_back(p.name);
  for (const auto& b : buffer_infos_) names.push_back(b.name);
  throw std::invalid_argument(
      fmt::format("unknown parameter '{}'; the parameters are: {}", name,
                  names.empty() ? "(none)" : fmt::format("{}", fmt::join(names, ", "))));
}

void ParameterStore::zero_grad() {
  if (!allocated()) return;
  // Under a 16-bit compute dtype backward accumulates into compute_grads_,
  // and unscale_grads() writes every master gradient: zeroing those would be
  // a pass over 4 bytes a parameter for nothing.
  if (compute_grads_.defined()) {
    compute_grads_.fill_(0.0F);
  } else {
    grads_.fill_(0.0F);
  }
}

}  // namespace rig
