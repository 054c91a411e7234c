// Golden values from PyTorch (tests/golden/<area>.json, written by
// tests/golden/gen_<area>.py): the tests compare against them without torch.
#pragma once

#include <map>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "rig/tensor.hpp"

namespace rig_test {

struct GoldenCase {
  std::string name;
  std::map<std::string, rig::Tensor> inputs;
  std::map<std::string, rig::Tensor> outputs;
  std::map<std::string, rig::Tensor> grads;
  nlohmann::json params;

  const rig::Tensor& input(const std::string& key) const;
  const rig::Tensor& output(const std::string& key) const;
  const rig::Tensor& grad(const std::string& key) const;
};

// All cases of tests/golden/<area>.json; fails the test if the file is missing.
std::vector<GoldenCase> load_golden(const std::string& area);
// The case called `name` of `area`.
GoldenCase golden_case(const std::string& area, const std::string& name);

// Elementwise |actual - expected| <= atol + rtol |expected|, same shape; the
// message names the first bad element.
::testing::AssertionResult tensors_close(const rig::Tensor& actual, const rig::Tensor& expected,
                                         double rtol = 1e-5, double atol = 1e-6);

}  // namespace rig_test
