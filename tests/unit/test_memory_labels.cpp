// rig/memory_labels.hpp: live storages counted by label, dtype and shape, the
// picture at the peak, and what an out-of-memory error says made them. Other
// tests of the same process may hold tensors: each test looks at its own labels.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <thread>
#include <vector>

#include "engine/activity.hpp"
#include "engine/memory_at_peak.hpp"
#include "rig/memory_labels.hpp"
#include "rig/tensor.hpp"
#include "tensor/out_of_memory.hpp"

namespace {

using rig::DType;
using rig::LiveStorages;
using rig::MemoryLabel;
using rig::MemoryPicture;
using rig::Tensor;

// The picture's storages of `label`, largest first.
std::vector<LiveStorages> of(const MemoryPicture& p, const std::string& label) {
  std::vector<LiveStorages> out;
  for (const LiveStorages& s : p.storages) {
    if (s.label == label) out.push_back(s);
  }
  return out;
}

TEST(MemoryLabels, CountsLiveStoragesByLabelDtypeAndShape) {
  std::vector<Tensor> kept;
  {
    const MemoryLabel a("labels test: a");
    kept.push_back(Tensor::empty({3, 5}, DType::f32));
    kept.push_back(Tensor::empty({3, 5}, DType::f32));
    {
      const MemoryLabel b("labels test: b");
      kept.push_back(Tensor::empty({1000}, DType::bf16));
    }
    kept.push_back(Tensor::empty({7}, DType::i64));  // a again once b ended
    kept.push_back(kept[0].reshape({15}));           // a view: no storage of its own
  }
  kept.push_back(Tensor::empty({2}, DType::f32));  // outside both
  const MemoryPicture now = rig::memory_now(rig::Device::cpu());
  const std::vector<LiveStorages> a = of(now, "labels test: a");
  ASSERT_EQ(a.size(), 2U);
  EXPECT_EQ(a[0].dtype, DType::f32);
  EXPECT_EQ(a[0].shape, (rig::Shape{3, 5}));
  EXPECT_EQ(a[0].count, 2);
  EXPECT_GE(a[0].bytes, 2 * 15 * sizeof(float));
  EXPECT_EQ(a[1].shape, (rig::Shape{7}));
  EXPECT_EQ(a[1].count, 1);
  const std::vector<LiveStorages> b = of(now, "labels test: b");
  ASSERT_EQ(b.size(), 1U);
  EXPECT_EQ(b[0].dtype, DType::bf16);
  EXPECT_GE(b[0].bytes, 2000U);
  EXPECT_TRUE(std::is_sorted(
      now.storages.begin(), now.storages.end(),
      [](const LiveStorages& x, const LiveStorages& y) { return x.bytes > y.bytes; }));
  kept.clear();
  EXPECT_TRUE(of(rig::memory_now(rig::Device::cpu()), "labels test: a").empty());
}

TEST(MemoryLabels, ThePeakPictureHoldsWhatWasLiveAtTheHighestTotal) {
  rig::reset_peak_bytes(rig::Device::cpu());
  {
    const MemoryLabel label("peak test: large");
    const Tensor large = Tensor::empty({1 << 20}, DType::f32);  // 4 MiB, freed at once
  }
  Tensor small;
  {
    const MemoryLabel label("peak test: small");
    small = Tensor::empty({16}, DType::f32);
  }
  const MemoryPicture peak = rig::memory_at_peak(rig::Device::cpu());
  const std::vector<LiveStorages> large = of(peak, "peak test: large");
  ASSERT_EQ(large.size(), 1U);
  EXPECT_EQ(large[0].shape, (rig::Shape{1 << 20}));
  EXPECT_TRUE(of(peak, "peak test: small").empty());  // made after the peak
  EXPECT_GE(peak.bytes, std::size_t{4} << 20);
  EXPECT_TRUE(of(rig::memory_now(rig::Device::cpu()), "peak test: large").empty());
  // A reset starts from what is live: the small tensor, not the large one.
  rig::reset_peak_bytes(rig::Device::cpu());
  const MemoryPicture after = rig::memory_at_peak(rig::Device::cpu());
  EXPECT_TRUE(of(after, "peak test: large").empty());
  EXPECT_EQ(of(after, "peak test: small").size(), 1U);
}

// Two literals of the same text (from two files, say) are one label.
TEST(MemoryLabels, LabelsOfTheSameTextAreOne) {
  static const char first[] = "same text test";
  static const char second[] = "same text test";
  ASSERT_NE(static_cast<const void*>(first), static_cast<const void*>(second));
  std::vector<Tensor> kept;
  {
    const MemoryLabel label(first);
    kept.push_back(Tensor::empty({4, 4}, DType::f32));
  }
  {
    const MemoryLabel label(second);
    kept.push_back(Tensor::empty({4, 4}, DType::f32));
  }
  const std::vector<LiveStorages> same = of(rig::memory_now(rig::Device::cpu()), first);
  ASSERT_EQ(same.size(), 1U);
  EXPECT_EQ(same[0].count, 2);
}

// Each thread has its own label; storages freed on another thread are counted out.
TEST(MemoryLabels, EachThreadItsOwnLabel) {
  Tensor made_there;
  const MemoryLabel here("thread test: here");
  std::thread([&] {
    const MemoryLabel there("thread test: there");
    made_there = Tensor::empty({8}, DType::f32);
  }).join();
  const Tensor made_here = Tensor::empty({8}, DType::f32);
  const MemoryPicture now = rig::memory_now(rig::Device::cpu());
  EXPECT_EQ(of(now, "thread test: there").size(), 1U);
  EXPECT_EQ(of(now, "thread test: here").size(), 1U);
  made_there = Tensor();
  EXPECT_TRUE(of(rig::memory_now(rig::Device::cpu()), "thread test: there").empty());
}

TEST(MemoryLabels, ByLabelTotalsLargestFirst) {
  MemoryPicture p;
  p.bytes = 700;
  p.storages = {{"x", DType::f32, {100}, 1, 400},
                {"y", DType::f32, {50}, 1, 200},
                {"y", DType::bf16, {50}, 2, 200},
                {"x", DType::i64, {2}, 1, 16}};
  const std::vector<rig::LabelledStorages> labels = rig::by_label(p);
  ASSERT_EQ(labels.size(), 2U);
  EXPECT_EQ(labels[0].label, "x");
  EXPECT_EQ(labels[0].bytes, 416U);
  EXPECT_EQ(labels[1].label, "y");
  EXPECT_EQ(labels[1].bytes, 400U);
  EXPECT_EQ(labels[1].storages.size(), 2U);
}

TEST(MemoryLabels, TheEngineLabelsItsPhases) {
  Tensor made;
  {
    const rig::engine::ActivityScope activity("the forward pass", 3);
    made = Tensor::empty({5}, DType::f32);
  }
  EXPECT_EQ(of(rig::memory_now(rig::Device::cpu()), "the forward pass").size(), 1U);
}

TEST(MemoryAtPeakLines, EachLabelWithItsLargestTensors) {
  MemoryPicture p;
  p.bytes = std::size_t{3} << 30;
  p.storages = {{"the forward pass", DType::bf16, {125, 64, 32768}, 1, 500u << 20},
                {"the forward pass", DType::bf16, {125, 64, 512}, 70, 547u << 20},
                {"the model's parameters", DType::f32, {60880896}, 2, 464u << 20},
                {"the forward pass", DType::f32, {8000}, 1, 32u << 10},
                {"the forward pass", DType::u8, {10}, 3, 1536},
                {"", DType::f32, {4}, 1, 512}};
  const std::vector<std::string> lines = rig::engine::memory_at_peak_lines(p, 2, 3);
  ASSERT_EQ(lines.size(), 4U);
  EXPECT_EQ(lines[0], "Tensors at the peak, 3.00 GiB, by what made them:");
  EXPECT_EQ(lines[1],
            "  the forward pass         1.02 GiB: bf16 [125,64,32768] 500.0 MiB, 70 x bf16 "
            "[125,64,512] 547.0 MiB, f32 [8000] 32.0 KiB and 1 more shapes");
  EXPECT_EQ(lines[2], "  the model's parameters  464.0 MiB: 2 x f32 [60880896] 464.0 MiB");
  EXPECT_EQ(lines[3], "  1 more: 512 B");
  EXPECT_TRUE(rig::engine::memory_at_peak_lines({}).empty());
}

TEST(MemoryLabels, AnOutOfMemoryErrorSaysWhatMadeTheLiveTensors) {
  rig::AllocatorStats held;
  held.current_bytes = std::size_t{7} << 30;
  const std::vector<rig::LabelledStorages> live = {{"the forward pass", std::size_t{5} << 30, {}},
                                                   {"the model's parameters", 1u << 30, {}},
                                                   {"", 512u << 20, {}},
                                                   {"evaluation", 1u << 20, {}}};
  EXPECT_EQ(std::string(rig::out_of_memory(rig::Device::sim(), 2u << 20, held, {}, live).what()),
            "out of memory on sim: a tensor of 2.0 MiB did not fit. rig's tensors hold 7.00 GiB "
            "(made by the forward pass 5.00 GiB, the model's parameters 1.00 GiB, code outside "
            "the engine's phases 512.0 MiB).");
}

}  // namespace
