// Helpers for the core math op tests: random tensors and a finite-difference
// gradient check.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <random>
#include <vector>

#include "rig/autograd.hpp"
#include "rig/ops.hpp"

namespace rig_test::math {

using Op = std::function<rig::Tensor(const std::vector<rig::Tensor>&)>;

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

// sum(out * weight) accumulated in double (out may be a strided view).
inline double weighted_sum(const rig::Tensor& out, const std::vector<float>& weight) {
  const std::vector<float> y = out.to_vector();
  double total = 0.0;
  for (std::size_t i = 0; i < weight.size(); ++i) total += static_cast<double>(y[i]) * weight[i];
  return total;
}

// Compares the autograd gradient of L = sum(op(inputs) * w) (w fixed, random
// in [0.5, 1.5]) for each f32 input with central differences. Inputs must be
// contiguous leaves; build views inside `op` to test strided paths. At most
// `max_elements` elements per input are probed, spread evenly.
inline ::testing::AssertionResult check_gradients(const Op& op, std::vector<rig::Tensor> inputs,
                                                  double eps = 1e-2, double rtol = 1e-2,
                                                  double atol = 1e-3,
                                                  std::int64_t max_elements = 200) {
  std::mt19937 rng(1234);
  for (auto& t : inputs) {
    if (t.dtype() == rig::DType::f32) t.set_requires_grad(true);
  }
  const rig::Tensor out = op(inputs);
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

}  // namespace rig_test::math
