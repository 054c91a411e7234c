// Gradient buckets: their layout, their launch during backward, strictly in
// bucket order, and the bottleneck verdict built from their timings.
#include <gtest/gtest.h>

#include <chrono>
#include <thread>
#include <vector>

#include "engine/bottleneck.hpp"
#include "engine/gradient_reducer.hpp"
#include "rig/ops.hpp"

namespace {

using rig::Tensor;
using rig::engine::BucketSettings;
using rig::engine::GradientReducer;

// Two ranks that hold the same gradients: average leaves them as they are.
// Records each reduced buffer (its first element's address) and whether
// backward was still running when it was handed over.
class RecordingComm final : public rig::Communicator {
 public:
  int rank() const override { return 0; }
  int size() const override { return 2; }
  int local_rank() const override { return 0; }
  std::unique_ptr<rig::CommRequest> allreduce(Tensor buffer, rig::ReduceOp op) override {
    EXPECT_EQ(op, rig::ReduceOp::average);
    reduced.push_back(buffer);
    contents.push_back(buffer.to(rig::DType::f32).to_vector());
    during_backward.push_back(in_backward);
    return std::make_unique<rig::CompletedRequest>();
  }
  std::unique_ptr<rig::CommRequest> broadcast(Tensor, int) override {
    return std::make_unique<rig::CompletedRequest>();
  }
  std::unique_ptr<rig::CommRequest> allgather(Tensor, Tensor) override {
    return std::make_unique<rig::CompletedRequest>();
  }
  void barrier() override {}
  [[noreturn]] void abort(const std::string& reason, int) override {
    throw std::runtime_error(reason);
  }

  std::vector<Tensor> reduced;
  std::vector<std::vector<float>> contents;  // of each buffer when it was handed over
  std::vector<bool> during_backward;
  bool in_backward = false;
};

// Three parameters of 64, 32 and 16 floats (256, 128 and 64 bytes), computed
// in `compute` (bf16: f32 masters, mixed precision).
struct ThreeLayers {
  rig::ParameterStore params;
  Tensor w1, w2, w3;
  explicit ThreeLayers(rig::DType compute = rig::DType::f32) {
    w1 = params.declare("w1", {8, 8}, rig::Initializer::uniform(-1, 1));
    w2 = params.declare("w2", {8, 4}, rig::Initializer::uniform(-1, 1));
    w3 = params.declare("w3", {4, 4}, rig::Initializer::uniform(-1, 1));
    params.allocate(7, compute);
    w1 = params.parameters()[0].value;
    w2 = params.parameters()[1].value;
    w3 = params.parameters()[2].value;
  }
  Tensor loss(const Tensor& x) const {
    using namespace rig::ops;
    return sum(matmul(relu(matmul(relu(matmul(x, w1)), w2)), w3));
  }
};

std::int64_t offset_in(const rig::ParameterStore& params, const Tensor& slice) {
  return (slice.raw_data() - params.grads().raw_data()) / static_cast<std::int64_t>(sizeof(float));
}

TEST(GradientBuckets, ReverseParameterOrderCappedInBytes) {
  ThreeLayers net;
  // 200 bytes: w3 + w2 (192 bytes) share one, w1 (256 bytes) is alone although over the cap.
  const auto buckets = rig::engine::plan_buckets(net.params, 200);
  ASSERT_EQ(buckets.size(), 2U);
  EXPECT_EQ(buckets[0].parameters, (std::vector<std::size_t>{2, 1}));
  EXPECT_EQ(buckets[0].offset, 64);
  EXPECT_EQ(buckets[0].numel, 48);
  EXPECT_EQ(buckets[1].parameters, (std::vector<std::size_t>{0}));
  EXPECT_EQ(buckets[1].offset, 0);
  EXPECT_EQ(buckets[1].numel, 64);
  // A huge cap: one bucket covering everything; a tiny one: one per parameter.
  EXPECT_EQ(rig::engine::plan_buckets(net.params, 1 << 20).size(), 1U);
  EXPECT_EQ(rig::engine::plan_buckets(net.params, 1).size(), 3U);
}

TEST(GradientBuckets, LaunchedDuringBackwardInBucketOrder) {
  ThreeLayers net;
  RecordingComm comm;
  GradientReducer reducer(net.params, comm, BucketSettings{100.0 / (1024 * 1024), false});
  ASSERT_EQ(reducer.buckets().size(), 3U);
  const Tensor x = Tensor::ones({2, 8});
  reducer.arm();
  {
    rig::autograd::ScopedLeafGradListener listening(reducer);
    comm.in_backward = true;
    net.loss(x).backward();
    comm.in_backward = false;
  }
  // Backward reaches w3 first and w1 last: w1's bucket can only leave when
  // backward is done, the two others leave while it runs.
  ASSERT_EQ(comm.reduced.size(), 3U);
  EXPECT_EQ(offset_in(net.params, comm.reduced[0]), 96);  // w3
  EXPECT_EQ(offset_in(net.params, comm.reduced[1]), 64);  // w2
  EXPECT_EQ(offset_in(net.params, comm.reduced[2]), 0);   // w1
  EXPECT_TRUE(comm.during_backward[0]);
  EXPECT_TRUE(comm.during_backward[1]);
  const auto stats = reducer.finish();
  EXPECT_EQ(stats.buckets, 3);
  EXPECT_DOUBLE_EQ(stats.bytes, 112.0 * 4);
}

// Mixed precision: each bucket's bf16 gradients are unscaled into its f32
// masters just before it leaves, still during backward, so what is reduced is
// the true gradient and nothing is left to unscale after.
TEST(GradientBuckets, SixteenBitBucketsAreUnscaledAsTheyLeave) {
  ThreeLayers net(rig::DType::bf16);
  RecordingComm comm;
  GradientReducer reducer(net.params, comm, BucketSettings{100.0 / (1024 * 1024), false});
  ASSERT_EQ(reducer.buckets().size(), 3U);
  const Tensor x = Tensor::ones({2, 8}, rig::DType::bf16);
  net.params.grads().fill_(123.0F);  // stale masters: must all be rewritten
  reducer.arm(0.25);
  {
    rig::autograd::ScopedLeafGradListener listening(reducer);
    comm.in_backward = true;
    net.loss(x).backward();
    comm.in_backward = false;
  }
  ASSERT_EQ(comm.reduced.size(), 3U);
  EXPECT_TRUE(comm.during_backward[0]);
  EXPECT_TRUE(comm.during_backward[1]);
  reducer.finish();
  const std::vector<float> compute = net.params.compute_grads().to(rig::DType::f32).to_vector();
  bool any = false;
  for (std::size_t k = 0; k < comm.reduced.size(); ++k) {
    EXPECT_EQ(comm.reduced[k].dtype(), rig::DType::f32);
    const auto offset = static_cast<std::size_t>(offset_in(net.params, comm.reduced[k]));
    for (std::size_t j = 0; j < comm.contents[k].size(); ++j) {
      EXPECT_EQ(comm.contents[k][j], compute[offset + j] * 0.25F) << "bucket " << k << ", " << j;
      any = any || compute[offset + j] != 0.0F;
    }
  }
  EXPECT_TRUE(any) << "backward gave no gradient";
  const std::vector<float> master = net.params.grads().to_vector();
  for (std::size_t i = 0; i < master.size(); ++i) EXPECT_EQ(master[i], compute[i] * 0.25F) << i;
}

TEST(GradientBuckets, UnusedParametersAreReducedAtTheEnd) {
  ThreeLayers net;
  RecordingComm comm;
  GradientReducer reducer(net.params, comm, BucketSettings{100.0 / (1024 * 1024), false});
  reducer.arm();
  {
    // Only w1 gets a gradient: its bucket is last, so nothing may leave before
    // the buckets in front of it, which never fill.
    rig::autograd::ScopedLeafGradListener listening(reducer);
    rig::ops::sum(rig::ops::matmul(Tensor::ones({1, 8}), net.w1)).backward();
  }
  EXPECT_TRUE(comm.reduced.empty());
  const auto stats = reducer.finish();
  ASSERT_EQ(comm.reduced.size(), 3U);
  EXPECT_EQ(offset_in(net.params, comm.reduced[0]), 96);
  EXPECT_EQ(offset_in(net.params, comm.reduced[2]), 0);
  EXPECT_EQ(stats.buckets, 3);
}

TEST(GradientBuckets, NotArmedMeansNotLaunched) {
  // Earlier micro-batches of iter_size accumulate without reducing.
  ThreeLayers net;
  RecordingComm comm;
  GradientReducer reducer(net.params, comm, BucketSettings{});
  rig::autograd::ScopedLeafGradListener listening(reducer);
  net.loss(Tensor::ones({2, 8})).backward();
  EXPECT_TRUE(comm.reduced.empty());
}

TEST(GradientBuckets, Fp16CompressionReducesHalfTheBytes) {
  ThreeLayers net;
  RecordingComm comm;
  GradientReducer reducer(net.params, comm, BucketSettings{25.0, true});
  reducer.arm();
  {
    rig::autograd::ScopedLeafGradListener listening(reducer);
    net.loss(Tensor::ones({2, 8})).backward();
  }
  const std::vector<float> before = net.params.grads().to_vector();
  const auto stats = reducer.finish();
  ASSERT_EQ(comm.reduced.size(), 1U);
  EXPECT_EQ(comm.reduced[0].dtype(), rig::DType::f16);
  EXPECT_DOUBLE_EQ(stats.bytes, 112.0 * 2);
  // The gradients come back rounded to float16.
  const std::vector<float> after = net.params.grads().to_vector();
  for (std::size_t i = 0; i < before.size(); ++i) {
    EXPECT_NEAR(after[i], before[i], std::abs(before[i]) * 1e-3 + 1e-6) << i;
  }
}

TEST(Bottleneck, NamesWhatTheStepWaitsFor) {
  using rig::engine::StepCosts;
  StepCosts compute{1.0, 0.05, 0.1, 0.3, 4e6, 2};
  EXPECT_EQ(rig::engine::bottleneck_of(compute), "compute");
  StepCosts network{1.0, 0.05, 0.6, 0.7, 4e6, 2};
  EXPECT_EQ(rig::engine::bottleneck_of(network), "network");
  StepCosts data{1.0, 0.5, 0.1, 0.3, 4e6, 2};
  EXPECT_EQ(rig::engine::bottleneck_of(data), "data");
  // One process waits for no network, whatever the number says.
  StepCosts single{1.0, 0.05, 0.6, 0.0, 0.0, 1};
  EXPECT_EQ(rig::engine::bottleneck_of(single), "compute");
  // busbw = bytes / busy x 2(n-1)/n; hidden = (busy - waited) / busy.
  EXPECT_DOUBLE_EQ(rig::engine::bus_bandwidth(network), 4e6 / 0.7);
  EXPECT_NEAR(rig::engine::hidden_fraction(network), 0.1 / 0.7, 1e-12);
  const std::string text = rig::engine::describe_bottleneck(network);
  EXPECT_NE(text.find("network-bound"), std::string::npos) << text;
  EXPECT_NE(text.find("5.7 MB/s"), std::string::npos) << text;
  EXPECT_NE(text.find("14% of it hidden"), std::string::npos) << text;
  EXPECT_EQ(text.find("latency"), std::string::npos) << text;
  // A tiny model waits on per-collective latency; the verdict says so.
  StepCosts tiny{0.005, 0.0, 0.0046, 0.0046, 1680, 2};
  const std::string tiny_text = rig::engine::describe_bottleneck(tiny);
  EXPECT_NE(tiny_text.find("1680 bytes per step"), std::string::npos) << tiny_text;
  EXPECT_NE(tiny_text.find("latency of each collective"), std::string::npos) << tiny_text;
}

}  // namespace
