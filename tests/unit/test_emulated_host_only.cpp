// The emulated CUDA device's host-only mode (cuda::EmulatedWork::host_only,
// RIG_CUDA_EMULATOR_HOST_ONLY=1): every call is queued, planned and counted
// as on the computing device, nothing runs, reads give zeros, and the reads
// that decide whether training goes on (index checks, gradient statistics)
// report nothing wrong, so a step costs only what the host spends on it.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <string>
#include <vector>

#include "backend/backend.hpp"
#include "cuda/emulated/emulated_device.hpp"
#include "rig/device.hpp"

namespace rig {
namespace {

using cuda::EmulatedAttention;
using cuda::EmulatedConvolutions;
using cuda::EmulatedWork;

std::unique_ptr<backend::Backend> emulated(EmulatedWork work) {
  return cuda::make_emulated_backend(0, EmulatedConvolutions::with_16bit,
                                     EmulatedAttention::composed, work);
}

// The same calls on a device: a cast, an index check of a bad index, the
// gradient statistics of a non-finite gradient, read at once and queued.
// What comes back to the host.
struct Outcome {
  std::vector<float> widened;  // the bf16 values cast back to f32
  std::int64_t first_bad = 0;
  GradientStats stats;
  GradientStats queued;  // gradient_stats_to, then read_gradient_stats
};

Outcome run_on(backend::Backend& b) {
  backend::MemoryPool& pool = b.memory(Device::cuda(0));
  const backend::Block x = pool.allocate(8 * sizeof(float));
  const backend::Block y = pool.allocate(8 * sizeof(std::uint16_t));
  const backend::Block ids = pool.allocate(4 * sizeof(std::int64_t));
  const backend::Block record = pool.allocate(sizeof(GradientStats));
  const std::vector<float> host = {1.5F, -2.0F, 3.25F, INFINITY, 0.5F, 1.0F, 2.0F, 4.0F};
  const std::vector<std::int64_t> host_ids = {0, 3, 99, 1};
  b.from_host(x.data, host.data(), host.size() * sizeof(float));
  b.from_host(ids.data, host_ids.data(), host_ids.size() * sizeof(std::int64_t));
  b.copy_strided({8}, y.data, {1}, DType::bf16, x.data, {1}, DType::f32);
  b.copy_strided({8}, x.data, {1}, DType::f32, y.data, {1}, DType::bf16);
  Outcome out;
  out.widened.assign(8, -7.0F);
  b.to_host(out.widened.data(), x.data, 8 * sizeof(float));
  out.first_bad = b.first_out_of_range(ids.data, DType::i64, 4, 10);
  out.stats = b.gradient_stats(reinterpret_cast<const float*>(x.data), 8, nullptr);
  auto* on_device = reinterpret_cast<GradientStats*>(record.data);
  b.gradient_stats_to(reinterpret_cast<const float*>(x.data), 8, nullptr, on_device);
  b.read_gradient_stats(on_device, 1, &out.queued);
  for (const backend::Block& block : {x, y, ids, record}) pool.deallocate(block);
  return out;
}

TEST(EmulatedHostOnly, TheComputingDeviceComputes) {
  const auto b = emulated(EmulatedWork::computed);
  const Outcome out = run_on(*b);
  EXPECT_EQ(out.widened[0], 1.5F);
  EXPECT_TRUE(std::isinf(out.widened[3]));
  EXPECT_EQ(out.first_bad, 2);
  EXPECT_TRUE(std::isinf(out.stats.amax));
  EXPECT_TRUE(std::isinf(out.queued.amax));
}

TEST(EmulatedHostOnly, RunsNothingReadsZerosAndReportsNothingWrong) {
  const auto b = emulated(EmulatedWork::host_only);
  const Outcome out = run_on(*b);
  EXPECT_EQ(out.widened, std::vector<float>(8, 0.0F));
  EXPECT_EQ(out.first_bad, -1) << "the index check reports nothing";
  EXPECT_EQ(out.stats.norm, 0.0);
  EXPECT_EQ(out.stats.amax, 0.0);
  EXPECT_TRUE(out.stats.loss_finite);
  EXPECT_EQ(out.queued.norm, 0.0) << "queued statistics read as those of finite gradients";
  EXPECT_TRUE(out.queued.loss_finite);
}

// With a census, host-only mode queues and counts what the computing device does.
TEST(EmulatedHostOnly, QueuesTheSameCensus) {
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / ("rig-host-only-" + std::to_string(getpid()));
  std::filesystem::create_directories(dir);
  std::vector<std::string> census;
  for (const EmulatedWork work : {EmulatedWork::computed, EmulatedWork::host_only}) {
    const std::filesystem::path file =
        dir / (work == EmulatedWork::computed ? "computed.tsv" : "host_only.tsv");
    setenv("RIG_CUDA_CENSUS", file.c_str(), 1);
    {
      const auto b = emulated(work);
      unsetenv("RIG_CUDA_CENSUS");
      run_on(*b);
      b->synchronize();
    }
    std::ifstream in(file);
    census.emplace_back(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }
  std::filesystem::remove_all(dir);
  EXPECT_NE(census[0].find("CopyStrided f32 -> bf16"), std::string::npos) << census[0];
  EXPECT_EQ(census[0], census[1]);
}

TEST(EmulatedHostOnly, TheVariableSaysWhatItExpects) {
  unsetenv("RIG_CUDA_EMULATOR_HOST_ONLY");
  EXPECT_FALSE(cuda_emulator_host_only_requested());
  setenv("RIG_CUDA_EMULATOR_HOST_ONLY", "0", 1);
  EXPECT_FALSE(cuda_emulator_host_only_requested());
  setenv("RIG_CUDA_EMULATOR_HOST_ONLY", "1", 1);
  EXPECT_TRUE(cuda_emulator_host_only_requested());
  setenv("RIG_CUDA_EMULATOR_HOST_ONLY", "yes", 1);
  try {
    cuda_emulator_host_only_requested();
    ADD_FAILURE() << "RIG_CUDA_EMULATOR_HOST_ONLY=yes was accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("RIG_CUDA_EMULATOR_HOST_ONLY=yes: expected 1"),
              std::string::npos)
        << e.what();
  }
  unsetenv("RIG_CUDA_EMULATOR_HOST_ONLY");
}

}  // namespace
}  // namespace rig
