#include "cuda/emulated/emulated_device.hpp"

#include <cstring>
#include <string>

#include "backend/caching_allocator.hpp"
#include "cuda/backend/kernel_backend.hpp"
#include "cuda/gemm/lt_interpreter.hpp"
#include "simt/emulator.hpp"

namespace rig::cuda {

namespace {

// The device's convolutions take no bias (KernelBackend adds it).
backend::Conv2dShape without_bias(backend::Conv2dShape s) {
  s.bias = false;
  return s;
}

class EmulatedDevice final : public KernelDevice {
 public:
  EmulatedDevice()
      : properties_(simt::DeviceProperties::h100_sxm()),
        pool_(backend::host_memory(), backend::caching_enabled(), backend::cache_limit()) {}

  backend::MemoryPool& memory() override { return pool_; }
  const simt::DeviceProperties& properties() const override { return properties_; }

#define RIG_EMULATED_RUN(K)                     \
  void run(const kernels::K& kernel) override { \
    emulate(kernel);                            \
  }
  RIG_CUDA_KERNELS(RIG_EMULATED_RUN)
#undef RIG_EMULATED_RUN

  void gemm(const LtPlan& plan, const void* a, const void* b, const void* c, void* d, void* bias,
            void* aux) override {
    interpret_lt_matmul(plan, a, b, c, d, bias, aux);
  }

  void conv2d_forward(const backend::Conv2dShape& s, const float* x, const float* w,
                      float* y) override {
    backend::cpu_backend().conv2d_forward(without_bias(s), x, w, nullptr, y);
  }
  void conv2d_backward_data(const backend::Conv2dShape& s, const float* w, const float* dy,
                            float* dx) override {
    backend::cpu_backend().conv2d_backward(without_bias(s), nullptr, w, dy, dx, nullptr, nullptr);
  }
  void conv2d_backward_filter(const backend::Conv2dShape& s, const float* x, const float* dy,
                              float* dw) override {
    backend::cpu_backend().conv2d_backward(without_bias(s), x, nullptr, dy, nullptr, dw, nullptr);
  }

  void to_host(void* host, const void* src, std::size_t bytes) override {
    std::memcpy(host, src, bytes);
  }
  void from_host(void* dst, const void* host, std::size_t bytes) override {
    std::memcpy(dst, host, bytes);
  }
  void copy(void* dst, const void* src, std::size_t bytes) override {
    std::memmove(dst, src, bytes);
  }
  void zero(void* dst, std::size_t bytes) override {
    std::memset(dst, 0, bytes);
  }
  void synchronize() override {}

 private:
  template <class Kernel>
  void emulate(const Kernel& kernel) {
    const simt::LaunchShape shape = kernel.plan(properties_);
    if (shape.grid.count() == 0) return;
    // Each launch interleaves its threads differently (a race shows up as
    // results that change between runs of a test).
    simt::emulate(shape, kernel, simt::EmulatorOptions{.seed = ++launches_});
  }

  simt::DeviceProperties properties_;
  backend::CachingAllocator pool_;
  std::uint64_t launches_ = 0;
};

}  // namespace

std::unique_ptr<backend::Backend> make_emulated_backend(int index) {
  return std::make_unique<KernelBackend>(std::make_unique<EmulatedDevice>(), index);
}

}  // namespace rig::cuda
