// Helpers shared by the indexing / selection / embedding / dropout op tests:
// a finite-difference gradient check and golden-case runners.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "golden.hpp"
#include "rig/autograd.hpp"
#include "rig/ops.hpp"

namespace rig_test::index_ops {

using Op = std::function<rig::Tensor(const std::vector<rig::Tensor>&)>;

inline rig::Tensor random_tensor(rig::Shape shape, std::uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-1.0F, 1.0F);
  std::vector<float> v(static_cast<std::size_t>(rig::shape_numel(shape)));
  for (auto& x : v) x = u(rng);
  return rig::Tensor::from_vector(v, std::move(shape));
}

inline rig::Tensor int_tensor(const std::vector<std::int64_t>& values, rig::Shape shape) {
  return rig::Tensor::from_vector(values, std::move(shape));
}

// sum(out * weight) in double.
inline double weighted_sum(const rig::Tensor& out, const std::vector<float>& weight) {
  const std::vector<float> y = out.to_vector();
  double total = 0.0;
  for (std::size_t i = 0; i < weight.size(); ++i) total += static_cast<double>(y[i]) * weight[i];
  return total;
}

// Autograd gradients of L = sum(op(inputs) * w) (w fixed, not all ones) for
// every f32 input against central differences. The ops under test are linear
// or piecewise linear in their f32 inputs, so f32 differences are accurate.
inline ::testing::AssertionResult check_gradients(const Op& op, std::vector<rig::Tensor> inputs,
                                                  double eps = 1e-2, double tol = 2e-3) {
  for (auto& t : inputs) {
    if (t.dtype() == rig::DType::f32) t.set_requires_grad(true);
  }
  rig::Tensor out = op(inputs);
  std::mt19937 rng(1234);
  std::uniform_real_distribution<float> u(0.5F, 1.5F);
  std::vector<float> weight(static_cast<std::size_t>(out.numel()));
  for (auto& w : weight) w = u(rng);
  rig::ops::sum(rig::ops::mul(out, rig::Tensor::from_vector(weight, out.shape()))).backward();

  rig::NoGradGuard no_grad;
  for (std::size_t k = 0; k < inputs.size(); ++k) {
    rig::Tensor& x = inputs[k];
    if (x.dtype() != rig::DType::f32) continue;
    if (!x.grad().defined()) return ::testing::AssertionFailure() << "input " << k << ": no grad";
    const std::vector<float> analytic = x.grad().to_vector();
    float* data = x.data<float>();
    for (std::int64_t i = 0; i < x.numel(); ++i) {
      const float saved = data[i];
      data[i] = static_cast<float>(saved + eps);
      const double plus = weighted_sum(op(inputs), weight);
      data[i] = static_cast<float>(saved - eps);
      const double minus = weighted_sum(op(inputs), weight);
      data[i] = saved;
      const double numeric = (plus - minus) / (2.0 * eps);
      const double a = analytic[static_cast<std::size_t>(i)];
      if (std::abs(a - numeric) > tol * (1.0 + std::abs(numeric))) {
        return ::testing::AssertionFailure() << "input " << k << " element " << i << ": autograd "
                                             << a << " vs numeric " << numeric;
      }
    }
  }
  return ::testing::AssertionSuccess();
}

// A leaf copy of a golden input that requires a gradient.
inline rig::Tensor leaf(const rig::Tensor& t) {
  rig::Tensor c = t.clone();
  c.set_requires_grad(true);
  return c;
}

// Runs sum(out * upstream).backward().
inline void backward_with(const rig::Tensor& out, const rig::Tensor& upstream) {
  rig::ops::sum(rig::ops::mul(out, upstream)).backward();
}

inline bool same_values(const rig::Tensor& a, const rig::Tensor& b) {
  return a.shape() == b.shape() && a.to_vector() == b.to_vector();
}

}  // namespace rig_test::index_ops
