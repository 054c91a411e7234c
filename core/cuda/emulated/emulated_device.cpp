#include "cuda/emulated/emulated_device.hpp"

#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <new>
#include <optional>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "backend/caching_allocator.hpp"
#include "cuda/allocator/allocator_pool.hpp"
#include "cuda/backend/kernel_backend.hpp"
#include "cuda/emulated/emulated_attention.hpp"
#include "cuda/gemm/lt_interpreter.hpp"
#include "rig/device.hpp"
#include "simt/emulator.hpp"

namespace rig::cuda {

namespace {

// The device's convolutions take no bias (KernelBackend adds it).
backend::Conv2dShape without_bias(backend::Conv2dShape s) {
  s.bias = false;
  return s;
}

// n elements of `from` at src converted to `to` at dst by the CPU back end
// (widening is exact; narrowing rounds to nearest even, as the GPU stores).
void converted(std::int64_t n, void* dst, DType to, const void* src, DType from) {
  backend::cpu_backend().copy_strided({n}, dst, {1}, to, src, {1}, from);
}

// n elements of a 16-bit `type` at src as f32 values.
std::vector<float> widened(DType type, const void* src, std::int64_t n) {
  std::vector<float> out(static_cast<std::size_t>(n));
  converted(n, out.data(), DType::f32, src, type);
  return out;
}

// Host memory as the emulated device's, for the GPU's caching allocator, of
// at most `total` bytes (RIG_CUDA_EMULATOR_MEMORY_MB): beyond it allocations
// fail as cudaMalloc's do, so the allocator's retry and the out-of-memory
// message run as on a GPU. One stream, whose work is done when queued: every
// marker has completed.
class HostAsDeviceMemory final : public DeviceMemorySource {
 public:
  explicit HostAsDeviceMemory(std::size_t total) : total_(total) {}

  std::byte* allocate(std::size_t bytes) override {
    {
      const std::lock_guard lock(mutex_);
      if (bytes > total_ - used_) throw std::bad_alloc();
      used_ += bytes;
    }
    try {
      std::byte* data = backend::host_memory().allocate(bytes);
      const std::lock_guard lock(mutex_);
      sizes_.emplace(data, bytes);
      return data;
    } catch (...) {
      const std::lock_guard lock(mutex_);
      used_ -= bytes;
      throw;
    }
  }
  void release(std::byte* data) noexcept override {
    {
      const std::lock_guard lock(mutex_);
      const auto found = sizes_.find(data);
      if (found != sizes_.end()) {
        used_ -= found->second;
        sizes_.erase(found);
      }
    }
    backend::host_memory().release(data);
  }
  std::optional<backend::DeviceCapacity> capacity() const override {
    const std::lock_guard lock(mutex_);
    return backend::DeviceCapacity{total_, total_ - used_};
  }
  Marker record(StreamId /*stream*/) override { return 0; }
  bool completed(Marker /*marker*/) override { return true; }
  void wait(Marker /*marker*/) override {}
  void release_marker(Marker /*marker*/) noexcept override {}

 private:
  const std::size_t total_;
  mutable std::mutex mutex_;
  std::size_t used_ = 0;
  std::unordered_map<const std::byte*, std::size_t> sizes_;  // the source's blocks
};

class EmulatedDevice final : public KernelDevice {
 public:
  EmulatedDevice(EmulatedConvolutions convolutions, EmulatedAttention attention,
                 EmulatedEpilogues epilogues)
      : properties_(simt::DeviceProperties::h100_sxm()),
        host_as_device_(cuda_emulator_memory_bytes()),
        allocator_(host_as_device_, backend::caching_enabled()),
        pool_(allocator_, 0),
        convolutions_(convolutions),
        attention_(attention),
        epilogues_(epilogues) {}

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
    if (epilogues_ == EmulatedEpilogues::without_masks_and_bias_gradients &&
        (plan.bias_role == BiasRole::bias_grad || plan.aux_role == AuxRole::read_relu_mask ||
         plan.aux_role == AuxRole::write_relu_mask)) {
      throw std::runtime_error(std::string("the emulated cuBLASLt found no algorithm for ") +
                               name_of(plan.epilogue));
    }
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

  // As cuDNN's 16-bit graphs: f32 accumulation, the result rounded once. The
  // widening and rounding happen inside the device, not as kernels, so the
  // back end queues the GPU's kernel sequence around them.
  bool conv2d_16(const backend::Conv2dShape&, DType) override {
    return convolutions_ == EmulatedConvolutions::with_16bit;
  }
  void conv2d_forward_16(const backend::Conv2dShape& s, DType type, const void* x, const void* w,
                         void* y) override {
    const std::vector<float> xf = widened(type, x, s.x_elements());
    const std::vector<float> wf = widened(type, w, s.w_elements());
    std::vector<float> yf(static_cast<std::size_t>(s.y_elements()));
    conv2d_forward(s, xf.data(), wf.data(), yf.data());
    converted(s.y_elements(), y, type, yf.data(), DType::f32);
  }
  void conv2d_backward_data_16(const backend::Conv2dShape& s, DType type, const void* w,
                               const void* dy, void* dx, bool accumulate) override {
    const std::vector<float> wf = widened(type, w, s.w_elements());
    const std::vector<float> dyf = widened(type, dy, s.y_elements());
    std::vector<float> dxf(static_cast<std::size_t>(s.x_elements()));
    conv2d_backward_data(s, wf.data(), dyf.data(), dxf.data());
    if (accumulate) {  // beta 1: the sum in f32, rounded once
      const std::vector<float> before = widened(type, dx, s.x_elements());
      for (std::size_t i = 0; i < dxf.size(); ++i) dxf[i] += before[i];
    }
    converted(s.x_elements(), dx, type, dxf.data(), DType::f32);
  }
  bool conv2d_16_adds_dx(const backend::Conv2dShape& s, DType type) override {
    return conv2d_16(s, type);
  }
  void conv2d_backward_filter_16(const backend::Conv2dShape& s, DType type, const void* x,
                                 const void* dy, void* dw, bool accumulate) override {
    const std::vector<float> xf = widened(type, x, s.x_elements());
    const std::vector<float> dyf = widened(type, dy, s.y_elements());
    std::vector<float> dwf(static_cast<std::size_t>(s.w_elements()));
    conv2d_backward_filter(s, xf.data(), dyf.data(), dwf.data());
    if (accumulate) {  // beta 1: the sum in f32, rounded once
      const std::vector<float> before = widened(type, dw, s.w_elements());
      for (std::size_t i = 0; i < dwf.size(); ++i) dwf[i] += before[i];
    }
    converted(s.w_elements(), dw, type, dwf.data(), DType::f32);
  }
  bool conv2d_16_adds_dw(const backend::Conv2dShape& s, DType type) override {
    return conv2d_16(s, type);
  }

  bool fused_attention_supported(const backend::FusedAttention& a) override {
    return attention_ == EmulatedAttention::fused && emulated_attention_supported(a);
  }
  void fused_attention_forward(const backend::FusedAttention& a) override {
    emulated_attention_forward(a);
  }
  void fused_attention_backward(const backend::FusedAttention& a) override {
    emulated_attention_backward(a);
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
  HostAsDeviceMemory host_as_device_;
  DeviceCachingAllocator allocator_;
  AllocatorPool pool_;
  EmulatedConvolutions convolutions_;
  EmulatedAttention attention_;
  EmulatedEpilogues epilogues_;
  std::uint64_t launches_ = 0;
};

// EmulatedWork::host_only: another device's decisions (memory, plans, which
// convolutions and attention it fuses) with none of its work. Kernels are
// planned, as launching them is; reads give zeros.
class HostOnlyDevice final : public KernelDevice {
 public:
  explicit HostOnlyDevice(std::unique_ptr<KernelDevice> device) : device_(std::move(device)) {}

  backend::MemoryPool& memory() override { return device_->memory(); }
  const simt::DeviceProperties& properties() const override { return device_->properties(); }
  bool computes() const override { return false; }

#define RIG_HOST_ONLY_RUN(K)                    \
  void run(const kernels::K& kernel) override { \
    (void)kernel.plan(device_->properties());   \
  }
  RIG_CUDA_KERNELS(RIG_HOST_ONLY_RUN)
#undef RIG_HOST_ONLY_RUN

  void gemm(const LtPlan&, const void*, const void*, const void*, void*, void*, void*) override {}
  void conv2d_forward(const backend::Conv2dShape&, const float*, const float*, float*) override {}
  void conv2d_backward_data(const backend::Conv2dShape&, const float*, const float*,
                            float*) override {}
  void conv2d_backward_filter(const backend::Conv2dShape&, const float*, const float*,
                              float*) override {}
  bool conv2d_16(const backend::Conv2dShape& s, DType type) override {
    return device_->conv2d_16(s, type);
  }
  void conv2d_forward_16(const backend::Conv2dShape&, DType, const void*, const void*,
                         void*) override {}
  void conv2d_backward_data_16(const backend::Conv2dShape&, DType, const void*, const void*, void*,
                               bool) override {}
  bool conv2d_16_adds_dx(const backend::Conv2dShape& s, DType type) override {
    return device_->conv2d_16_adds_dx(s, type);
  }
  void conv2d_backward_filter_16(const backend::Conv2dShape&, DType, const void*, const void*,
                                 void*, bool) override {}
  bool conv2d_16_adds_dw(const backend::Conv2dShape& s, DType type) override {
    return device_->conv2d_16_adds_dw(s, type);
  }
  bool fused_attention_supported(const backend::FusedAttention& a) override {
    return device_->fused_attention_supported(a);
  }
  void fused_attention_forward(const backend::FusedAttention&) override {}
  void fused_attention_backward(const backend::FusedAttention&) override {}
  void to_host(void* host, const void*, std::size_t bytes) override {
    std::memset(host, 0, bytes);
  }
  void from_host(void*, const void*, std::size_t) override {}
  void copy(void*, const void*, std::size_t) override {}
  void zero(void*, std::size_t) override {}
  void synchronize() override {}

 private:
  std::unique_ptr<KernelDevice> device_;
};

}  // namespace

EmulatedAttention emulated_attention_requested() {
  const char* value = std::getenv("RIG_CUDA_EMULATOR_FUSED_ATTENTION");
  const std::string text = value == nullptr ? "" : value;
  if (text.empty() || text == "0") return EmulatedAttention::composed;
  if (text == "1") return EmulatedAttention::fused;
  throw std::invalid_argument("RIG_CUDA_EMULATOR_FUSED_ATTENTION=" + text +
                              ": expected 1 (the emulator's attention fused, as cuDNN's on a GPU) "
                              "or 0");
}

std::unique_ptr<backend::Backend> make_emulated_backend(int index,
                                                        EmulatedConvolutions convolutions,
                                                        EmulatedAttention attention,
                                                        EmulatedWork work,
                                                        EmulatedEpilogues epilogues) {
  std::unique_ptr<KernelDevice> device =
      std::make_unique<EmulatedDevice>(convolutions, attention, epilogues);
  if (work == EmulatedWork::host_only) device = std::make_unique<HostOnlyDevice>(std::move(device));
  return std::make_unique<KernelBackend>(std::move(device), index);
}

}  // namespace rig::cuda
