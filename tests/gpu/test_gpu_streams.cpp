// Streams and events on a real device: an event orders work across two
// streams, event timing, stream ownership.
#include <gtest/gtest.h>

#include <utility>
#include <vector>

#include "cuda/runtime/copies.hpp"
#include "cuda/runtime/device_memory.hpp"
#include "cuda/runtime/event.hpp"
#include "cuda/runtime/pinned_buffer.hpp"
#include "cuda/runtime/stream.hpp"
#include "gpu_test.hpp"

namespace {

using rig::cuda::DeviceBuffer;
using rig::cuda::Event;
using rig::cuda::PinnedBuffer;
using rig::cuda::Stream;
using rig_gpu_test::kDevice;
using rig_gpu_test::kSlowCycles;

class GpuStreams : public rig_gpu_test::GpuTest {};

TEST_F(GpuStreams, AnEventOrdersWorkOnAnotherStream) {
  constexpr int n = 1 << 16;
  Stream producer(kDevice);
  Stream consumer(kDevice);
  DeviceBuffer data(n * sizeof(float), producer);
  ASSERT_EQ(cudaMemsetAsync(data.data(), 0, n * sizeof(float), producer.native()), cudaSuccess);
  rig_gpu_test::launch_slow_fill(reinterpret_cast<float*>(data.data()), n, 42.0F, kSlowCycles,
                                 producer.native());
  Event filled;
  filled.record(producer);
  consumer.wait(filled);
  data.record_use(consumer);
  PinnedBuffer out(n * sizeof(float));
  rig::cuda::copy_to_host_async(out, data.data(), n * sizeof(float), consumer);
  // The producer is still spinning: without the wait, the copy would read zeros.
  if (rig_gpu_test::launches_run_asynchronously()) {
    EXPECT_FALSE(producer.idle());
    EXPECT_FALSE(filled.completed());
  }
  consumer.synchronize();
  EXPECT_TRUE(filled.completed());
  const auto* values = reinterpret_cast<const float*>(out.data());
  int wrong = 0;
  for (int i = 0; i < n; ++i) wrong += values[i] != 42.0F;
  EXPECT_EQ(wrong, 0);
}

TEST_F(GpuStreams, EventTiming) {
  Stream stream(kDevice);
  DeviceBuffer data(sizeof(float), stream);
  Event start(Event::Timing::on);
  Event stop(Event::Timing::on);
  start.record(stream);
  rig_gpu_test::launch_slow_fill(reinterpret_cast<float*>(data.data()), 1, 1.0F, kSlowCycles,
                                 stream.native());
  stop.record(stream);
  stop.synchronize();
  const float ms = stop.milliseconds_since(start);
  EXPECT_GT(ms, 10.0F);  // 1.5e8 cycles take ~75 ms at 2 GHz
  EXPECT_LT(ms, 10000.0F);
  EXPECT_TRUE(stream.idle());
}

TEST_F(GpuStreams, StreamsAreOwnedAndMovable) {
  Stream a(kDevice);
  EXPECT_NE(a.native(), nullptr);
  EXPECT_EQ(a.device(), kDevice);
  const auto id = a.id();
  Stream b(std::move(a));
  EXPECT_EQ(b.id(), id);
  EXPECT_EQ(a.native(), nullptr);  // NOLINT(bugprone-use-after-move): moved-from is empty
  Stream c(kDevice);
  EXPECT_NE(c.id(), b.id());
  c = std::move(b);
  EXPECT_EQ(c.id(), id);
  c.synchronize();
  EXPECT_TRUE(c.idle());
  std::vector<Stream> many;
  for (int i = 0; i < 8; ++i) many.emplace_back(kDevice);
  for (auto& s : many) s.synchronize();
}

}  // namespace
