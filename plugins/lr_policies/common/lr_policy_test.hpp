// For the lr_policy plugins' tests (test_<name>.cpp): a policy made from the
// schema's defaults and a few params, and its learning rates against the golden
// ones of tests/golden/lr_policies.json (from tests/golden/gen_lr_policies.py:
// OpenSeq2Seq's formulas transcribed, torch's OneCycleLR).
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <fstream>
#include <map>
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "test_plugins_util.hpp"
#include "user_error_of.hpp"

namespace rig_test {

// The lr_policy plugin `name`, loaded once.
inline LoadedPlugin& lr_policy_plugin(const std::string& name) {
  static std::map<std::string, std::unique_ptr<LoadedPlugin>> loaded;
  auto& slot = loaded[name];
  if (!slot) slot = std::make_unique<LoadedPlugin>("lr_policy", name);
  return *slot;
}

inline std::unique_ptr<rig::LrPolicy> make_lr_policy(const std::string& name,
                                                     const std::string& params,
                                                     std::int64_t max_steps = 0,
                                                     std::int64_t steps_per_epoch = 0) {
  auto& plugin = lr_policy_plugin(name);
  rig::LrPolicyContext ctx;
  ctx.max_steps = max_steps;
  ctx.steps_per_epoch = steps_per_epoch;
  return plugin.descriptor->make_lr_policy(plugin.params(params), ctx);
}

// The UserError message of making the policy, or "<no error>".
inline std::string lr_policy_error(const std::string& name, const std::string& params,
                                   std::int64_t max_steps = 100) {
  return user_error_of([&] { make_lr_policy(name, params, max_steps); });
}

// Every golden case of policy `name` (there must be some), step by step.
inline void expect_golden_learning_rates(const std::string& name) {
  std::ifstream in(std::string(RIG_SOURCE_DIR) + "/tests/golden/lr_policies.json");
  ASSERT_TRUE(in.good()) << "missing tests/golden/lr_policies.json";
  const nlohmann::json doc = nlohmann::json::parse(in);
  int cases = 0;
  for (const auto& c : doc.at("cases")) {
    if (c.at("policy") != name) continue;
    ++cases;
    const std::string case_name = c.at("name");
    SCOPED_TRACE(case_name);
    auto policy = make_lr_policy(name, c.at("params").dump(), c.at("max_steps").get<std::int64_t>(),
                                 c.at("steps_per_epoch").get<std::int64_t>());
    const auto& lr = c.at("lr");
    ASSERT_FALSE(lr.empty());
    for (std::size_t step = 0; step < lr.size(); ++step) {
      const double expected = lr[step].get<double>();
      const double actual = policy->learning_rate(static_cast<std::int64_t>(step));
      EXPECT_LE(std::abs(actual - expected), 1e-6 * std::abs(expected) + 1e-15)
          << case_name << " step " << step << ": got " << actual << ", expected " << expected;
    }
  }
  EXPECT_GT(cases, 0) << "tests/golden/lr_policies.json has no case of " << name;
}

}  // namespace rig_test
