// The flat parameter and gradient buffers, and reproducible initialisers.
#include "rig/parameter_store.hpp"

#include <algorithm>
#include <cmath>
#include <numbers>
#include <stdexcept>

#include <fmt/format.h>

namespace rig {

namespace {

std::uint64_t splitmix64(std::uint64_t x) {
  x += 0x9E3779B97F4A7C15ULL;
  x = (x ^ (x >> 30U)) * 0xBF58476D1CE4E5B9ULL;
  x = (x ^ (x >> 27U)) * 0x94D049BB133111EBULL;
  return x ^ (x >> 31U);
}

std::uint64_t fnv1a(std::string_view text) {
  std::uint64_t h = 0xCBF29CE484222325ULL;
  for (char c : text) {
    h ^= static_cast<unsigned char>(c);
    h *= 0x100000001B3ULL;
  }
  return h;
}

// Counter-based stream: the i-th draw depends only on (key, i), so a
// parameter's values depend only on (seed, name), not on declaration order.
// (A placeholder until the tensor issue brings Philox.)
class CounterStream {
 public:
  CounterStream(std::uint64_t seed, std::string_view name)
      : key_(splitmix64(seed ^ splitmix64(fnv1a(name)))) {}
  // Uniform in the open interval (0, 1).
  double uniform(std::uint64_t counter) const {
    const std::uint64_t bits = splitmix64(key_ + counter * 0xD1B54A32D192ED03ULL);
    return (static_cast<double>(bits >> 11U) + 0.5) * 0x1.0p-53;
  }

 private:
  std::uint64_t key_;
};

void initialise(const ParameterInfo& p, std::uint64_t seed, float* out) {
  const auto n = shape_numel(p.shape);
  const CounterStream stream(seed, p.name);
  auto uniform_fill = [&](double low, double high) {
    for (std::int64_t i = 0; i < n; ++i) {
      out[i] =
          static_cast<float>(low + (high - low) * stream.uniform(static_cast<std::uint64_t>(i)));
    }
  };
  switch (p.init.kind) {
    case Initializer::Kind::constant:
      std::fill_n(out, n, p.init.a);
      return;
    case Initializer::Kind::uniform:
      uniform_fill(p.init.a, p.init.b);
      return;
    case Initializer::Kind::normal:
      // Box-Muller on two draws per element.
      for (std::int64_t i = 0; i < n; ++i) {
        const auto c = 2 * static_cast<std::uint64_t>(i);
        const double r = std::sqrt(-2.0 * std::log(stream.uniform(c)));
        const double z = r * std::cos(2.0 * std::numbers::pi * stream.uniform(c + 1));
        out[i] = static_cast<float>(p.init.a + p.init.b * z);
      }
      return;
    case Initializer::Kind::xavier_uniform: {
      // [in, out, ...] weights: fan_in = shape[0], fan_out = shape[1] (times any trailing dims).
      const auto receptive = shape_numel(Shape(p.shape.begin() + 2, p.shape.end()));
      const auto fan_in = static_cast<double>(p.shape[0] * receptive);
      const auto fan_out = static_cast<double>(p.shape[1] * receptive);
      const double bound = fan_in + fan_out > 0 ? std::sqrt(6.0 / (fan_in + fan_out)) : 0.0;
      uniform_fill(-bound, bound);
      return;
    }
  }
}

}  // namespace

Tensor ParameterStore::declare(const std::string& name, Shape shape, Initializer init) {
  if (allocated()) {
    throw std::logic_error(
        fmt::format("ParameterStore::declare('{}') after allocate(): declare every parameter in "
                    "the model's constructor",
                    name));
  }
  if (name.empty()) throw std::invalid_argument("ParameterStore::declare: empty parameter name");
  auto same = [&](const ParameterInfo& p) { return p.name == name; };
  if (std::any_of(parameters_.begin(), parameters_.end(), same)) {
    throw std::invalid_argument(
        fmt::format("ParameterStore::declare: parameter '{}' is declared twice", name));
  }
  const auto n = shape_numel(shape);  // throws on negative dimensions
  if (init.kind == Initializer::Kind::xavier_uniform && shape.size() < 2) {
    throw std::invalid_argument(fmt::format(
        "ParameterStore::declare('{}'): xavier_uniform needs at least 2 dimensions, got {}", name,
        to_string(shape)));
  }
  if ((init.kind == Initializer::Kind::uniform && !(init.a <= init.b)) ||
      (init.kind == Initializer::Kind::normal && !(init.b >= 0.0F))) {
    throw std::invalid_argument(
        fmt::format("ParameterStore::declare('{}'): bad initialiser parameters {} and {}", name,
                    init.a, init.b));
  }
  // A tensor without storage yet: allocate() points it into the flat buffers.
  auto impl = std::make_shared<TensorImpl>();
  impl->shape = shape;
  impl->dtype = DType::f32;
  Tensor value(std::move(impl));
  parameters_.push_back({name, std::move(shape), numel_, init, value});
  numel_ += n;
  return value;
}

void ParameterStore::allocate(std::uint64_t seed) {
  if (allocated()) throw std::logic_error("ParameterStore::allocate: already allocated");
  values_ = Tensor::empty({numel_});
  grads_ = Tensor::zeros({numel_});
  constexpr auto kF32 = sizeof(float);
  for (auto& p : parameters_) {
    const auto byte_offset = static_cast<std::size_t>(p.offset) * kF32;
    TensorImpl& impl = *p.value.impl();
    impl.storage = values_.impl()->storage;
    impl.byte_offset = byte_offset;
    impl.requires_grad = true;
    impl.grad =
        Tensor::view_of(grads_.impl()->storage, byte_offset, p.shape, DType::f32).impl_ptr();
    initialise(p, seed, p.value.data<float>());
  }
}

const ParameterInfo& ParameterStore::find(const std::string& name) const {
  for (const auto& p : parameters_) {
    if (p.name == name) return p;
  }
  std::vector<std::string> names;
  names.reserve(parameters_.size());
  for (const auto& p : parameters_) names.push_back(p.name);
  throw std::invalid_argument(
      fmt::format("unknown parameter '{}'; the parameters are: {}", name,
                  names.empty() ? "(none)" : fmt::format("{}", fmt::join(names, ", "))));
}

void ParameterStore::zero_grad() {
  if (allocated()) grads_.fill_(0.0F);
}

}  // namespace rig
