// The parameter-server shard plan (core/src/engine/ps/shard_plan.*): cuts on
// hand-computed layouts in both modes, and over random layouts the shards'
// coverage, pieces and balance bound; determinism; the errors.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "engine/ps/shard_plan.hpp"
#include "test_tensor_util.hpp"
#include "user_error_of.hpp"

namespace {

using rig::Shape;
using rig::engine::ps::describe_shards;
using rig::engine::ps::ParameterExtent;
using rig::engine::ps::plan_shards;
using rig::engine::ps::Shard;
using rig_test::contains;
using rig_test::user_error_of;

std::vector<ParameterExtent> layout(const std::vector<Shape>& shapes) {
  std::vector<ParameterExtent> extents;
  std::int64_t offset = 0;
  for (std::size_t i = 0; i < shapes.size(); ++i) {
    std::string name = "p";
    name += std::to_string(i);
    extents.push_back({name, shapes[i], offset});
    offset += rig::shape_numel(shapes[i]);
  }
  return extents;
}

std::vector<std::int64_t> cuts(const std::vector<Shard>& shards) {
  std::vector<std::int64_t> at;
  for (std::size_t i = 1; i < shards.size(); ++i) at.push_back(shards[i].begin);
  return at;
}

std::vector<std::size_t> parameters_of(const Shard& shard) {
  std::vector<std::size_t> indices;
  for (const auto& piece : shard.pieces) indices.push_back(piece.parameter);
  return indices;
}

TEST(PsShardPlan, OneServerTakesAll) {
  const auto extents = layout({{3, 4}, {5}, {}});
  for (bool split : {false, true}) {
    const auto shards = plan_shards(extents, 1, split);
    ASSERT_EQ(shards.size(), 1U);
    EXPECT_EQ(shards[0].begin, 0);
    EXPECT_EQ(shards[0].end, 18);
    ASSERT_EQ(shards[0].pieces.size(), 3U);
    for (std::size_t i = 0; i < 3; ++i) {
      EXPECT_TRUE(shards[0].pieces[i].whole());
      EXPECT_EQ(shards[0].pieces[i].shape, extents[i].shape);
      EXPECT_EQ(shards[0].pieces[i].offset, extents[i].offset);
    }
  }
}

TEST(PsShardPlan, EqualParametersSplitEvenly) {
  const auto extents = layout({{10, 10}, {10, 10}, {10, 10}, {10, 10}});
  for (bool split : {false, true}) {
    EXPECT_EQ(cuts(plan_shards(extents, 2, split)), (std::vector<std::int64_t>{200}));
    const auto four = plan_shards(extents, 4, split);
    EXPECT_EQ(cuts(four), (std::vector<std::int64_t>{100, 200, 300}));
    for (std::size_t s = 0; s < 4; ++s) {
      EXPECT_EQ(parameters_of(four[s]), (std::vector<std::size_t>{s}));
      EXPECT_TRUE(four[s].pieces[0].whole());
    }
  }
}

TEST(PsShardPlan, UnevenParametersWholeAtTheNearestParameterEnd) {
  // T = 200, ideal cuts 67 and 133; parameter ends 10 60 80 110: 60 and 110.
  const auto shards = plan_shards(layout({{10}, {5, 10}, {20}, {3, 10}, {9, 10}}), 3, false);
  EXPECT_EQ(cuts(shards), (std::vector<std::int64_t>{60, 110}));
  EXPECT_EQ(parameters_of(shards[0]), (std::vector<std::size_t>{0, 1}));
  EXPECT_EQ(parameters_of(shards[1]), (std::vector<std::size_t>{2, 3}));
  EXPECT_EQ(parameters_of(shards[2]), (std::vector<std::size_t>{4}));
  // Ideal 5 is as far from 4 as from 6: the lower end.
  EXPECT_EQ(cuts(plan_shards(layout({{4}, {2}, {4}}), 2, false)), (std::vector<std::int64_t>{4}));
  // Ideals 34 and 68 are nearest 2 and 102: the cuts move to leave each server one.
  EXPECT_EQ(cuts(plan_shards(layout({{1}, {1}, {100}}), 3, false)),
            (std::vector<std::int64_t>{1, 2}));
}

TEST(PsShardPlan, LargeParameterSplitByRows) {
  // A bias of 4 rows of 1, W [10,2,3] (rows of 6) at 4, a scalar at 64: T = 65.
  // Ideal cuts 22 (a row boundary of W) and 43 (between 40 and 46: the lower).
  const auto extents = layout({{4}, {10, 2, 3}, {}});
  const auto shards = plan_shards(extents, 3, true);
  EXPECT_EQ(cuts(shards), (std::vector<std::int64_t>{22, 40}));
  ASSERT_EQ(parameters_of(shards[0]), (std::vector<std::size_t>{0, 1}));
  ASSERT_EQ(parameters_of(shards[1]), (std::vector<std::size_t>{1}));
  ASSERT_EQ(parameters_of(shards[2]), (std::vector<std::size_t>{1, 2}));

  EXPECT_TRUE(shards[0].pieces[0].whole());
  EXPECT_EQ(shards[0].pieces[0].shape, (Shape{4}));
  const auto& w0 = shards[0].pieces[1];
  const auto& w1 = shards[1].pieces[0];
  const auto& w2 = shards[2].pieces[0];
  EXPECT_EQ(w0.name, "p1");
  EXPECT_EQ(w1.name, "p1");
  EXPECT_FALSE(w0.whole());
  EXPECT_FALSE(w1.whole());
  EXPECT_FALSE(w2.whole());
  EXPECT_EQ(w0.shape, (Shape{3, 2, 3}));
  EXPECT_EQ(w1.shape, (Shape{3, 2, 3}));
  EXPECT_EQ(w2.shape, (Shape{4, 2, 3}));
  EXPECT_EQ(w0.offset, 4);
  EXPECT_EQ(w1.offset, 22);
  EXPECT_EQ(w2.offset, 40);
  EXPECT_EQ(w0.numel + w1.numel + w2.numel, 60);
  EXPECT_TRUE(shards[2].pieces[1].whole());
  EXPECT_EQ(shards[2].pieces[1].shape, Shape{});
  EXPECT_EQ(shards[2].pieces[1].offset, 64);

  EXPECT_EQ(describe_shards(shards)[1],
            "server 1: elements [22, 40), 1 parameter(s) (1 partial), 72 B");
}

TEST(PsShardPlan, ZeroSizeParametersGoWithANeighbour) {
  // Zero-size parameters at the start, at the cut (4) and at the end.
  const auto extents = layout({{0, 5}, {4}, {0}, {4}, {0}});
  for (bool split : {false, true}) {
    const auto shards = plan_shards(extents, 2, split);
    EXPECT_EQ(cuts(shards), (std::vector<std::int64_t>{4}));
    EXPECT_EQ(parameters_of(shards[0]), (std::vector<std::size_t>{0, 1}));
    EXPECT_EQ(parameters_of(shards[1]), (std::vector<std::size_t>{2, 3, 4}));
    EXPECT_TRUE(shards[1].pieces[0].whole());
  }
  EXPECT_TRUE(
      contains(user_error_of([&] { plan_shards(extents, 3, false); }), "use at most 2 server(s)"));
  // Only zero-size parameters: one server holds them all.
  const auto empty = plan_shards(layout({{0}, {3, 0}}), 1, true);
  EXPECT_EQ(empty[0].numel(), 0);
  EXPECT_EQ(empty[0].pieces.size(), 2U);
}

// Random layouts in both modes: the plan's invariants and its balance bound.
TEST(PsShardPlan, PiecesCoverTheBufferExactlyOnce) {
  int planned = 0;
  int bounded = 0;
  for (std::uint32_t seed = 0; seed < 400; ++seed) {
    std::mt19937 rng(seed);
    auto below = [&](int n) { return static_cast<std::int64_t>(rng() % static_cast<unsigned>(n)); };
    std::vector<Shape> shapes(static_cast<std::size_t>(1 + below(8)));
    for (auto& shape : shapes) {
      const auto rank = below(4);
      for (std::int64_t d = 0; d < rank; ++d) shape.push_back(below(10) == 0 ? 0 : 1 + below(7));
    }
    const auto extents = layout(shapes);
    const std::int64_t total = extents.back().offset + rig::shape_numel(shapes.back());
    for (bool split : {false, true}) {
      std::int64_t pieces = 0;
      std::int64_t gap = 0;  // the largest gap between adjacent admissible boundaries
      for (const auto& shape : shapes) {
        const auto n = rig::shape_numel(shape);
        if (n == 0) continue;
        const auto rows = split && !shape.empty() ? shape[0] : 1;
        pieces += rows;
        gap = std::max(gap, n / rows);
      }
      const int servers =
          static_cast<int>(1 + below(static_cast<int>(std::max<std::int64_t>(pieces, 1)) + 1));
      SCOPED_TRACE(testing::Message() << "seed " << seed << " split " << split << " servers "
                                      << servers << " total " << total);
      if (servers > 1 && servers > pieces) {
        EXPECT_TRUE(
            contains(user_error_of([&] { plan_shards(extents, servers, split); }), "use at most"));
        continue;
      }
      ++planned;
      const auto shards = plan_shards(extents, servers, split);
      ASSERT_EQ(shards.size(), static_cast<std::size_t>(servers));
      EXPECT_EQ(shards.front().begin, 0);
      EXPECT_EQ(shards.back().end, total);
      std::vector<std::int64_t> held(extents.size(), 0);
      std::vector<int> seen(extents.size(), 0);
      for (std::size_t s = 0; s < shards.size(); ++s) {
        const auto& shard = shards[s];
        if (s > 0) {
          EXPECT_EQ(shard.begin, shards[s - 1].end);
        }
        if (servers > 1) {
          EXPECT_GT(shard.numel(), 0);
        }
        std::int64_t at = shard.begin;
        for (const auto& piece : shard.pieces) {
          const auto& p = extents[piece.parameter];
          EXPECT_EQ(piece.offset, at);
          at += piece.numel;
          EXPECT_EQ(piece.name, p.name);
          EXPECT_EQ(rig::shape_numel(piece.shape), piece.numel);
          EXPECT_EQ(piece.parameter_numel, rig::shape_numel(p.shape));
          if (!split) {
            EXPECT_TRUE(piece.whole());
          }
          if (!piece.whole()) {
            const auto row = piece.parameter_numel / p.shape[0];
            EXPECT_EQ((piece.offset - p.offset) % row, 0);
            EXPECT_EQ(piece.shape.size(), p.shape.size());
            EXPECT_TRUE(
                std::equal(piece.shape.begin() + 1, piece.shape.end(), p.shape.begin() + 1));
          }
          held[piece.parameter] += piece.numel;
          ++seen[piece.parameter];
        }
        EXPECT_EQ(at, shard.end);
      }
      for (std::size_t i = 0; i < extents.size(); ++i) {
        EXPECT_EQ(held[i], rig::shape_numel(extents[i].shape));
        if (!split || held[i] == 0) {
          EXPECT_EQ(seen[i], 1);
        }
      }
      // The guarantee in shard_plan.cpp: with T >= S*G each shard is within G of T/S.
      if (total > 0 && total >= servers * gap) {
        ++bounded;
        for (const auto& shard : shards) {
          EXPECT_LT(std::abs(shard.numel() * servers - total), gap * servers);
        }
      }
    }
  }
  EXPECT_GT(planned, 400);
  EXPECT_GT(bounded, 100);
}

TEST(PsShardPlan, SameInputSamePlan) {
  const auto extents = layout({{7, 3}, {5}, {}, {11, 2, 2}, {0}, {9}});
  for (bool split : {false, true}) {
    const auto a = plan_shards(extents, 3, split);
    const auto b = plan_shards(extents, 3, split);
    ASSERT_EQ(a.size(), b.size());
    for (std::size_t s = 0; s < a.size(); ++s) {
      EXPECT_EQ(a[s].begin, b[s].begin);
      EXPECT_EQ(a[s].end, b[s].end);
      ASSERT_EQ(a[s].pieces.size(), b[s].pieces.size());
      for (std::size_t i = 0; i < a[s].pieces.size(); ++i) {
        EXPECT_EQ(a[s].pieces[i].parameter, b[s].pieces[i].parameter);
        EXPECT_EQ(a[s].pieces[i].shape, b[s].pieces[i].shape);
        EXPECT_EQ(a[s].pieces[i].offset, b[s].pieces[i].offset);
        EXPECT_EQ(a[s].pieces[i].numel, b[s].pieces[i].numel);
      }
    }
    EXPECT_EQ(describe_shards(a), describe_shards(b));
  }
}

TEST(PsShardPlan, Errors) {
  const auto three = layout({{10, 10}, {10, 10}, {1034}});
  EXPECT_EQ(user_error_of([&] { plan_shards(three, 4, false); }),
            "cannot split 3 parameter(s) (1234 elements) among 4 servers: each server needs at "
            "least one whole parameter; use at most 3 server(s)");
  EXPECT_NO_THROW(plan_shards(three, 3, false));
  EXPECT_NO_THROW(plan_shards(three, 4, true));
  const auto rows = layout({{2, 3}, {}});
  EXPECT_EQ(user_error_of([&] { plan_shards(rows, 4, true); }),
            "cannot split 3 parameter row(s) (7 elements) among 4 servers: each server needs at "
            "least one row of a parameter; use at most 3 server(s)");
  EXPECT_TRUE(contains(user_error_of([&] { plan_shards(rows, 0, false); }), "at least 1"));
  EXPECT_TRUE(contains(user_error_of([&] { plan_shards(rows, -2, true); }), "found -2"));

  auto gap = layout({{2}, {3}});
  gap[1].offset = 3;
  EXPECT_THROW(plan_shards(gap, 1, false), std::invalid_argument);
  auto late = layout({{2}});
  late[0].offset = 1;
  EXPECT_THROW(plan_shards(late, 1, true), std::invalid_argument);
}

TEST(PsShardPlan, DescribeShards) {
  // T = 2200: the cut at 1100 falls on a row boundary of the first parameter.
  const auto shards = plan_shards(layout({{500, 4}, {100}, {100}}), 2, true);
  EXPECT_EQ(describe_shards(shards),
            (std::vector<std::string>{
                "server 0: elements [0, 1100), 1 parameter(s) (1 partial), 4.3 KiB",
                "server 1: elements [1100, 2200), 3 parameter(s) (1 partial), 4.3 KiB"}));
  EXPECT_EQ(describe_shards(plan_shards(layout({{3}}), 1, false)),
            (std::vector<std::string>{"server 0: elements [0, 3), 1 parameter(s), 12 B"}));
}

}  // namespace
