// What the CUDA back end's entry points (KernelBackend) need from a device:
// run a kernel of core/cuda/kernels, run a cuBLASLt plan, run a convolution,
// move bytes and hand out memory. Two implementations:
//   - the GPU (runtime/gpu_device.cpp, in librig_cuda): kernels launched on
//     the device's stream, cuBLASLt, cuDNN, cudaMalloc through the caching
//     allocator, pinned staging for host copies;
//   - the emulator (emulated/emulated_device.cpp, in librig): the same kernel
//     bodies in the SIMT emulator over host memory, cuBLASLt's semantics
//     interpreted on the CPU (gemm/lt_interpreter.hpp), convolutions by the
//     CPU back end. `RIG_CUDA_EMULATOR=1` makes `device: cuda` use it, so
//     every entry point's kernel sequence runs in tests without a GPU.
// Every call is queued in order on the device's one stream; only to_host,
// synchronize and the reads named so wait for it.
#pragma once

#include <cstddef>
#include <memory>
#include <optional>

#include "backend/kernel_args.hpp"
#include "backend/memory.hpp"
#include "backend/pending_read.hpp"
#include "cuda/gemm/gemm_plan.hpp"
#include "cuda/kernels/kernel_list.hpp"

namespace rig::cuda {

// A point in a device's queue of work (a timing CUDA event on the GPU): the
// kernel census times each piece of work between two of them.
class QueueMark {
 public:
  virtual ~QueueMark() = default;
  // Milliseconds of device time from `start` to this mark, both of the same
  // device; only once the device has reached this mark (after a wait).
  virtual double milliseconds_since(const QueueMark& start) const = 0;
};

class KernelDevice {
 public:
  virtual ~KernelDevice() = default;

  virtual backend::MemoryPool& memory() = 0;
  // What the kernels' plan() functions are given (grid sizes of two-stage reductions).
  virtual const simt::DeviceProperties& properties() const = 0;
  // Backend::device_utilisation: nothing where the device cannot tell (the emulator).
  virtual std::optional<double> utilisation() { return std::nullopt; }
  // Backend::set_convolution_autotuning: false where the device has no
  // engines to time (the emulator).
  virtual bool set_convolution_autotuning(bool /*on*/) { return false; }
  // Backend::set_tf32: whether f32 products and convolutions planned with
  // TF32 allowed run on TF32 tensor cores (the emulator computes f32).
  virtual bool has_tf32() const { return false; }
  // False only for the emulator's host-only mode (EmulatedWork::host_only):
  // nothing runs, reads give zeros, and the index checks and gradient
  // statistics (whose zeros would stop training) are not read.
  virtual bool computes() const { return true; }
  // A mark after everything queued so far, or null where the device's time
  // is not measured (the emulator, whose time would be the host's).
  virtual std::unique_ptr<QueueMark> mark() { return nullptr; }

// Queues one kernel as its plan() says; a plan with an empty grid queues nothing.
#define RIG_CUDA_DEVICE_RUN(K) virtual void run(const kernels::K& kernel) = 0;
  RIG_CUDA_KERNELS(RIG_CUDA_DEVICE_RUN)
#undef RIG_CUDA_DEVICE_RUN

  // D = alpha op(A) op(B) + beta C and the plan's epilogue (not its own work,
  // which KernelBackend runs as kernels), device pointers as CublasLtGemm::run.
  virtual void gemm(const LtPlan& plan, const void* a, const void* b, const void* c, void* d,
                    void* bias, void* aux) = 0;

  // Convolutions without bias (NCHW f32, contiguous): y = conv(x, w);
  // dx = conv's data gradient; dw = its filter gradient. Outputs written whole.
  virtual void conv2d_forward(const backend::Conv2dShape& s, const float* x, const float* w,
                              float* y) = 0;
  virtual void conv2d_backward_data(const backend::Conv2dShape& s, const float* w, const float* dy,
                                    float* dx) = 0;
  virtual void conv2d_backward_filter(const backend::Conv2dShape& s, const float* x,
                                      const float* dy, float* dw) = 0;

  // The same three convolutions on storage of `type`: f16 / bf16
  // (accumulated in f32), or f32 (then only the accumulating gradients are
  // new), where conv2d_16 says the device runs all three for `s` and `type`
  // (cuDNN on the GPU, where it plans them); otherwise KernelBackend runs
  // the f32 ones (on f32 copies of 16-bit storage). The defaults: none.
  virtual bool conv2d_16(const backend::Conv2dShape&, DType) {
    return false;
  }
  virtual void conv2d_forward_16(const backend::Conv2dShape& s, DType type, const void* x,
                                 const void* w, void* y);
  // With `accumulate` the data (filter) gradient is added to what dx (dw)
  // holds (in f32, rounded once), where conv2d_16_adds_dx (_dw) says the
  // device can.
  virtual void conv2d_backward_data_16(const backend::Conv2dShape& s, DType type, const void* w,
                                       const void* dy, void* dx, bool accumulate);
  virtual bool conv2d_16_adds_dx(const backend::Conv2dShape&, DType) {
    return false;
  }
  virtual void conv2d_backward_filter_16(const backend::Conv2dShape& s, DType type, const void* x,
                                         const void* dy, void* dw, bool accumulate);
  virtual bool conv2d_16_adds_dw(const backend::Conv2dShape&, DType) {
    return false;
  }
  // Fused attention (backend::FusedAttention): cuDNN's on the GPU, where it
  // plans the shape; none on the emulator (its attention is composed).
  virtual bool fused_attention_supported(const backend::FusedAttention&) {
    return false;
  }
  virtual void fused_attention_forward(const backend::FusedAttention& a);
  virtual void fused_attention_backward(const backend::FusedAttention& a);
  // Copies in the device's stream order. to_host waits for everything queued
  // before it; from_host returns once `host` may be reused.
  virtual void to_host(void* host, const void* src, std::size_t bytes) = 0;
  // A copy to the host queued now, in stream order, collected later without
  // waiting for what is queued after it. Default: to_host at once.
  virtual std::unique_ptr<backend::PendingRead> to_host_later(const void* src, std::size_t bytes) {
    return backend::read_at_once(bytes, [&](void* host, std::size_t n) { to_host(host, src, n); });
  }
  virtual void from_host(void* dst, const void* host, std::size_t bytes) = 0;
  // Backend::begin_uploads and the rest: a GPU's copy stream; nothing to do
  // where work runs in one queue.
  virtual void begin_uploads() {}
  virtual std::uint64_t end_uploads() {
    return 0;
  }
  virtual void use_uploads(std::uint64_t /*ticket*/) {}
  virtual void copy(void* dst, const void* src, std::size_t bytes) = 0;  // device to device
  virtual void zero(void* dst, std::size_t bytes) = 0;
  virtual void synchronize() = 0;
};

}  // namespace rig::cuda
