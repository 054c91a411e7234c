// The finite-difference gradient checker shared by the unit tests, the random
// tensors it is fed with, and small autograd helpers for the golden tests.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "golden.hpp"
#include "rig/autograd.hpp"
#include "rig/ops.hpp"

namespace rig_test {

using Op = std::function<rig::Tensor(const std::vector<rig::Tensor>&)>;

// ---- tensors -------------------------------------------------------------------------

// Uniform in [-1, 1]; with min_magnitude, |x| in [min_magnitude, 1] (away
// from kinks such as relu's at 0).
inline rig::Tensor random_tensor(rig::Shape shape, std::mt19937& rng, float min_magnitude = 0.0F) {
  std::uniform_real_distribution<float> u(-1.0F, 1.0F);
  std::vector<float> v(static_cast<std::size_t>(rig::shape_numel(shape)));
  for (auto& x : v) {
    const float r = u(rng);
    x = std::copysign(min_magnitude + (1.0F - min_magnitude) * std::abs(r), r);
  }
  return rig::Tensor::from_vector(v, std::move(shape));
}

// Uniform in [low, high].
inline rig::Tensor uniform_tensor(rig::Shape shape, std::mt19937& rng, float low, float high) {
  std::uniform_real_distribution<float> u(low, high);
  std::vector<float> v(static_cast<std::size_t>(rig::shape_numel(shape)));
  for (auto& x : v) x = u(rng);
  return rig::Tensor::from_vector(v, std::move(shape));
}

// Uniform in [low, high] from a fresh generator seeded with `seed`.
inline rig::Tensor random_tensor(rig::Shape shape, std::uint32_t seed, float low = -1.0F,
                                 float high = 1.0F) {
  std::mt19937 rng(seed);
  return uniform_tensor(std::move(shape), rng, low, high);
}

inline rig::Tensor int_tensor(const std::vector<std::int64_t>& values, rig::Shape shape) {
  return rig::Tensor::from_vector(values, std::move(shape));
}

inline bool same_values(const rig::Tensor& a, const rig::Tensor& b) {
  return a.shape() == b.shape() && a.to_vector() == b.to_vector();
}

// ---- autograd helpers ----------------------------------------------------------------

// A leaf copy of `t` that requires a gradient.
inline rig::Tensor leaf(const rig::Tensor& t) {
  rig::Tensor c = t.clone();
  c.set_requires_grad(true);
  return c;
}

// A golden input as a fresh leaf that requires a gradient.
inline rig::Tensor leaf(const GoldenCase& c, const std::string& name) {
  return leaf(c.input(name));
}

// Runs sum(out * upstream).backward().
inline void backward_with(const rig::Tensor& out, const rig::Tensor& upstream) {
  rig::ops::sum(rig::ops::mul(out, upstream)).backward();
}

// Gradients of sum(out * upstream) with respect to `inputs` (all leaves).
inline std::vector<rig::Tensor> grads_of(const rig::Tensor& out, const rig::Tensor& upstream,
                                         const std::vector<rig::Tensor>& inputs) {
  backward_with(out, upstream);
  std::vector<rig::Tensor> grads;
  for (const auto& t : inputs) grads.push_back(t.grad());
  return grads;
}

// ---- finite differences --------------------------------------------------------------

// sum(out * weight) accumulated in double (out may be a strided view).
inline double weighted_sum(const rig::Tensor& out, const std::vector<float>& weight) {
  const std::vector<float> y = out.to_vector();
  double total = 0.0;
  for (std::size_t i = 0; i < weight.size(); ++i) total += static_cast<double>(y[i]) * weight[i];
  return total;
}

// The fixed weight w of the loss L = sum(out * w): random in [0.5, 1.5], so
// that no output gradient is all ones. Runs L.backward() and returns w.
inline std::vector<float> backward_weighted(const rig::Tensor& out, std::mt19937& rng) {
  std::uniform_real_distribution<float> u(0.5F, 1.5F);
  std::vector<float> weight(static_cast<std::size_t>(out.numel()));
  for (auto& w : weight) w = u(rng);
  backward_with(out, rig::Tensor::from_vector(weight, out.shape()));
  return weight;
}

// Central difference of weighted_sum(f(), weight) with respect to data[i]
// (restored afterwards).
inline double central_difference(const std::function<rig::Tensor()>& f, float* data, std::int64_t i,
                                 double eps, const std::vector<float>& weight) {
  const float saved = data[i];
  data[i] = static_cast<float>(saved + eps);
  const double plus = weighted_sum(f(), weight);
  data[i] = static_cast<float>(saved - eps);
  const double minus = weighted_sum(f(), weight);
  data[i] = saved;
  return (plus - minus) / (2.0 * eps);
}

// |autograd - numeric| <= atol + rtol max(|autograd|, |numeric|) (NaN fails).
inline bool gradient_close(double autograd, double numeric, double rtol, double atol) {
  return std::abs(autograd - numeric) <=
         atol + rtol * std::max(std::abs(autograd), std::abs(numeric));
}

// Compares the autograd gradient of L = sum(op(inputs) * w) (w fixed, random
// in [0.5, 1.5]) for each f32 input with central differences (`checked`:
// which inputs; empty = all). Inputs must be contiguous leaves; build views
// inside `op` to test strided paths. At most `max_elements` elements per
// input are probed, spread evenly. op must be deterministic (dropout: a fixed
// key).
inline ::testing::AssertionResult check_gradients(const Op& op, std::vector<rig::Tensor> inputs,
                                                  double eps = 1e-2, double rtol = 1e-2,
                                                  double atol = 1e-3,
                                                  std::int64_t max_elements = 200,
                                                  std::vector<bool> checked = {}) {
  if (checked.empty()) checked.assign(inputs.size(), true);
  for (std::size_t k = 0; k < inputs.size(); ++k) {
    if (inputs[k].dtype() == rig::DType::f32 && checked[k]) inputs[k].set_requires_grad(true);
  }
  std::mt19937 rng(1234);
  const std::vector<float> weight = backward_weighted(op(inputs), rng);

  rig::NoGradGuard no_grad;
  const std::function<rig::Tensor()> f = [&] { return op(inputs); };
  for (std::size_t k = 0; k < inputs.size(); ++k) {
    rig::Tensor& x = inputs[k];
    if (x.dtype() != rig::DType::f32 || !checked[k]) continue;
    if (!x.grad().defined()) return ::testing::AssertionFailure() << "input " << k << ": no grad";
    const std::vector<float> analytic = x.grad().to_vector();
    float* data = x.data<float>();
    const std::int64_t n = x.numel();
    const std::int64_t step = std::max<std::int64_t>(1, n / max_elements);
    for (std::int64_t i = 0; i < n; i += step) {
      const double numeric = central_difference(f, data, i, eps, weight);
      const double a = analytic[static_cast<std::size_t>(i)];
      if (!gradient_close(a, numeric, rtol, atol)) {
        return ::testing::AssertionFailure() << "input " << k << " element " << i << ": autograd "
                                             << a << " vs numeric " << numeric;
      }
    }
  }
  return ::testing::AssertionSuccess();
}

}  // namespace rig_test
