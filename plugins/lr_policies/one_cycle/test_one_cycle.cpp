// The one_cycle lr_policy plugin: its learning rates against the golden ones (torch's OneCycleLR),
// the final rate after total_steps, and its refusal of nonsense parameters.
#include <gtest/gtest.h>

#include "../common/lr_policy_test.hpp"
#include "test_tensor_util.hpp"

namespace {

TEST(OneCycle, MatchesGolden) {
  rig_test::expect_golden_learning_rates("one_cycle");
}

TEST(OneCycle, KeepsFinalRateAfterTotalSteps) {
  auto policy = rig_test::make_lr_policy("one_cycle", "{max_lr: 0.1}", 20);
  EXPECT_DOUBLE_EQ(policy->learning_rate(25), policy->learning_rate(19));
  EXPECT_NEAR(policy->learning_rate(19), 0.1 / 25 / 1e4, 1e-15);
}

TEST(OneCycle, RejectsBadParams) {
  EXPECT_TRUE(rig_test::contains(
      rig_test::lr_policy_error("one_cycle", "{max_lr: 0.1, pct_start: 1.5}"), "pct_start"));
  EXPECT_TRUE(rig_test::contains(
      rig_test::lr_policy_error("one_cycle", "{max_lr: 0.1, anneal_strategy: cosine}"),
      "anneal_strategy"));
  EXPECT_TRUE(rig_test::contains(rig_test::lr_policy_error("one_cycle", "{max_lr: 0.1}", 0),
                                 "total_steps must be > 0"));
  EXPECT_TRUE(rig_test::contains(
      rig_test::lr_policy_error("one_cycle", "{max_lr: 0.1, div_factor: 0}"), "div_factor"));
  // Sensible params construct without error.
  EXPECT_EQ(rig_test::lr_policy_error("one_cycle", "{max_lr: 0.1}"), "<no error>");
}

}  // namespace
