// The fixed_lr lr_policy plugin: the same rate at every step.
#include <gtest/gtest.h>

#include <cstdint>

#include "../common/lr_policy_test.hpp"

namespace {

TEST(FixedLr, SameRateAtEveryStep) {
  auto policy = rig_test::make_lr_policy("fixed_lr", "{learning_rate: 0.25}", 100, 10);
  for (std::int64_t step : {0, 1, 99, 100000}) EXPECT_EQ(policy->learning_rate(step), 0.25);
}

}  // namespace
