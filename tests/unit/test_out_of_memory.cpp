// Running out of memory, explained: what the host can still give (meminfo and
// cgroup limits), the tensor layer's facts, the engine's activity and advice.
#include <gtest/gtest.h>

#include <stdexcept>
#include <string>
#include <vector>

#include "backend/host_capacity.hpp"
#include "engine/activity.hpp"
#include "engine/out_of_memory_advice.hpp"
#include "rig/environment_switch.hpp"
#include "rig/error.hpp"
#include "rig/tensor.hpp"
#include "tensor/out_of_memory.hpp"

namespace {

using rig::backend::CgroupMemory;
using rig::backend::DeviceCapacity;
using rig::backend::host_capacity_from;

constexpr std::size_t kKiB = 1024;
constexpr std::size_t kMiB = kKiB * kKiB;
constexpr std::size_t kGiB = kKiB * kMiB;

constexpr const char* kMeminfo =
    "MemTotal:       24683652 kB\n"
    "MemFree:        20000000 kB\n"
    "MemAvailable:   23636440 kB\n"
    "Buffers:          123456 kB\n"
    "SwapTotal:       2097148 kB\n"
    "SwapFree:        1048576 kB\n";

TEST(HostCapacity, MeminfoGivesTotalAndAvailablePlusFreeSwap) {
  const auto c = host_capacity_from(kMeminfo, {});
  ASSERT_TRUE(c.has_value());
  EXPECT_EQ(c->total, std::size_t{24683652} * kKiB);
  EXPECT_EQ(c->available, (std::size_t{23636440} + 1048576) * kKiB);
}

TEST(HostCapacity, OldKernelsWithoutMemAvailableUseMemFree) {
  const auto c = host_capacity_from("MemTotal: 1000 kB\nMemFree: 600 kB\n", {});
  ASSERT_TRUE(c.has_value());
  EXPECT_EQ(c->available, 600 * kKiB);
}

TEST(HostCapacity, WithoutMemTotalItIsUnknown) {
  EXPECT_FALSE(host_capacity_from("", {}).has_value());
  EXPECT_FALSE(host_capacity_from("MemFree: 600 kB\n", {}).has_value());
}

TEST(HostCapacity, TheTightestCgroupBoundsBoth) {
  // A container of 8 GiB using 6 GiB, 1 GiB of it page cache; its parent
  // allows 16 GiB and has 15 GiB used.
  const std::vector<CgroupMemory> cgroups{{8 * kGiB, 6 * kGiB, 1 * kGiB},
                                          {16 * kGiB, 15 * kGiB, 0}};
  const auto c = host_capacity_from(kMeminfo, cgroups);
  ASSERT_TRUE(c.has_value());
  EXPECT_EQ(c->total, 8 * kGiB);
  EXPECT_EQ(c->available, 1 * kGiB);  // the parent's room, less than the container's 3 GiB
}

TEST(HostCapacity, ACgroupOverItsLimitHasNothingAvailable) {
  const std::vector<CgroupMemory> cgroups{{1 * kGiB, 2 * kGiB, 0}};
  const auto c = host_capacity_from(kMeminfo, cgroups);
  ASSERT_TRUE(c.has_value());
  EXPECT_EQ(c->available, 0U);
}

TEST(HostCapacity, ThisMachineReportsSome) {
  const auto c = rig::backend::host_capacity();
  ASSERT_TRUE(c.has_value()) << "no MemTotal in /proc/meminfo";
  EXPECT_GT(c->total, 0U);
  EXPECT_GT(c->available, 0U);
}

TEST(OutOfMemory, ATensorLargerThanTheHostFailsWithTheFacts) {
  if (!rig::host_memory_check_enabled()) GTEST_SKIP() << "RIG_HOST_MEMORY_CHECK=0";
  const auto host = rig::backend::host_capacity();
  ASSERT_TRUE(host.has_value());
  // A little more than the host can give: within what Linux's overcommit
  // would hand out (and its OOM killer end once written), refused by rig
  // first. Never written, so a failure of the check fails only this test.
  const std::int64_t floats = static_cast<std::int64_t>((host->available + 64 * kMiB) / 4);
  try {
    (void)rig::Tensor::empty({floats});
    FAIL() << "a tensor larger than the host was allocated";
  } catch (const rig::OutOfMemoryError& e) {
    const std::string text = e.what();
    EXPECT_EQ(text.rfind("out of memory on cpu: a tensor of ", 0), 0U) << text;
    EXPECT_NE(text.find(" did not fit. The host has "), std::string::npos) << text;
    EXPECT_NE(text.find(" is free."), std::string::npos) << text;
    EXPECT_EQ(e.device(), "cpu");
  }
  // And the next allocation is served as ever.
  EXPECT_EQ(rig::Tensor::zeros({4}).numel(), 4);
}

TEST(OutOfMemory, TheFactsNameEveryPartOfTheDevicesMemory) {
  rig::AllocatorStats held;
  held.current_bytes = 7 * kGiB;
  held.cached_bytes = 12 * kMiB + 512 * kKiB;
  const DeviceCapacity device{8 * kGiB, 256 * kMiB};
  const rig::OutOfMemoryError e = rig::out_of_memory(rig::Device::cuda(0), 98 * kMiB, held, device);
  EXPECT_EQ(std::string(e.what()),
            "out of memory on cuda:0: a tensor of 98.0 MiB did not fit. cuda:0 has 8.00 GiB: "
            "rig's tensors hold 7.00 GiB, its allocator caches 12.5 MiB more, 755.5 MiB is used "
            "outside rig's allocator (the CUDA context, libraries, other processes), 256.0 MiB "
            "is free.");
  // Where the device's size is unknown: what rig holds.
  EXPECT_EQ(std::string(rig::out_of_memory(rig::Device::sim(), 2 * kMiB, held, {}).what()),
            "out of memory on sim: a tensor of 2.0 MiB did not fit. rig's tensors hold 7.00 GiB, "
            "its allocator caches 12.5 MiB more.");
}

TEST(OutOfMemoryError, IsAUserErrorAndGainsWhereOnceAndAdviceEachTime) {
  const rig::OutOfMemoryError first("cuda:0", "a tensor of 1 B did not fit.");
  const rig::OutOfMemoryError inner = first.within("the backward pass of step 3", "Lower it.");
  const rig::OutOfMemoryError outer = inner.within("evaluation", "Or that.");
  EXPECT_EQ(std::string(outer.what()),
            "out of memory on cuda:0 in the backward pass of step 3: a tensor of 1 B did not "
            "fit. Lower it. Or that.");
  EXPECT_EQ(outer.where(), "the backward pass of step 3");
  EXPECT_THROW(throw outer, rig::UserError);
}

TEST(ActivityScope, AnExceptionLeavesTheInnermostScopeForItsHandler) {
  using rig::engine::activity_that_failed;
  using rig::engine::ActivityScope;
  using rig::engine::current_activity;
  EXPECT_EQ(current_activity(), "");
  try {
    const ActivityScope outer("evaluation");
    EXPECT_EQ(current_activity(), "evaluation");
    {
      const ActivityScope inner("the forward pass", 12);
      EXPECT_EQ(current_activity(), "the forward pass of step 12");
    }
    EXPECT_EQ(current_activity(), "evaluation");
    const ActivityScope inner("the backward pass", 12);
    throw std::runtime_error("out of memory");
  } catch (const std::runtime_error&) {
    EXPECT_EQ(current_activity(), "");
    EXPECT_EQ(activity_that_failed(), "the backward pass of step 12");
    EXPECT_EQ(activity_that_failed(), "") << "read once";
  }
  // A scope that ends normally leaves nothing behind; a new scope forgets an
  // old failure that was handled.
  try {
    const ActivityScope failing("inference");
    throw std::runtime_error("handled below");
  } catch (const std::runtime_error&) {
  }
  { const ActivityScope next("evaluation"); }
  EXPECT_EQ(activity_that_failed(), "");
}

TEST(OutOfMemoryAdvice, NamesTheKeysOfWhatFailed) {
  using rig::engine::out_of_memory_advice;
  rig::engine::EngineSettings s;
  s.batch_size_per_gpu = 256;
  s.iter_size = 2;
  s.device = rig::Device::cuda(0);
  EXPECT_EQ(out_of_memory_advice("train", "the forward pass of step 0", s, std::nullopt),
            "To fit, lower batch_size_per_gpu (now 256) and raise iter_size (now 2) to keep the "
            "global batch: batch_size_per_gpu 128 with iter_size 4 accumulates 512 samples per "
            "process and update; or train in mixed precision (dtype: mixed, mixed_dtype: "
            "bfloat16), which halves the activations.");
  s.compute_dtype = rig::DType::bf16;
  EXPECT_EQ(out_of_memory_advice("train", "the forward pass of step 0", s, std::nullopt, true),
            "To fit, lower batch_size_per_gpu (now 256) and raise iter_size (now 2) to keep the "
            "global batch: batch_size_per_gpu 128 with iter_size 4 accumulates 512 samples per "
            "process and update; or keep fewer activations (model_params: recompute_activations: "
            "true, about a third more compute a step).");
  s.batch_size_per_gpu = 1;
  EXPECT_EQ(out_of_memory_advice("train", "the backward pass of step 4", s, std::nullopt),
            "batch_size_per_gpu is 1 already: the model and its optimizer state do not fit "
            "cuda:0.");
  EXPECT_EQ(out_of_memory_advice("train_eval", "evaluation", s, 64),
            "To fit, lower batch_size_per_gpu in eval_params (now 64).");
  s.batch_size_per_gpu = 8;
  EXPECT_EQ(out_of_memory_advice("eval", "evaluation", s, std::nullopt),
            "To fit, lower batch_size_per_gpu in eval_params (now 8).");
  EXPECT_EQ(out_of_memory_advice("infer", "inference", s, std::nullopt),
            "To fit, lower batch_size_per_gpu in infer_params (now 8).");
  EXPECT_EQ(out_of_memory_advice("train", "the model's parameters", s, std::nullopt),
            "The model's parameters alone do not fit cuda:0: choose a smaller model.");
  EXPECT_EQ(out_of_memory_advice("train", "the optimizer's state", s, std::nullopt),
            "The model's parameters and its optimizer's state do not fit cuda:0: choose a smaller "
            "model or an optimizer that keeps less state (sgd with momentum keeps one buffer the "
            "size of the parameters, adam two).");
}

}  // namespace
