// backend::SegmentPool on its own (the caching allocators' tests cover it
// through them): best fit per owner, splitting, merging with both
// neighbours, held pieces, releasing whole free segments largest first, and
// the byte and segment counts.
#include <gtest/gtest.h>

#include <array>
#include <cstddef>
#include <utility>
#include <vector>

#include "backend/segment_pool.hpp"

namespace {

using rig::backend::SegmentPool;

constexpr std::size_t kSplitAbove = 100;

// Fake segment addresses: the pool never touches the memory it keeps.
struct Arena {
  std::array<std::byte, 4096> bytes{};
  std::byte* at(std::size_t offset) { return bytes.data() + offset; }
};

TEST(SegmentPool, TakesTheSmallestFitOfItsOwnerAndSplitsWhatIsLeft) {
  Arena arena;
  SegmentPool pool(kSplitAbove);
  const auto first = pool.take_from_new_segment(arena.at(0), 1000, 300, 0);
  EXPECT_EQ(first.data, arena.at(0));
  EXPECT_EQ(first.size, 300U);
  EXPECT_EQ(pool.free_bytes(), 700U);                       // the rest, split off
  pool.take_from_new_segment(arena.at(1000), 500, 450, 0);  // 50 left: too small to split
  EXPECT_EQ(pool.size_in_use(arena.at(1000)), 500U);
  EXPECT_EQ(pool.free_bytes(), 700U);
  pool.take_from_new_segment(arena.at(2000), 400, 100, 7);  // another owner's segment
  // Owner 0's smallest fit for 200 is the 700-byte rest, not owner 7's 300.
  const auto second = pool.take(200, 0);
  ASSERT_TRUE(second.has_value());
  EXPECT_EQ(second->data, arena.at(300));
  EXPECT_FALSE(pool.take(600, 0).has_value());  // 500 left of owner 0: nothing fits
  const auto other = pool.take(250, 7);
  ASSERT_TRUE(other.has_value());
  EXPECT_EQ(other->data, arena.at(2100));
  EXPECT_EQ(pool.segments(), 3U);
  EXPECT_FALSE(pool.size_in_use(arena.at(301)).has_value());  // not a piece's start
}

TEST(SegmentPool, AFreedPieceMergesWithBothNeighbours) {
  Arena arena;
  SegmentPool pool(kSplitAbove);
  const auto a = pool.take_from_new_segment(arena.at(0), 1200, 300, 0);
  const auto b = *pool.take(300, 0);
  const auto c = *pool.take(300, 0);
  EXPECT_EQ(pool.free_bytes(), 300U);
  pool.give_back(a.data);
  pool.give_back(c.data);  // merges with the segment's free tail
  EXPECT_EQ(pool.free_bytes(), 900U);
  EXPECT_FALSE(pool.take(700, 0).has_value());  // 300 + 600, apart
  pool.give_back(b.data);                       // joins both: the whole segment
  EXPECT_EQ(pool.free_bytes(), 1200U);
  const auto whole = pool.take(1200, 0);
  ASSERT_TRUE(whole.has_value());
  EXPECT_EQ(whole->data, arena.at(0));
}

TEST(SegmentPool, AHeldPieceNeitherServesNorMergesUntilGivenBack) {
  Arena arena;
  SegmentPool pool(kSplitAbove);
  const auto a = pool.take_from_new_segment(arena.at(0), 600, 300, 0);
  pool.hold(a.data);
  EXPECT_FALSE(pool.size_in_use(a.data).has_value());  // out of use
  EXPECT_EQ(pool.free_bytes(), 300U);                  // and not free
  EXPECT_EQ(pool.take(300, 0)->data, arena.at(300));   // the other half, not the held one
  EXPECT_FALSE(pool.take(150, 0).has_value());
  pool.give_back(a.data);
  EXPECT_EQ(pool.take(300, 0)->data, arena.at(0));
}

TEST(SegmentPool, ReleasesWholeFreeSegmentsLargestFirstUntilEnough) {
  Arena arena;
  SegmentPool pool(kSplitAbove);
  std::vector<std::pair<std::byte*, std::size_t>> released;
  const auto release = [&](std::byte* data, std::size_t size) {
    released.emplace_back(data, size);
  };
  pool.give_back(pool.take_from_new_segment(arena.at(0), 300, 300, 0).data);
  pool.give_back(pool.take_from_new_segment(arena.at(300), 800, 800, 0).data);
  pool.give_back(pool.take_from_new_segment(arena.at(1100), 500, 500, 3).data);
  const auto kept = pool.take_from_new_segment(arena.at(1600), 1000, 200, 0);  // partly in use
  EXPECT_EQ(pool.free_bytes(), 300U + 800 + 500 + 800);
  EXPECT_EQ(pool.release_free_segments(release, 1000), 1300U);  // 800, then 500: enough
  ASSERT_EQ(released.size(), 2U);
  EXPECT_EQ(released[0], std::make_pair(arena.at(300), std::size_t{800}));
  EXPECT_EQ(released[1], std::make_pair(arena.at(1100), std::size_t{500}));
  EXPECT_EQ(pool.segments(), 2U);
  EXPECT_EQ(pool.release_free_segments(release), 300U);  // the partly used one stays
  EXPECT_EQ(pool.segments(), 1U);
  EXPECT_EQ(pool.free_bytes(), 800U);
  pool.give_back(kept.data);
  EXPECT_EQ(pool.release_free_segments(release), 1000U);
  EXPECT_EQ(pool.segments(), 0U);
  EXPECT_EQ(pool.free_bytes(), 0U);
}

// Split and merge many times: the recycled records keep every count exact.
TEST(SegmentPool, ManySplitsAndMergesKeepTheCountsExact) {
  Arena arena;
  SegmentPool pool(0);  // split whatever is left
  pool.give_back(pool.take_from_new_segment(arena.at(0), 4096, 4096, 0).data);
  for (int round = 0; round < 50; ++round) {
    std::vector<std::byte*> pieces;
    std::size_t taken = 0;
    for (std::size_t size = 64 + static_cast<std::size_t>(round); taken + size <= 4096;
         size += 64) {
      const auto piece = pool.take(size, 0);
      ASSERT_TRUE(piece.has_value());
      pieces.push_back(piece->data);
      taken += size;
    }
    EXPECT_EQ(pool.free_bytes(), 4096 - taken);
    // Every other piece, then the rest: merges on one side and on both.
    for (std::size_t i = 0; i < pieces.size(); i += 2) pool.give_back(pieces[i]);
    for (std::size_t i = 1; i < pieces.size(); i += 2) pool.give_back(pieces[i]);
    EXPECT_EQ(pool.free_bytes(), 4096U);
    ASSERT_TRUE(pool.take(4096, 0).has_value());  // one piece again
    pool.give_back(arena.at(0));
  }
  EXPECT_EQ(pool.segments(), 1U);
}

}  // namespace
