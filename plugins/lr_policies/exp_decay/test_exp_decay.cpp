// The exp_decay lr_policy plugin: its learning rates against the golden ones and its refusal of
// nonsense parameters.
#include <gtest/gtest.h>

#include "../common/lr_policy_test.hpp"
#include "test_tensor_util.hpp"

namespace {

TEST(ExpDecay, MatchesGolden) {
  rig_test::expect_golden_learning_rates("exp_decay");
}

TEST(ExpDecay, RejectsBadParams) {
  EXPECT_TRUE(rig_test::contains(
      rig_test::lr_policy_error("exp_decay",
                                "{learning_rate: 0.1, decay_rate: 0, use_staircase_decay: false}"),
      "decay_rate must be > 0"));
  EXPECT_TRUE(rig_test::contains(
      rig_test::lr_policy_error("exp_decay",
                                "{learning_rate: 0.1, decay_rate: -1, use_staircase_decay: false}"),
      "decay_rate must be > 0"));
  EXPECT_TRUE(rig_test::contains(
      rig_test::lr_policy_error(
          "exp_decay", "{learning_rate: 0.1, decay_rate: 0.5, use_staircase_decay: true}", 0),
      "decay_steps must be > 0"));
  // Sensible params construct without error.
  EXPECT_EQ(rig_test::lr_policy_error(
                "exp_decay", "{learning_rate: 0.1, decay_rate: 0.5, use_staircase_decay: true}"),
            "<no error>");
}

}  // namespace
