// The LazyAdam optimizer plugin: adam.cpp registered under OpenSeq2Seq's name,
// the same dense Adam (its golden runs are adam's), with the same state.
#include <gtest/gtest.h>

#include <string>

#include "../common/optimizer_test.hpp"

namespace {

using namespace rig_test::optimizers;

// LazyAdam is the same dense Adam under another name.
TEST(OptimizerLazyAdam, GoldenIsDenseAdam) {
  Plugin lazy("LazyAdam");
  EXPECT_EQ(std::string(lazy.plugin.descriptor->name), "LazyAdam");
  check_golden("adam_default", "LazyAdam");
  check_golden("adamw", "LazyAdam");
}

TEST(OptimizerLazyAdam, StateRoundTripResumesExactly) {
  check_resume("LazyAdam", "{}", {"exp_avg", "exp_avg_sq", "step"});
}

}  // namespace
