// The cosine_decay lr_policy plugin: its learning rates against the golden ones and its refusal of
// nonsense parameters.
#include <gtest/gtest.h>

#include "../common/lr_policy_test.hpp"
#include "test_tensor_util.hpp"

namespace {

TEST(CosineDecay, MatchesGolden) {
  rig_test::expect_golden_learning_rates("cosine_decay");
}

TEST(CosineDecay, RejectsBadParams) {
  EXPECT_TRUE(rig_test::contains(
      rig_test::lr_policy_error("cosine_decay", "{learning_rate: 0.1, decay_steps: -3}"),
      "decay_steps must be > 0"));
}

}  // namespace
