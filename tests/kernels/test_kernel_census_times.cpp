// The kernel census's times (core/cuda/backend/kernel_census.hpp): on a
// device with marks (a GPU's timing events), each census line adds up the
// device time of its launches, read once the host has waited for them. A
// device whose clock is the known cost of each piece of work stands in for
// the GPU; the GPU's own marks are checked by the gpu tests.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "census_file.hpp"
#include "cuda/backend/kernel_census.hpp"
#include "cuda/backend/kernel_device.hpp"

namespace rig {
namespace {

// The census's lines as what -> "launches elements bytes flops ms".
std::map<std::string, std::string> read_census(const std::filesystem::path& file) {
  std::map<std::string, std::string> lines;
  for (const auto& [what, fields] : rig_test::read_census_file(file)) {
    lines[what] = fields.counts() + " " + fields.ms;
  }
  return lines;
}

// A device whose clock moves by each piece of work's cost (a kernel 2 ms, a
// product 5 ms, a device copy 1 ms; the host's copies and waits nothing),
// and whose marks read it, as a GPU's events read its timeline.
class ClockDevice final : public cuda::KernelDevice {
 public:
  class Mark final : public cuda::QueueMark {
   public:
    explicit Mark(double at) : at_(at) {}
    double milliseconds_since(const cuda::QueueMark& start) const override {
      return at_ - dynamic_cast<const Mark&>(start).at_;
    }

   private:
    double at_;
  };

  backend::MemoryPool& memory() override { throw std::logic_error("ClockDevice has no memory"); }
  const simt::DeviceProperties& properties() const override { return properties_; }
  std::unique_ptr<cuda::QueueMark> mark() override { return std::make_unique<Mark>(clock_); }

#define RIG_CLOCK_RUN(K)                 \
  void run(const kernels::K&) override { \
    clock_ += 2.0;                       \
  }
  RIG_CUDA_KERNELS(RIG_CLOCK_RUN)
#undef RIG_CLOCK_RUN
  void gemm(const cuda::LtPlan&, const void*, const void*, const void*, void*, void*,
            void*) override {
    clock_ += 5.0;
  }
  void conv2d_forward(const backend::Conv2dShape&, const float*, const float*, float*) override {
    clock_ += 7.0;
  }
  void conv2d_backward_data(const backend::Conv2dShape&, const float*, const float*,
                            float*) override {
    clock_ += 7.0;
  }
  void conv2d_backward_filter(const backend::Conv2dShape&, const float*, const float*,
                              float*) override {
    clock_ += 7.0;
  }
  void to_host(void*, const void*, std::size_t) override {}
  void from_host(void*, const void*, std::size_t) override {}
  void copy(void*, const void*, std::size_t) override {
    clock_ += 1.0;
  }
  void zero(void*, std::size_t) override {
    clock_ += 1.0;
  }
  void synchronize() override {}

 private:
  simt::DeviceProperties properties_ = simt::DeviceProperties::h100_sxm();
  double clock_ = 0.0;
};

// Where the device has marks (a GPU's events), each line adds up the device
// time of its launches, read when the host has waited for them; the host's
// copies are not timed.
TEST(KernelCensusTimes, EachLineAddsItsLaunchesDeviceTime) {
  const std::filesystem::path file = std::filesystem::temp_directory_path() /
                                     ("rig-census-times-" + std::to_string(getpid()) + ".tsv");
  const std::unique_ptr<cuda::KernelDevice> device =
      cuda::with_census(std::make_unique<ClockDevice>(), file.string());
  kernels::UnaryForward relu{kernels::UnaryOp::relu, nullptr, nullptr, 1000};
  cuda::LtPlan product;
  product.m = product.n = product.k = 4;
  device->run(relu);
  device->run(relu);
  device->gemm(product, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr);
  device->copy(nullptr, nullptr, 64);
  device->from_host(nullptr, nullptr, 64);
  EXPECT_FALSE(std::filesystem::exists(file)) << "nothing has waited for the device yet";
  device->synchronize();
  std::map<std::string, std::string> lines = read_census(file);
  EXPECT_EQ(lines["UnaryForward f32"], "2 2000 16000 0 4.0000");
  EXPECT_EQ(lines["cuBLASLt matmul f32 x f32 -> f32"], "1 0 0 128 5.0000");
  EXPECT_EQ(lines["copy on the device"], "1 0 128 0 1.0000");
  EXPECT_EQ(lines["copy from host"], "1 0 64 0 -");
  // A later wait (a read) adds the launches queued since; those read before are not counted twice.
  device->run(relu);
  std::vector<float> host(1);
  device->to_host(host.data(), nullptr, sizeof(float));
  lines = read_census(file);
  EXPECT_EQ(lines["UnaryForward f32"], "3 3000 24000 0 6.0000");
  EXPECT_EQ(lines["cuBLASLt matmul f32 x f32 -> f32"], "1 0 0 128 5.0000");
  EXPECT_EQ(lines["copy to host"], "1 0 4 0 -");
  std::filesystem::remove(file);
}

}  // namespace
}  // namespace rig
