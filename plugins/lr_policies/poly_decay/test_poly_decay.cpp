// The poly_decay lr_policy plugin: its learning rates against the golden ones, decay_steps
// defaulting to max_steps, and its refusal of nonsense parameters.
#include <gtest/gtest.h>

#include "../common/lr_policy_test.hpp"
#include "test_tensor_util.hpp"

namespace {

TEST(PolyDecay, MatchesGolden) {
  rig_test::expect_golden_learning_rates("poly_decay");
}

TEST(PolyDecay, DecayStepsDefaultsToMaxSteps) {
  auto a = rig_test::make_lr_policy("poly_decay", "{learning_rate: 1.0}", 10);
  auto b = rig_test::make_lr_policy("poly_decay", "{learning_rate: 1.0, decay_steps: 10}", 999);
  for (std::int64_t s = 0; s < 15; ++s) EXPECT_DOUBLE_EQ(a->learning_rate(s), b->learning_rate(s));
  EXPECT_DOUBLE_EQ(a->learning_rate(5), 0.5);
}

TEST(PolyDecay, RejectsBadParams) {
  EXPECT_TRUE(rig_test::contains(
      rig_test::lr_policy_error("poly_decay", "{learning_rate: 0.1, decay_steps: 0}"),
      "decay_steps must be > 0"));
  EXPECT_TRUE(rig_test::contains(rig_test::lr_policy_error("poly_decay", "{learning_rate: 0.1}", 0),
                                 "max_steps"));
  EXPECT_TRUE(
      rig_test::contains(rig_test::lr_policy_error("poly_decay", "{learning_rate: 0.1, power: 0}"),
                         "power must be > 0"));
}

}  // namespace
