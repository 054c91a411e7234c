// Helpers of the kernel tests: random inputs with fixed seeds, the H100's
// launch planning, the CPU back end's reference and float comparisons.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "backend/backend.hpp"
#include "backend/strided_plan.hpp"
#include "simt/emulator.hpp"
#include "simt/launch_config.hpp"

namespace rig::kernels::test {

inline const simt::DeviceProperties& h100() {
  static const simt::DeviceProperties device = simt::DeviceProperties::h100_sxm();
  return device;
}

inline backend::Backend& cpu() {
  return backend::cpu_backend();
}

// Emulator seeds: barrier-heavy kernels run under each.
inline constexpr std::uint64_t kSeeds[] = {1, 0x9E3779B97F4A7C15ULL};

inline std::vector<float> uniform(std::int64_t n, float lo, float hi, std::uint32_t seed) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(static_cast<std::size_t>(n));
  for (float& f : v) f = dist(gen);
  return v;
}

// Runs `kernel` as planned for the H100.
template <class Kernel>
void run(const Kernel& kernel, std::uint64_t seed = 1) {
  const simt::LaunchShape shape = kernel.plan(h100());
  if (shape.grid.count() == 0) return;
  simt::emulate(shape, kernel, simt::EmulatorOptions{.seed = seed});
}

// |a - b| <= abs_tol + rel_tol |b|, with equal infinities (and NaNs) allowed.
inline ::testing::AssertionResult close(const std::vector<float>& got,
                                        const std::vector<float>& want, float abs_tol,
                                        float rel_tol) {
  if (got.size() != want.size()) return ::testing::AssertionFailure() << "sizes differ";
  for (std::size_t i = 0; i < got.size(); ++i) {
    const float a = got[i], b = want[i];
    if (a == b || (std::isnan(a) && std::isnan(b))) continue;
    if (!std::isfinite(a) || !std::isfinite(b) ||
        std::fabs(a - b) > abs_tol + rel_tol * std::fabs(b)) {
      return ::testing::AssertionFailure()
             << "element " << i << ": got " << a << ", want " << b << " (diff " << a - b << ")";
    }
  }
  return ::testing::AssertionSuccess();
}

template <class T>
::testing::AssertionResult bit_equal(const std::vector<T>& got, const std::vector<T>& want) {
  if (got.size() != want.size()) return ::testing::AssertionFailure() << "sizes differ";
  for (std::size_t i = 0; i < got.size(); ++i) {
    if (std::memcmp(&got[i], &want[i], sizeof(T)) != 0) {
      return ::testing::AssertionFailure()
             << "element " << i << ": got " << got[i] << ", want " << want[i];
    }
  }
  return ::testing::AssertionSuccess();
}

// The row plan of contiguous [rows, cols] operands (softmax's x and mask).
inline backend::StridedPlan<2> row_plan(std::int64_t rows, std::int64_t cols) {
  backend::StridedPlan<2> plan;
  plan.ndim = 2;
  plan.shape[0] = rows;
  plan.shape[1] = cols;
  for (int k = 0; k < 2; ++k) {
    plan.strides[k][0] = cols;
    plan.strides[k][1] = 1;
  }
  return plan;
}

inline constexpr std::int64_t kRows[] = {1, 3, 37};
inline constexpr std::int64_t kCols[] = {1, 7, 31, 33, 257, 1000};

}  // namespace rig::kernels::test
