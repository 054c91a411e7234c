// The inv_poly_decay lr_policy plugin: its learning rates against the golden ones and its refusal
// of nonsense parameters.
#include <gtest/gtest.h>

#include "../common/lr_policy_test.hpp"
#include "test_tensor_util.hpp"

namespace {

TEST(InvPolyDecay, MatchesGolden) {
  rig_test::expect_golden_learning_rates("inv_poly_decay");
}

TEST(InvPolyDecay, RejectsBadParams) {
  EXPECT_TRUE(rig_test::contains(
      rig_test::lr_policy_error("inv_poly_decay", "{learning_rate: 0.1, min_lr: 0.01, power: 0}"),
      "power must be > 0"));
}

}  // namespace
