// The lr_policy plugins (plugins/lr_policies/*) against golden learning rates
// (tests/golden/lr_policies.json, from tests/golden/gen_lr_policies.py:
// OpenSeq2Seq's formulas transcribed, torch's OneCycleLR), and their
// refusal of nonsense parameters.
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

namespace {

rig_test::LoadedPlugin& plugin(const std::string& name) {
  static std::map<std::string, std::unique_ptr<rig_test::LoadedPlugin>> loaded;
  auto& slot = loaded[name];
  if (!slot) slot = std::make_unique<rig_test::LoadedPlugin>("lr_policy", name);
  return *slot;
}

std::unique_ptr<rig::LrPolicy> make(const std::string& name, const std::string& params,
                                    std::int64_t max_steps = 0, std::int64_t steps_per_epoch = 0) {
  auto& p = plugin(name);
  rig::LrPolicyContext ctx;
  ctx.max_steps = max_steps;
  ctx.steps_per_epoch = steps_per_epoch;
  return p.descriptor->make_lr_policy(p.params(params), ctx);
}

std::string error_of(const std::string& name, const std::string& params,
                     std::int64_t max_steps = 100) {
  return rig_test::user_error_of([&] { make(name, params, max_steps); });
}

nlohmann::json golden() {
  std::ifstream in(std::string(RIG_SOURCE_DIR) + "/tests/golden/lr_policies.json");
  EXPECT_TRUE(in.good()) << "missing tests/golden/lr_policies.json";
  return nlohmann::json::parse(in);
}

TEST(LrPolicies, DescriptorsAreLrPolicies) {
  for (const char* name : {"piecewise_constant", "exp_decay", "poly_decay", "cosine_decay",
                           "transformer_policy", "inv_poly_decay", "one_cycle"}) {
    auto& p = plugin(name);
    EXPECT_EQ(p.descriptor->kind, rig::PluginKind::lr_policy) << name;
    EXPECT_EQ(std::string(p.descriptor->name), name);
    EXPECT_NE(p.descriptor->make_lr_policy, nullptr) << name;
    const YAML::Node schema = p.schema();
    EXPECT_EQ(schema["type"].as<std::string>(), "object") << name;
    EXPECT_FALSE(schema["additionalProperties"].as<bool>()) << name;
    for (const auto& property : schema["properties"]) {
      EXPECT_TRUE(property.second["description"]) << name << "." << property.first;
    }
  }
}

TEST(LrPolicies, MatchGolden) {
  const nlohmann::json doc = golden();
  ASSERT_GE(doc.at("cases").size(), 7u);
  for (const auto& c : doc.at("cases")) {
    const std::string name = c.at("name");
    SCOPED_TRACE(name);
    auto policy = make(c.at("policy"), c.at("params").dump(), c.at("max_steps").get<std::int64_t>(),
                       c.at("steps_per_epoch").get<std::int64_t>());
    const auto& lr = c.at("lr");
    ASSERT_FALSE(lr.empty());
    for (std::size_t step = 0; step < lr.size(); ++step) {
      const double expected = lr[step].get<double>();
      const double actual = policy->learning_rate(static_cast<std::int64_t>(step));
      EXPECT_LE(std::abs(actual - expected), 1e-6 * std::abs(expected) + 1e-15)
          << name << " step " << step << ": got " << actual << ", expected " << expected;
    }
  }
}

TEST(LrPolicies, OneCycleKeepsFinalRateAfterTotalSteps) {
  auto policy = make("one_cycle", "{max_lr: 0.1}", 20);
  EXPECT_DOUBLE_EQ(policy->learning_rate(25), policy->learning_rate(19));
  EXPECT_NEAR(policy->learning_rate(19), 0.1 / 25 / 1e4, 1e-15);
}

TEST(LrPolicies, DecayStepsDefaultsToMaxSteps) {
  auto a = make("poly_decay", "{learning_rate: 1.0}", 10);
  auto b = make("poly_decay", "{learning_rate: 1.0, decay_steps: 10}", 999);
  for (std::int64_t s = 0; s < 15; ++s) EXPECT_DOUBLE_EQ(a->learning_rate(s), b->learning_rate(s));
  EXPECT_DOUBLE_EQ(a->learning_rate(5), 0.5);
}

TEST(LrPolicies, RejectBadParams) {
  auto has = [](const std::string& message, const std::string& part) {
    return message.find(part) != std::string::npos;
  };
  EXPECT_PRED2(has,
               error_of("piecewise_constant",
                        "{learning_rate: 0.1, boundaries: [1, 2], decay_rates: [0.1]}"),
               "same length");
  EXPECT_PRED2(has,
               error_of("piecewise_constant",
                        "{learning_rate: 0.1, boundaries: [5, 2], decay_rates: [0.1, 0.01]}"),
               "sorted");
  EXPECT_PRED2(
      has, error_of("exp_decay", "{learning_rate: 0.1, decay_rate: 0, use_staircase_decay: false}"),
      "decay_rate must be > 0");
  EXPECT_PRED2(
      has,
      error_of("exp_decay", "{learning_rate: 0.1, decay_rate: -1, use_staircase_decay: false}"),
      "decay_rate must be > 0");
  EXPECT_PRED2(
      has,
      error_of("exp_decay", "{learning_rate: 0.1, decay_rate: 0.5, use_staircase_decay: true}", 0),
      "decay_steps must be > 0");
  EXPECT_PRED2(has, error_of("poly_decay", "{learning_rate: 0.1, decay_steps: 0}"),
               "decay_steps must be > 0");
  EXPECT_PRED2(has, error_of("poly_decay", "{learning_rate: 0.1}", 0), "max_steps");
  EXPECT_PRED2(has, error_of("poly_decay", "{learning_rate: 0.1, power: 0}"), "power must be > 0");
  EXPECT_PRED2(has, error_of("cosine_decay", "{learning_rate: 0.1, decay_steps: -3}"),
               "decay_steps must be > 0");
  EXPECT_PRED2(has,
               error_of("transformer_policy", "{learning_rate: 1, d_model: 0, warmup_steps: 4}"),
               "d_model must be > 0");
  EXPECT_PRED2(has,
               error_of("transformer_policy", "{learning_rate: 1, d_model: 16, warmup_steps: 0}"),
               "warmup_steps must be > 0");
  EXPECT_PRED2(has, error_of("inv_poly_decay", "{learning_rate: 0.1, min_lr: 0.01, power: 0}"),
               "power must be > 0");
  EXPECT_PRED2(has, error_of("one_cycle", "{max_lr: 0.1, pct_start: 1.5}"), "pct_start");
  EXPECT_PRED2(has, error_of("one_cycle", "{max_lr: 0.1, anneal_strategy: cosine}"),
               "anneal_strategy");
  EXPECT_PRED2(has, error_of("one_cycle", "{max_lr: 0.1}", 0), "total_steps must be > 0");
  EXPECT_PRED2(has, error_of("one_cycle", "{max_lr: 0.1, div_factor: 0}"), "div_factor");
  // Sensible params construct without error.
  EXPECT_EQ(error_of("one_cycle", "{max_lr: 0.1}"), "<no error>");
  EXPECT_EQ(
      error_of("exp_decay", "{learning_rate: 0.1, decay_rate: 0.5, use_staircase_decay: true}"),
      "<no error>");
}

}  // namespace
