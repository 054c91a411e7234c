// The canonical order of deterministic gradient reduction: a fixed binary
// tree, T(slots) = T(even positions) + T(odd positions).
#include <gtest/gtest.h>

#include <vector>

#include "engine/deterministic_reduction.hpp"
#include "rig/tensor.hpp"

namespace {

using rig::Tensor;

Tensor scalar(float v) {
  return Tensor::from_vector(std::vector<float>{v}, {1});
}

TEST(DeterministicReduction, SumsInTheFixedTree) {
  // In float32 1e8 + 1 == 1e8: the order decides the result. The tree adds
  // slots 0 + 2 and 1 + 3 first: (1e8 - 1e8) + (1 + 1) = 2, where a running
  // sum in slot order gives ((1e8 + 1) - 1e8) + 1 = 1.
  const Tensor sum =
      rig::engine::canonical_sum({scalar(1e8F), scalar(1.0F), scalar(-1e8F), scalar(1.0F)});
  EXPECT_EQ(sum.to_vector(), std::vector<float>{2.0F});
}

TEST(DeterministicReduction, OddCountsAndOneSlot) {
  EXPECT_EQ(rig::engine::canonical_sum({scalar(3.0F)}).to_vector(), std::vector<float>{3.0F});
  // Five slots a..e: ((a + e) + c) + (b + d). With a = 1e8, e = 4, c = -1e8
  // in float32: (1e8 + 4) rounds to 1e8, so the 4 is lost and the sum is 2
  // (a running sum in slot order would keep it: 6).
  const Tensor sum = rig::engine::canonical_sum(
      {scalar(1e8F), scalar(1.0F), scalar(-1e8F), scalar(1.0F), scalar(4.0F)});
  EXPECT_EQ(sum.to_vector(), std::vector<float>{2.0F});
  EXPECT_THROW(rig::engine::canonical_sum({}), std::invalid_argument);
}

}  // namespace
