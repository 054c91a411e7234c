// The pieces that keep ops off the heap: InlineFunction (backward closures),
// the object pool (TensorImpl, Storage, autograd::Node) and autograd's
// per-thread scratch (re-entrant backward).
#include <gtest/gtest.h>

#include <array>
#include <cstdint>
#include <memory>
#include <thread>
#include <vector>

#include "rig/autograd.hpp"
#include "rig/inline_function.hpp"
#include "rig/ops.hpp"
#include "tensor/object_pool.hpp"

namespace {

using rig::InlineFunction;
using rig::Tensor;
namespace ops = rig::ops;

struct Counted {
  static inline int live = 0;
  Counted() { ++live; }
  Counted(const Counted&) { ++live; }
  Counted(Counted&&) noexcept { ++live; }
  ~Counted() { --live; }
};

TEST(InlineFunction, SmallCallablesAreStoredInline) {
  int calls = 0;
  InlineFunction<int(int), 64> f = [&calls](int x) {
    ++calls;
    return 2 * x;
  };
  EXPECT_TRUE(static_cast<bool>(f));
  EXPECT_TRUE(f.stored_inline());
  EXPECT_EQ(f(21), 42);
  InlineFunction<int(int), 64> g = std::move(f);
  EXPECT_FALSE(static_cast<bool>(f));  // NOLINT: moved-from is empty
  EXPECT_EQ(g(1), 2);
  EXPECT_EQ(calls, 2);
  g = nullptr;
  EXPECT_FALSE(static_cast<bool>(g));
  EXPECT_THROW(g(1), std::bad_function_call);
}

TEST(InlineFunction, LargeCallablesGoToTheHeapAndStillWork) {
  using Small = InlineFunction<double(), 64>;
  std::array<double, 64> big{};
  big[63] = 5.0;
  const auto large = [big] { return big[63]; };
  static_assert(!Small::fits_inline<decltype(large)>);
  Small f = large;
  EXPECT_FALSE(f.stored_inline());
  Small g = std::move(f);
  EXPECT_EQ(g(), 5.0);
}

TEST(InlineFunction, MoveOnlyCapturesAndDestruction) {
  Counted::live = 0;
  {
    auto owned = std::make_unique<int>(7);
    InlineFunction<int()> f = [p = std::move(owned), c = Counted()] { return *p; };
    EXPECT_EQ(f(), 7);
    InlineFunction<int()> g;
    g = std::move(f);
    EXPECT_EQ(g(), 7);
    EXPECT_EQ(Counted::live, 1);
  }
  EXPECT_EQ(Counted::live, 0);
}

TEST(InlineFunction, ConvertsTheResult) {
  // Backward closures written for std::vector<Tensor> still work.
  rig::autograd::BackwardFn f = [](const Tensor& g) { return std::vector<Tensor>{g, Tensor()}; };
  const rig::TensorList out = f(Tensor::ones({2}));
  ASSERT_EQ(out.size(), 2U);
  EXPECT_TRUE(out[0].defined());
  EXPECT_FALSE(out[1].defined());
}

TEST(ObjectPool, RecyclesBlocksOfEachSizeClass) {
  rig::detail::ObjectPool pool(true);
  void* a = pool.allocate(100);
  void* b = pool.allocate(128);  // same 128-byte class
  void* c = pool.allocate(1024);
  EXPECT_NE(a, b);
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(a) % rig::detail::ObjectPool::kMaxAlign, 0U);
  EXPECT_EQ(pool.stats().live_blocks, 3U);
  pool.deallocate(a, 100);
  EXPECT_EQ(pool.allocate(120), a);  // the freed block comes back first
  pool.deallocate(a, 120);
  pool.deallocate(b, 128);
  pool.deallocate(c, 1024);
  EXPECT_EQ(pool.stats().live_blocks, 0U);
  EXPECT_EQ(pool.stats().chunk_bytes, 2 * rig::detail::ObjectPool::kChunkBytes);
}

TEST(ObjectPool, BlocksMayBeFreedOnAnotherThread) {
  rig::detail::ObjectPool pool(true);
  constexpr int kBlocks = 5000;  // several chunks
  for (int round = 0; round < 3; ++round) {
    std::vector<void*> blocks;
    std::thread producer([&] {
      for (int i = 0; i < kBlocks; ++i) blocks.push_back(pool.allocate(200));
    });
    producer.join();
    std::thread consumer([&] {
      for (void* p : blocks) pool.deallocate(p, 200);
    });
    consumer.join();
  }
  EXPECT_EQ(pool.stats().live_blocks, 0U);
  // Later rounds reused the first round's blocks.
  const auto per_chunk = rig::detail::ObjectPool::kChunkBytes / 256;
  EXPECT_EQ(pool.stats().chunk_bytes,
            (kBlocks + per_chunk - 1) / per_chunk * rig::detail::ObjectPool::kChunkBytes);
}

TEST(ObjectPool, PassesThroughWhenDisabled) {
  rig::detail::ObjectPool pool(false);
  void* a = pool.allocate(64);
  pool.deallocate(a, 64);
  EXPECT_EQ(pool.stats().chunk_bytes, 0U);
}

TEST(ObjectPool, PooledSharedPointersKeepSharedPtrSemantics) {
  std::weak_ptr<rig::TensorImpl> weak;
  {
    auto impl = rig::detail::make_pooled<rig::TensorImpl>();
    impl->shape = {2, 3};
    weak = impl;
    const std::shared_ptr<rig::TensorImpl> copy = impl;
    EXPECT_EQ(weak.use_count(), 2);
  }
  EXPECT_TRUE(weak.expired());
  // Tensors made on one thread and released on another.
  std::vector<Tensor> made;
  std::thread maker([&] {
    for (int i = 0; i < 100; ++i) made.push_back(ops::add_scalar(Tensor::ones({4}), 1.0F));
  });
  maker.join();
  EXPECT_FLOAT_EQ(made.back().to_vector()[3], 2.0F);
  std::thread([&] { made.clear(); }).join();
}

TEST(Autograd, BackwardMayRunInsideABackwardFunction) {
  Tensor x = Tensor::full({2}, 3.0F).set_requires_grad(true);
  Tensor inner_leaf = Tensor::full({2}, 1.0F).set_requires_grad(true);
  // A backward function that itself runs backward() on another graph.
  const Tensor y = rig::autograd::record(
      ops::mul_scalar(x.detach(), 2.0F), "double", {x},
      [](const Tensor& g) { return rig::TensorList{ops::mul_scalar(g, 2.0F)}; });
  const Tensor z = ops::sum(ops::mul(inner_leaf, inner_leaf));
  const Tensor loss =
      rig::autograd::record(ops::sum(y).detach(), "outer", {ops::sum(y)}, [&](const Tensor& g) {
        z.backward();  // re-entrant
        return rig::TensorList{g};
      });
  loss.backward();
  EXPECT_EQ(x.grad().to_vector(), (std::vector<float>{2.0F, 2.0F}));
  EXPECT_EQ(inner_leaf.grad().to_vector(), (std::vector<float>{2.0F, 2.0F}));
}

TEST(Autograd, LongOpNamesAreCut) {
  const std::string name(100, 'n');
  const rig::autograd::OpName op(name);
  EXPECT_EQ(op.view(), std::string(rig::autograd::OpName::kMaxLength, 'n'));
  EXPECT_EQ(rig::autograd::OpName("relu"), "relu");
}

}  // namespace
