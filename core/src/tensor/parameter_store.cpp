// The flat parameter, gradient and buffer storage, and reproducible initialisers.
#include "rig/parameter_store.hpp"

#include <algorithm>
#include <atomic>
#include <bit>
#include <cmath>
#include <limits>
#include <stdexcept>

#include <fmt/format.h>

#include "cpu/half.hpp"
#include "cpu/parallel.hpp"
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

// Elements per parallel_for chunk of the flat-buffer loops.
constexpr std::int64_t kGrain = 1 << 15;

// master[i] = widen(src[i]) x s (in place when master == src; nothing is
// written when master is null). Returns max |master[i]|, or +inf when any
// product is inf or NaN. The maximum is taken over the bit patterns of |x|,
// which order like the values for finite x and are >= 0x7f800000 for inf and
// NaN: an integer reduction that vectorises (a float max with NaN would not).
template <class Src, class Widen>
double unscale_into(std::int64_t n, const Src* src, float* master, float s, Widen widen) {
  std::atomic<std::uint32_t> amax{0};
  cpu::parallel_for(n, kGrain, [&](std::int64_t begin, std::int64_t end) {
    std::uint32_t m = 0;
    if (master != nullptr) {
      for (std::int64_t i = begin; i < end; ++i) {
        const float g = widen(src[i]) * s;
        master[i] = g;
        m = std::max(m, std::bit_cast<std::uint32_t>(g) & 0x7FFFFFFFU);
      }
    } else {
      for (std::int64_t i = begin; i < end; ++i) {
        m = std::max(m, std::bit_cast<std::uint32_t>(widen(src[i]) * s) & 0x7FFFFFFFU);
      }
    }
    std::uint32_t seen = amax.load(std::memory_order_relaxed);
    while (m > seen && !amax.compare_exchange_weak(seen, m, std::memory_order_relaxed)) {
    }
  });
  const std::uint32_t bits = amax.load();
  if (bits >= 0x7F800000U) return std::numeric_limits<double>::infinity();
  return std::bit_cast<float>(bits);
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

void ParameterStore::allocate(std::uint64_t seed, DType compute) {
  if (allocated()) throw std::logic_error("ParameterStore::allocate: already allocated");
  if (!is_floating(compute)) {
    throw std::invalid_argument(fmt::format(
        "ParameterStore::allocate: compute dtype {} is not floating", dtype_name(compute)));
  }
  compute_dtype_ = compute;
  values_ = Tensor::empty({numel_});
  grads_ = Tensor::zeros({numel_});
  buffers_ = Tensor::empty({buffer_numel_});
  const bool low = compute != DType::f32;
  if (low) {
    compute_values_ = Tensor::empty({numel_}, compute);
    compute_grads_ = Tensor::zeros({numel_}, compute);
  }
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
    initialise(p, seed, p.master.data<float>());
  }
  for (auto& b : buffer_infos_) {
    TensorImpl& impl = *b.value.impl();
    impl.storage = buffers_.impl()->storage;
    impl.offset = b.offset;
    b.master = b.value;
    initialise(b, seed, b.value.data<float>());
  }
  publish_values();
}

Tensor ParameterStore::compute_values() const {
  return compute_values_.defined() ? compute_values_ : values_;
}

Tensor ParameterStore::compute_grads() const {
  return compute_grads_.defined() ? compute_grads_ : grads_;
}

double ParameterStore::unscale_grads(double scale) {
  if (!allocated()) throw std::logic_error("ParameterStore::unscale_grads before allocate()");
  float* master = grads_.data<float>();
  const auto s = static_cast<float>(scale);
  if (compute_dtype_ == DType::f16) {
    return unscale_into(numel_, compute_grads_.data<std::uint16_t>(), master, s,
                        [](std::uint16_t h) { return cpu::half_bits_to_float(h); });
  }
  if (compute_dtype_ == DType::bf16) {
    return unscale_into(numel_, compute_grads_.data<std::uint16_t>(), master, s,
                        [](std::uint16_t h) { return cpu::bfloat16_bits_to_float(h); });
  }
  if (s == 1.0F) return unscale_into(numel_, master, nullptr, s, [](float g) { return g; });
  return unscale_into(numel_, master, master, s, [](float g) { return g; });
}

void ParameterStore::publish_values() {
  if (!compute_values_.defined()) return;
  const float* src = values_.data<float>();
  std::uint16_t* dst = compute_values_.data<std::uint16_t>();
  const bool half = compute_dtype_ == DType::f16;
  cpu::parallel_for(numel_, kGrain, [&](std::int64_t begin, std::int64_t end) {
    if (half) {
      for (std::int64_t i = begin; i < end; ++i) dst[i] = cpu::float_to_half_bits(src[i]);
    } else {
      for (std::int64_t i = begin; i < end; ++i) dst[i] = cpu::float_to_bfloat16_bits(src[i]);
    }
  });
}

void ParameterStore::round_values_to(DType dtype) {
  if (!allocated()) throw std::logic_error("ParameterStore::round_values_to before allocate()");
  if (!is_floating(dtype)) {
    throw std::invalid_argument(fmt::format(
        "ParameterStore::round_values_to: {} is not a floating dtype", dtype_name(dtype)));
  }
  if (dtype == DType::f32) return;
  float* v = values_.data<float>();
  const bool half = dtype == DType::f16;
  cpu::parallel_for(numel_, kGrain, [&](std::int64_t begin, std::int64_t end) {
    if (half) {
      for (std::int64_t i = begin; i < end; ++i) {
        v[i] = cpu::half_bits_to_float(cpu::float_to_half_bits(v[i]));
      }
    } else {
      for (std::int64_t i = begin; i < end; ++i) {
        v[i] = cpu::bfloat16_bits_to_float(cpu::float_to_bfloat16_bits(v[i]));
      }
    }
  });
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
  grads_.fill_(0.0F);
  if (compute_grads_.defined()) compute_grads_.fill_(0.0F);
}

}  // namespace rig
