// SmallVector: std::vector semantics with inline storage, for trivial and
// non-trivial elements, inline and on the heap, including aliasing inserts.
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "rig/small_vector.hpp"
#include "rig/tensor.hpp"

namespace {

using rig::SmallVector;
using Ints = SmallVector<std::int64_t, 4>;
using Strings = SmallVector<std::string, 2>;

std::vector<std::int64_t> as_vector(const Ints& v) {
  return {v.begin(), v.end()};
}

// Counts live instances, to check that every constructed element is destroyed once.
struct Tracked {
  static inline int live = 0;
  int value = 0;
  Tracked(int v = 0) : value(v) { ++live; }  // NOLINT: implicit for brevity
  Tracked(const Tracked& o) : value(o.value) { ++live; }
  Tracked(Tracked&& o) noexcept : value(o.value) { ++live; }
  Tracked& operator=(const Tracked&) = default;
  Tracked& operator=(Tracked&&) noexcept = default;
  ~Tracked() { --live; }
};

TEST(SmallVector, ConstructionForms) {
  EXPECT_TRUE(Ints().empty());
  EXPECT_TRUE(Ints().is_inline());
  EXPECT_EQ(Ints::inline_capacity, 4U);
  EXPECT_EQ(as_vector(Ints{1, 2, 3}), (std::vector<std::int64_t>{1, 2, 3}));
  EXPECT_EQ(as_vector(Ints(3)), (std::vector<std::int64_t>{0, 0, 0}));
  EXPECT_EQ(as_vector(Ints(2, 7)), (std::vector<std::int64_t>{7, 7}));
  const std::vector<std::int64_t> v{4, 5, 6, 7, 8};
  const Ints from_vector = v;  // implicit, as code written for std::vector expects
  EXPECT_EQ(as_vector(from_vector), v);
  EXPECT_FALSE(from_vector.is_inline());
  EXPECT_EQ(as_vector(Ints(v.begin() + 1, v.end() - 1)), (std::vector<std::int64_t>{5, 6, 7}));
  const std::vector<std::int64_t> back = Ints{9, 8};  // and back
  EXPECT_EQ(back, (std::vector<std::int64_t>{9, 8}));
  EXPECT_EQ(Ints({1, 2}).to_vector(), (std::vector<std::int64_t>{1, 2}));
  // (int, int) is a count and a value, never an iterator pair.
  EXPECT_EQ(as_vector(Ints(2, 1)), (std::vector<std::int64_t>{1, 1}));
}

TEST(SmallVector, GrowsFromInlineToHeapKeepingValues) {
  Ints v;
  for (std::int64_t i = 0; i < 4; ++i) v.push_back(i);
  EXPECT_TRUE(v.is_inline());
  EXPECT_EQ(v.capacity(), 4U);
  v.push_back(4);
  EXPECT_FALSE(v.is_inline());
  EXPECT_GE(v.capacity(), 5U);
  for (std::int64_t i = 5; i < 100; ++i) v.emplace_back(i);
  ASSERT_EQ(v.size(), 100U);
  for (std::int64_t i = 0; i < 100; ++i) EXPECT_EQ(v[static_cast<std::size_t>(i)], i);
  v.resize(3);
  v.shrink_to_fit();
  EXPECT_TRUE(v.is_inline());
  EXPECT_EQ(as_vector(v), (std::vector<std::int64_t>{0, 1, 2}));
  Ints r;
  r.reserve(10);
  EXPECT_FALSE(r.is_inline());
  EXPECT_TRUE(r.empty());
}

TEST(SmallVector, AccessAndIteration) {
  Ints v{1, 2, 3};
  EXPECT_EQ(v.front(), 1);
  EXPECT_EQ(v.back(), 3);
  EXPECT_EQ(v.at(1), 2);
  EXPECT_THROW(v.at(3), std::out_of_range);
  EXPECT_EQ(*v.data(), 1);
  EXPECT_EQ(std::vector<std::int64_t>(v.rbegin(), v.rend()), (std::vector<std::int64_t>{3, 2, 1}));
  v.back() = 9;
  v[0] = 8;
  EXPECT_EQ(as_vector(v), (std::vector<std::int64_t>{8, 2, 9}));
  v.pop_back();
  EXPECT_EQ(as_vector(v), (std::vector<std::int64_t>{8, 2}));
  v.clear();
  EXPECT_TRUE(v.empty());
}

TEST(SmallVector, InsertAndErase) {
  Ints v{1, 4};
  auto it = v.insert(v.begin() + 1, 2);
  EXPECT_EQ(*it, 2);
  v.insert(v.begin() + 2, std::int64_t{3});
  EXPECT_EQ(as_vector(v), (std::vector<std::int64_t>{1, 2, 3, 4}));
  v.insert(v.begin(), 2, 0);  // spills to the heap
  EXPECT_EQ(as_vector(v), (std::vector<std::int64_t>{0, 0, 1, 2, 3, 4}));
  const std::vector<std::int64_t> tail{5, 6};
  v.insert(v.end(), tail.begin(), tail.end());
  v.insert(v.begin() + 1, {7, 7});
  EXPECT_EQ(as_vector(v), (std::vector<std::int64_t>{0, 7, 7, 0, 1, 2, 3, 4, 5, 6}));
  it = v.erase(v.begin() + 1, v.begin() + 3);
  EXPECT_EQ(*it, 0);
  v.erase(v.begin());
  v.erase(v.end() - 1);
  EXPECT_EQ(as_vector(v), (std::vector<std::int64_t>{0, 1, 2, 3, 4, 5}));
  EXPECT_EQ(v.erase(v.begin() + 2, v.begin() + 2), v.begin() + 2);
  v.emplace(v.begin() + 3, 42);
  EXPECT_EQ(as_vector(v), (std::vector<std::int64_t>{0, 1, 2, 42, 3, 4, 5}));
}

TEST(SmallVector, ArgumentsMayAliasTheVector) {
  Ints v{1, 2, 3, 4};  // full: the next push_back grows
  v.push_back(v[0]);
  EXPECT_EQ(as_vector(v), (std::vector<std::int64_t>{1, 2, 3, 4, 1}));
  v.insert(v.begin(), v.begin() + 1, v.begin() + 3);
  EXPECT_EQ(as_vector(v), (std::vector<std::int64_t>{2, 3, 1, 2, 3, 4, 1}));
  v.insert(v.begin(), 3, v.back());
  EXPECT_EQ(as_vector(v), (std::vector<std::int64_t>{1, 1, 1, 2, 3, 1, 2, 3, 4, 1}));
  Ints w{5};
  w.resize(8, w[0]);
  EXPECT_EQ(as_vector(w), (std::vector<std::int64_t>(8, 5)));
}

TEST(SmallVector, ResizeAndAssign) {
  Ints v;
  v.resize(2);
  EXPECT_EQ(as_vector(v), (std::vector<std::int64_t>{0, 0}));
  v.resize(6, 3);
  EXPECT_EQ(as_vector(v), (std::vector<std::int64_t>{0, 0, 3, 3, 3, 3}));
  v.assign(2, 9);
  EXPECT_EQ(as_vector(v), (std::vector<std::int64_t>{9, 9}));
  v.assign({1, 2, 3, 4, 5, 6, 7});
  EXPECT_EQ(v.size(), 7U);
  const std::vector<std::int64_t> src{8, 9};
  v.assign(src.begin(), src.end());
  EXPECT_EQ(as_vector(v), src);
  v = {4, 5};
  EXPECT_EQ(as_vector(v), (std::vector<std::int64_t>{4, 5}));
}

TEST(SmallVector, CopyMoveAndSwapInlineAndOnTheHeap) {
  for (const std::size_t n : {2U, 9U}) {
    Strings a;
    for (std::size_t i = 0; i < n; ++i) a.push_back("element number " + std::to_string(i));
    Strings copy = a;
    EXPECT_EQ(copy, a);
    Strings moved = std::move(copy);
    EXPECT_EQ(moved, a);
    EXPECT_TRUE(copy.empty());  // NOLINT: moved-from is empty, by contract
    Strings assigned{"x"};
    assigned = moved;
    EXPECT_EQ(assigned, a);
    Strings move_assigned{"y", "z", "w"};
    move_assigned = std::move(assigned);
    EXPECT_EQ(move_assigned, a);
    Strings other{"q"};
    swap(other, move_assigned);
    EXPECT_EQ(other, a);
    EXPECT_EQ(move_assigned, (Strings{"q"}));
    Strings& same = other;
    other = same;  // self-assignment is harmless
    EXPECT_EQ(other, a);
  }
}

TEST(SmallVector, EveryElementIsDestroyedOnce) {
  Tracked::live = 0;
  {
    SmallVector<Tracked, 3> v;
    for (int i = 0; i < 10; ++i) v.emplace_back(i);
    v.insert(v.begin() + 2, Tracked(100));
    v.erase(v.begin(), v.begin() + 3);
    auto copy = v;
    auto moved = std::move(copy);
    v.resize(2);
    v.resize(12, Tracked(7));
    moved.assign(4, Tracked(1));
    moved.shrink_to_fit();
    EXPECT_EQ(Tracked::live, static_cast<int>(v.size() + moved.size() + copy.size()));
  }
  EXPECT_EQ(Tracked::live, 0);
}

TEST(SmallVector, ComparesWithItselfAndWithStdVector) {
  EXPECT_EQ((Ints{1, 2}), (Ints{1, 2}));
  EXPECT_NE((Ints{1, 2}), (Ints{1, 2, 3}));
  EXPECT_NE((Ints{1, 2}), (Ints{2, 1}));
  EXPECT_TRUE((Ints{1, 2}) == (std::vector<std::int64_t>{1, 2}));
  EXPECT_TRUE((std::vector<std::int64_t>{1, 2}) == (Ints{1, 2}));
  EXPECT_TRUE((Ints{1, 2}) != (std::vector<std::int64_t>{1}));
  EXPECT_LT((Ints{1, 2}), (Ints{1, 3}));
  EXPECT_LT((Ints{1}), (Ints{1, 0}));
}

TEST(SmallVector, ShapesStayInline) {
  const rig::Shape shape{32, 4, 32, 64};
  EXPECT_TRUE(shape.is_inline());
  EXPECT_EQ(sizeof(rig::Shape), 64U);  // pointer, size, capacity, 6 dims
  EXPECT_EQ(rig::to_string(shape), "[32,4,32,64]");
  EXPECT_EQ(rig::contiguous_strides(shape), (rig::Strides{8192, 2048, 64, 1}));
  rig::TensorList tensors{rig::Tensor::zeros({2}), rig::Tensor()};
  EXPECT_TRUE(tensors.is_inline());
  EXPECT_TRUE(tensors[0].defined());
  EXPECT_FALSE(tensors[1].defined());
}

}  // namespace
