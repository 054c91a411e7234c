// The transformer_policy lr_policy plugin: its learning rates against the golden ones and its
// refusal of nonsense parameters.
#include <gtest/gtest.h>

#include "../common/lr_policy_test.hpp"
#include "test_tensor_util.hpp"

namespace {

TEST(TransformerPolicy, MatchesGolden) {
  rig_test::expect_golden_learning_rates("transformer_policy");
}

TEST(TransformerPolicy, RejectsBadParams) {
  EXPECT_TRUE(rig_test::contains(
      rig_test::lr_policy_error("transformer_policy",
                                "{learning_rate: 1, d_model: 0, warmup_steps: 4}"),
      "d_model must be > 0"));
  EXPECT_TRUE(rig_test::contains(
      rig_test::lr_policy_error("transformer_policy",
                                "{learning_rate: 1, d_model: 16, warmup_steps: 0}"),
      "warmup_steps must be > 0"));
}

}  // namespace
