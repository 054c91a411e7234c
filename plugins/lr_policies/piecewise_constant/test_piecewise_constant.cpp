// The piecewise_constant lr_policy plugin: its learning rates against the golden ones and its
// refusal of nonsense parameters.
#include <gtest/gtest.h>

#include "../common/lr_policy_test.hpp"
#include "test_tensor_util.hpp"

namespace {

TEST(PiecewiseConstant, MatchesGolden) {
  rig_test::expect_golden_learning_rates("piecewise_constant");
}

TEST(PiecewiseConstant, RejectsBadParams) {
  EXPECT_TRUE(rig_test::contains(
      rig_test::lr_policy_error("piecewise_constant",
                                "{learning_rate: 0.1, boundaries: [1, 2], decay_rates: [0.1]}"),
      "same length"));
  EXPECT_TRUE(
      rig_test::contains(rig_test::lr_policy_error(
                             "piecewise_constant",
                             "{learning_rate: 0.1, boundaries: [5, 2], decay_rates: [0.1, 0.01]}"),
                         "sorted"));
}

}  // namespace
