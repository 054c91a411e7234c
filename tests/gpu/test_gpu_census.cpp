// The kernel census's device times on a GPU (label gpu; skips without one):
// a back end made with RIG_CUDA_CENSUS times each launch between two CUDA
// events, so a line's time is positive, no more than the wall-clock time the
// host waited for the same work, and its bytes make a bandwidth a GPU can
// have. The census's bookkeeping is tested without a GPU
// (tests/kernels/test_kernel_census_times.cpp); this checks the GPU's marks.
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "backend/backend.hpp"
#include "census_file.hpp"
#include "cuda/backend_abi.hpp"
#include "gpu_test.hpp"

extern "C" int rig_cuda_make_backend(int factory_version, int device,
                                     std::unique_ptr<rig::backend::Backend>* out, char* error,
                                     std::size_t error_bytes);

namespace {

class GpuCensus : public rig_gpu_test::GpuTest {};

}  // namespace

TEST_F(GpuCensus, TimesEachLaunchOnTheDevice) {
  const std::filesystem::path file = std::filesystem::temp_directory_path() /
                                     ("rig-gpu-census-" + std::to_string(getpid()) + ".tsv");
  setenv("RIG_CUDA_CENSUS", file.c_str(), 1);
  std::unique_ptr<rig::backend::Backend> be;
  char error[512] = {};
  const int made = rig_cuda_make_backend(rig::cuda::kFactoryVersion, rig_gpu_test::kDevice, &be,
                                         error, sizeof error);
  unsetenv("RIG_CUDA_CENSUS");
  ASSERT_EQ(made, 0) << error;

  constexpr std::int64_t kFloats = std::int64_t{32} << 20;  // 128 MB
  constexpr int kLaunches = 10;
  rig::backend::MemoryPool& pool = be->memory(rig::Device::cuda(rig_gpu_test::kDevice));
  const rig::backend::Block x = pool.allocate(kFloats * sizeof(float));
  be->zero_bytes(x.data, kFloats * static_cast<std::int64_t>(sizeof(float)));
  be->synchronize();
  const auto start = std::chrono::steady_clock::now();
  float* values = reinterpret_cast<float*>(x.data);
  for (int i = 0; i < kLaunches; ++i) {
    be->unary(rig::backend::Unary::add_scalar, values, values, kFloats, 1.0F);
  }
  be->synchronize();
  const double wall_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  std::vector<float> first(4);
  be->to_host(first.data(), x.data, first.size() * sizeof(float));
  EXPECT_EQ(first, std::vector<float>(4, static_cast<float>(kLaunches)));

  const std::map<std::string, rig_test::CensusFields> lines = rig_test::read_census_file(file);
  const auto found = lines.find("UnaryForward f32");
  ASSERT_NE(found, lines.end()) << "no line of the 10 launches in " << file;
  const rig_test::CensusFields& add = found->second;
  EXPECT_EQ(add.launches, std::to_string(kLaunches));
  ASSERT_NE(add.ms, "-") << "the GPU's launches were not timed";
  const double ms = std::stod(add.ms);
  EXPECT_GT(ms, 0.0);
  EXPECT_LE(ms, wall_ms * 1.05 + 0.5) << "more device time than the host waited for";
  const double gb_per_s = std::stod(add.bytes) / ms / 1e6;
  std::printf(
      "census: 10 launches of a 128 MB add in %.3f ms of device time (%.3f ms wall): %.0f "
      "GB/s\n",
      ms, wall_ms, gb_per_s);
  EXPECT_LT(gb_per_s, 20000.0) << "faster than any GPU's memory: the times' unit is wrong";
  EXPECT_EQ(lines.at("copy to host").ms, "-") << "the host's copies are not timed";
  pool.deallocate(x);
  be.reset();
  std::filesystem::remove(file);
}
