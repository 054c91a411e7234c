// Whether a batch's copy to the GPU overlaps the kernels, measured (label gpu;
// skips without a GPU), through the CUDA back end the engine trains with: a
// 154 MB batch (ResNet-50's at 224 x 224, batch 256) copied inside
// begin_uploads / end_uploads (on the copy stream) while element-wise kernels
// run on the compute stream, against the same copy made on the compute stream
// (as before 2026-11-29). Prints one line
//   upload overlap (154 MB): staging H ms, copy D ms, kernels K ms; on the
//   compute stream S ms, on the copy stream O ms: P% of the copy hidden
// (medians of kRuns wall-clock runs, each ending in a synchronize). The
// staging (the memcpy into pinned memory, on the host) happens before the
// kernels are queued in both, so S - O is the copy's time that overlap hides.
// No speed makes the test fail; the copied bytes and the kernels' results are
// checked, so that a copy or a kernel that did nothing cannot look fast.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <vector>

#include "backend/backend.hpp"
#include "gpu_test.hpp"

namespace {

constexpr int kWarmup = 2;
constexpr int kRuns = 7;
constexpr std::size_t kBatchFloats = std::size_t{256} * 3 * 224 * 224;
constexpr std::int64_t kWorkFloats = std::int64_t{32} << 20;

// Device memory of the back end, given back at the end.
class DeviceBuffer {
 public:
  DeviceBuffer(rig::backend::Backend& be, std::size_t bytes)
      : be_(be), block_(be.memory(rig::Device::cuda(rig_gpu_test::kDevice)).allocate(bytes)) {}
  ~DeviceBuffer() { be_.memory(rig::Device::cuda(rig_gpu_test::kDevice)).deallocate(block_); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  float* get() const { return reinterpret_cast<float*>(block_.data); }

 private:
  rig::backend::Backend& be_;
  rig::backend::Block block_;
};

// Median wall-clock milliseconds of step() over kRuns, after kWarmup.
template <class Step>
double median_ms(Step&& step) {
  for (int i = 0; i < kWarmup; ++i) step();
  std::vector<double> times;
  for (int i = 0; i < kRuns; ++i) {
    const auto start = std::chrono::steady_clock::now();
    step();
    times.push_back(
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
            .count());
  }
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];
}

class UploadOverlap : public rig_gpu_test::GpuTest {};

}  // namespace

TEST_F(UploadOverlap, CopyStreamAgainstComputeStream) {
  rig::backend::Backend& be = rig::backend::cuda_backend(rig_gpu_test::kDevice);
  std::vector<float> batch(kBatchFloats);
  for (std::size_t i = 0; i < batch.size(); ++i) batch[i] = static_cast<float>(i % 1000);
  const std::size_t bytes = batch.size() * sizeof(float);
  const DeviceBuffer dst(be, bytes), work(be, kWorkFloats * sizeof(float));
  be.zero_bytes(work.get(), kWorkFloats * static_cast<std::int64_t>(sizeof(float)));
  be.synchronize();
  int launched = 0;
  const auto kernels = [&](int count) {
    for (int i = 0; i < count; ++i) {
      be.unary(rig::backend::Unary::add_scalar, work.get(), work.get(), kWorkFloats, 1.0F);
      ++launched;
    }
  };
  const double staging = median_ms([&] { be.from_host(dst.get(), batch.data(), bytes); });
  be.synchronize();
  const double copy = median_ms([&] {
    be.from_host(dst.get(), batch.data(), bytes);
    be.synchronize();
  });
  // Enough kernels to take about twice the copy's device time.
  const double one = median_ms([&] {
    kernels(1);
    be.synchronize();
  });
  const double copy_device = std::max(copy - staging, 0.01);
  const int count = std::clamp(static_cast<int>(2.0 * copy_device / std::max(one, 1e-3)), 1, 5000);
  const double alone = median_ms([&] {
    kernels(count);
    be.synchronize();
  });
  const double serial = median_ms([&] {
    be.from_host(dst.get(), batch.data(), bytes);
    kernels(count);
    be.synchronize();
  });
  const double overlapped = median_ms([&] {
    be.begin_uploads();
    be.from_host(dst.get(), batch.data(), bytes);
    const std::uint64_t ticket = be.end_uploads();
    kernels(count);
    be.use_uploads(ticket);
    be.synchronize();
  });
  std::printf(
      "upload overlap (%.0f MB): staging %.2f ms, copy %.2f ms, kernels %.2f ms (%d launches); on "
      "the compute stream %.2f ms, on the copy stream %.2f ms: %.0f%% of the copy hidden\n",
      static_cast<double>(bytes) / 1e6, staging, copy_device, alone, count, serial, overlapped,
      100.0 * (serial - overlapped) / std::min(copy_device, alone));

  std::vector<float> back(batch.size());
  be.to_host(back.data(), dst.get(), bytes);
  EXPECT_EQ(back, batch) << "the uploaded batch";
  std::vector<float> sums(16);
  be.to_host(sums.data(), work.get(), sums.size() * sizeof(float));
  EXPECT_EQ(sums, std::vector<float>(sums.size(), static_cast<float>(launched)))
      << "every kernel added its 1";
}
