// Helpers shared by the convolution / pooling / batch-norm / attention op
// tests: random inputs, a finite-difference gradient check, golden runners.
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

namespace rig_test::nn_ops {

using Op = std::function<rig::Tensor(const std::vector<rig::Tensor>&)>;

inline rig::Tensor random_tensor(rig::Shape shape, std::uint32_t seed, float low = -1.0F,
                                 float high = 1.0F) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(low, high);
  std::vector<float> v(static_cast<std::size_t>(rig::shape_numel(shape)));
  for (auto& x : v) x = u(rng);
  return rig::Tensor::from_vector(v, std::move(shape));
}

// sum(out * weight) in double.
inline double weighted_sum(const rig::Tensor& out, const std::vector<float>& weight) {
  const std::vector<float> y = out.to_vector();
  double total = 0.0;
  for (std::size_t i = 0; i < weight.size(); ++i) total += static_cast<double>(y[i]) * weight[i];
  return total;
}

// Compares the autograd gradient of L = sum(op(inputs) * w) (w fixed random)
// with central differences for every f32 input (`checked`: which inputs;
// empty = all). At most `max_elements` elements per input are probed, spread
// evenly. op must be deterministic (dropout: a fixed key).
inline ::testing::AssertionResult check_gradients(const Op& op, std::vector<rig::Tensor> inputs,
                                                  std::vector<bool> checked = {}, double eps = 1e-2,
                                                  double rtol = 1e-2, double atol = 1e-3,
                                                  std::int64_t max_elements = 160) {
  if (checked.empty()) checked.assign(inputs.size(), true);
  for (std::size_t k = 0; k < inputs.size(); ++k) {
    if (inputs[k].dtype() == rig::DType::f32 && checked[k]) inputs[k].set_requires_grad(true);
  }
  const rig::Tensor out = op(inputs);
  std::mt19937 rng(1234);
  std::uniform_real_distribution<float> u(0.5F, 1.5F);
  std::vector<float> weight(static_cast<std::size_t>(out.numel()));
  for (auto& w : weight) w = u(rng);
  rig::ops::sum(rig::ops::mul(out, rig::Tensor::from_vector(weight, out.shape()))).backward();

  rig::NoGradGuard no_grad;
  for (std::size_t k = 0; k < inputs.size(); ++k) {
    rig::Tensor& x = inputs[k];
    if (x.dtype() != rig::DType::f32 || !checked[k]) continue;
    if (!x.grad().defined()) return ::testing::AssertionFailure() << "input " << k << ": no grad";
    const std::vector<float> analytic = x.grad().to_vector();
    float* data = x.data<float>();
    const std::int64_t n = x.numel();
    const std::int64_t step = std::max<std::int64_t>(1, n / max_elements);
    for (std::int64_t i = 0; i < n; i += step) {
      const float saved = data[i];
      data[i] = static_cast<float>(saved + eps);
      const double plus = weighted_sum(op(inputs), weight);
      data[i] = static_cast<float>(saved - eps);
      const double minus = weighted_sum(op(inputs), weight);
      data[i] = saved;
      const double numeric = (plus - minus) / (2.0 * eps);
      const double a = analytic[static_cast<std::size_t>(i)];
      if (!(std::abs(a - numeric) <= atol + rtol * std::max(std::abs(a), std::abs(numeric)))) {
        return ::testing::AssertionFailure() << "input " << k << " element " << i << ": autograd "
                                             << a << " vs numeric " << numeric;
      }
    }
  }
  return ::testing::AssertionSuccess();
}

// Gradients of sum(out * upstream) with respect to `inputs` (all leaves).
inline std::vector<rig::Tensor> grads_of(const rig::Tensor& out, const rig::Tensor& upstream,
                                         const std::vector<rig::Tensor>& inputs) {
  rig::ops::sum(rig::ops::mul(out, upstream)).backward();
  std::vector<rig::Tensor> grads;
  for (const auto& t : inputs) grads.push_back(t.grad());
  return grads;
}

// A golden input as a fresh leaf that requires a gradient.
inline rig::Tensor leaf(const GoldenCase& c, const std::string& name) {
  rig::Tensor t = c.input(name).clone();
  t.set_requires_grad(true);
  return t;
}

}  // namespace rig_test::nn_ops
