// The CUDA back end's KernelDevice on a GPU: kernels launched on one stream
// per device, cuBLASLt products, cuDNN convolutions, memory from the caching
// allocator, host copies staged through pinned memory. And the factory librig
// calls (backend_abi.hpp's kBackendFactory).
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <new>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "cuda/allocator/allocator_pool.hpp"
#include "cuda/backend/kernel_backend.hpp"
#include "cuda/backend_abi.hpp"
#include "cuda/dnn/cudnn_graphs.hpp"
#include "cuda/runtime/copies.hpp"
#include "cuda/runtime/cublaslt_gemm.cuh"
#include "cuda/runtime/cuda_error.hpp"
#include "cuda/runtime/device_guard.hpp"
#include "cuda/runtime/device_memory.hpp"
#include "cuda/runtime/device_properties.cuh"
#include "cuda/runtime/event.hpp"
#include "cuda/runtime/kernel_runs.cuh"
#include "cuda/runtime/nvml_utilisation.hpp"
#include "cuda/runtime/pinned_buffer.hpp"
#include "cuda/runtime/stream.hpp"

namespace rig::cuda {

namespace {

// KernelDevice::mark on the GPU: a timing event recorded on the stream.
class GpuMark final : public QueueMark {
 public:
  explicit GpuMark(const Stream& stream) { event_.record(stream); }
  double milliseconds_since(const QueueMark& start) const override {
    return event_.milliseconds_since(dynamic_cast<const GpuMark&>(start).event_);
  }

 private:
  Event event_{Event::Timing::on};
};

// The device's caching allocator for the back end's stream; cudaMalloc on
// that device.
class GpuPool final : public AllocatorPool {
 public:
  GpuPool(int device, StreamId stream)
      : AllocatorPool(device_allocator(device), stream), device_(device) {}
  backend::Block allocate(std::size_t bytes) override {
    const DeviceGuard guard(device_);
    return AllocatorPool::allocate(bytes);
  }

 private:
  int device_;
};

class GpuDevice final : public KernelDevice {
 public:
  explicit GpuDevice(int device)
      : device_(device),
        stream_(make_stream(device)),
        pool_(device, stream_.id()),
        properties_(properties_of(device)) {}

  backend::MemoryPool& memory() override { return pool_; }
  const simt::DeviceProperties& properties() const override { return properties_; }
  std::optional<double> utilisation() override {
    const std::lock_guard lock(nvml_mutex_);
    if (!nvml_) {
      const DeviceGuard guard(device_);
      nvml_ = std::make_unique<NvmlUtilisation>(device_);
    }
    return nvml_->sample();
  }

  // cudnn_benchmark (Backend::set_convolution_autotuning): with it, or with
  // RIG_CUDNN_AUTOTUNE=1, the convolutions' engines are timed on their first
  // call, as PyTorch's cudnn.benchmark (CudnnGraphs::autotune_with). Once
  // on it stays on: the plans already tuned keep the engines they chose.
  // TF32 tensor cores: compute capability 8.0 (Ampere) on.
  bool has_tf32() const override { return properties_.major >= 8; }

  bool set_convolution_autotuning(bool on) override {
    if (on && !autotune_) {
      autotune_ = true;
      if (graphs_) time_engines(*graphs_);
    }
    return true;
  }

#define RIG_GPU_RUN(K)                          \
  void run(const kernels::K& kernel) override { \
    const DeviceGuard guard(device_);           \
    cuda::run(kernel, stream_.native());        \
  }
  RIG_CUDA_KERNELS(RIG_GPU_RUN)
#undef RIG_GPU_RUN

  void gemm(const LtPlan& plan, const void* a, const void* b, const void* c, void* d, void* bias,
            void* aux) override {
    const DeviceGuard guard(device_);
    if (!gemm_) gemm_ = std::make_unique<CublasLtGemm>(device_);
    gemm_->run(plan, a, b, c, d, bias, aux, stream_.native());
  }

  void conv2d_forward(const backend::Conv2dShape& s, const float* x, const float* w,
                      float* y) override {
    const backend::Conv2dShape plain = without_bias(s);
    execute(dnn::conv2d_forward_graph(plain),
            {{dnn::uid::x, x}, {dnn::uid::w, w}, {dnn::uid::y, y}});
  }
  void conv2d_backward_data(const backend::Conv2dShape& s, const float* w, const float* dy,
                            float* dx) override {
    const backend::Conv2dShape plain = without_bias(s);
    execute(dnn::conv2d_backward_data_graph(plain),
            {{dnn::uid::dy, dy}, {dnn::uid::w, w}, {dnn::uid::dx, dx}});
  }
  void conv2d_backward_filter(const backend::Conv2dShape& s, const float* x, const float* dy,
                              float* dw) override {
    const backend::Conv2dShape plain = without_bias(s);
    execute(dnn::conv2d_backward_filter_graph(plain),
            {{dnn::uid::x, x}, {dnn::uid::dy, dy}, {dnn::uid::dw, dw}});
  }

  // cuDNN's convolutions on storage of `type` (f16, bf16, or f32, whose
  // gradients can then be added in place) where cuDNN plans all three graphs
  // of the shape (once per shape and type).
  bool conv2d_16(const backend::Conv2dShape& s, DType type) override {
    if (type != DType::bf16 && type != DType::f16 && type != DType::f32) return false;
    const dnn::ConvType t = conv_type(type);
    const backend::Conv2dShape plain = without_bias(s);
    return plans_once(conv16_supported_, dnn::conv2d_forward_graph(plain, t), [&] {
      return std::vector<dnn::Graph>{dnn::conv2d_backward_data_graph(plain, t),
                                     dnn::conv2d_backward_filter_graph(plain, t)};
    });
  }
  void conv2d_forward_16(const backend::Conv2dShape& s, DType type, const void* x, const void* w,
                         void* y) override {
    const backend::Conv2dShape plain = without_bias(s);
    execute(dnn::conv2d_forward_graph(plain, conv_type(type)),
            {{dnn::uid::x, x}, {dnn::uid::w, w}, {dnn::uid::y, y}});
  }
  void conv2d_backward_data_16(const backend::Conv2dShape& s, DType type, const void* w,
                               const void* dy, void* dx, bool accumulate) override {
    const backend::Conv2dShape plain = without_bias(s);
    execute(dnn::conv2d_backward_data_graph(plain, conv_type(type), accumulate),
            {{dnn::uid::dy, dy}, {dnn::uid::w, w}, {dnn::uid::dx, dx}});
  }
  // Where cuDNN plans the data gradient with beta 1 (once per shape and type).
  bool conv2d_16_adds_dx(const backend::Conv2dShape& s, DType type) override {
    return plans_once(conv16_adds_,
                      dnn::conv2d_backward_data_graph(without_bias(s), conv_type(type), true),
                      [] { return std::vector<dnn::Graph>{}; });
  }
  void conv2d_backward_filter_16(const backend::Conv2dShape& s, DType type, const void* x,
                                 const void* dy, void* dw, bool accumulate) override {
    const backend::Conv2dShape plain = without_bias(s);
    execute(dnn::conv2d_backward_filter_graph(plain, conv_type(type), accumulate),
            {{dnn::uid::x, x}, {dnn::uid::dy, dy}, {dnn::uid::dw, dw}});
  }
  // Where cuDNN plans the filter gradient with beta 1 (once per shape and type).
  bool conv2d_16_adds_dw(const backend::Conv2dShape& s, DType type) override {
    return plans_once(conv16_adds_,
                      dnn::conv2d_backward_filter_graph(without_bias(s), conv_type(type), true),
                      [] { return std::vector<dnn::Graph>{}; });
  }

  // cuDNN's fused attention where cuDNN plans the shape (its forward and,
  // where statistics are kept, its backward), once per graph. Off with
  // RIG_CUDA_FUSED_ATTENTION=0 (the composed kernels then, as on the CPU).
  bool fused_attention_supported(const backend::FusedAttention& a) override {
    if (!fused_attention_enabled()) return false;
    dnn::AttentionGraphShape s;
    try {
      s = dnn::fused_attention_shape(a);
    } catch (const std::invalid_argument&) {
      return false;
    }
    return plans_once(fused_supported_, dnn::attention_forward_graph(s), [&] {
      return s.stats ? std::vector<dnn::Graph>{dnn::attention_backward_graph(s)}
                     : std::vector<dnn::Graph>{};
    });
  }
  void fused_attention_forward(const backend::FusedAttention& a) override {
    const dnn::AttentionGraphShape s = dnn::fused_attention_shape(a);
    FusedInputs in(*this, a);
    std::vector<dnn::Binding> bindings = in.common(a);
    bindings.push_back({dnn::uid::o, a.out});
    if (a.stats != nullptr) bindings.push_back({dnn::uid::stats, a.stats});
    execute(dnn::attention_forward_graph(s), bindings);
  }
  void fused_attention_backward(const backend::FusedAttention& a) override {
    const dnn::AttentionGraphShape s = dnn::fused_attention_shape(a);
    FusedInputs in(*this, a);
    std::vector<dnn::Binding> bindings = in.common(a);
    bindings.insert(bindings.end(), {{dnn::uid::o, a.out},
                                     {dnn::uid::stats, a.stats},
                                     {dnn::uid::d_o, a.dout},
                                     {dnn::uid::dq, a.dq},
                                     {dnn::uid::dk, a.dk},
                                     {dnn::uid::dv, a.dv},
                                     {dnn::uid::dropout_scale_inv, &in.keep_scale_inv}});
    execute(dnn::attention_backward_graph(s), bindings);
  }

  void to_host(void* host, const void* src, std::size_t bytes) override {
    const DeviceGuard guard(device_);
    const std::lock_guard lock(staging_mutex_);
    Staging& staging = staging_for(bytes);
    copy_to_host_async(staging.buffer, static_cast<const std::byte*>(src), bytes, stream_);
    staging.done.record(stream_);
    staging.done.synchronize();
    std::memcpy(host, staging.buffer.data(), bytes);
  }
  // The copy into a staging buffer held for the read (no other copy takes it
  // until the read is collected or dropped) and an event after it: collecting
  // waits for that event only. The device outlives its reads (the engine's
  // last read ends with its training loop; the back end lives until exit).
  std::unique_ptr<backend::PendingRead> to_host_later(const void* src, std::size_t bytes) override {
    const DeviceGuard guard(device_);
    const std::lock_guard lock(staging_mutex_);
    Staging& staging = staging_for(bytes);
    copy_to_host_async(staging.buffer, static_cast<const std::byte*>(src), bytes, stream_);
    staging.done.record(stream_);
    staging.held = true;
    return std::make_unique<StagedRead>(*this, staging, bytes);
  }
  // Returns once the bytes are staged: the copy runs in stream order while
  // the host goes on (a batch's tensors do not wait for the step before);
  // inside begin_uploads / end_uploads, on the copy stream.
  void from_host(void* dst, const void* host, std::size_t bytes) override {
    const DeviceGuard guard(device_);
    const std::lock_guard lock(staging_mutex_);
    const Stream& stream = uploading_ ? *copy_stream_ : stream_;
    Staging& staging = staging_for(bytes);
    std::memcpy(staging.buffer.data(), host, bytes);
    copy_to_device_async(static_cast<std::byte*>(dst), staging.buffer, bytes, stream);
    staging.done.record(stream);
  }
  // The copy stream starts after the compute stream's work so far (the
  // destinations' memory may have been another tensor's until then); the
  // compute stream waits for the copies only at use_uploads.
  void begin_uploads() override {
    const DeviceGuard guard(device_);
    const std::lock_guard lock(staging_mutex_);
    if (!copy_stream_) copy_stream_ = std::make_unique<Stream>(make_stream(device_));
    Event before;
    before.record(stream_);
    copy_stream_->wait(before);
    uploading_ = true;
  }
  std::uint64_t end_uploads() override {
    const DeviceGuard guard(device_);
    const std::lock_guard lock(staging_mutex_);
    uploading_ = false;
    Event copied;
    copied.record(*copy_stream_);
    uploads_.emplace(++last_upload_, std::move(copied));
    return last_upload_;
  }
  void use_uploads(std::uint64_t ticket) override {
    const DeviceGuard guard(device_);
    const std::lock_guard lock(staging_mutex_);
    const auto found = uploads_.find(ticket);
    if (found == uploads_.end()) return;
    stream_.wait(found->second);
    uploads_.erase(found);
  }
  void copy(void* dst, const void* src, std::size_t bytes) override {
    const DeviceGuard guard(device_);
    RIG_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, stream_.native()));
  }
  void zero(void* dst, std::size_t bytes) override {
    const DeviceGuard guard(device_);
    RIG_CUDA_CHECK(cudaMemsetAsync(dst, 0, bytes, stream_.native()));
  }
  void synchronize() override {
    const DeviceGuard guard(device_);
    stream_.synchronize();
  }
  std::unique_ptr<QueueMark> mark() override {
    const DeviceGuard guard(device_);
    return std::make_unique<GpuMark>(stream_);
  }

 private:
  static Stream make_stream(int device) {
    const DeviceGuard guard(device);
    return Stream(device);
  }
  static simt::DeviceProperties properties_of(int device) {
    const DeviceGuard guard(device);
    return current_device_properties();
  }

  // A pinned buffer the stream is done with, of at least `bytes`: the
  // smallest free one of the ring that fits (a batch's small tensors do not
  // take the buffer its images need, which would then be pinned anew), a new
  // one while the ring is short, else the oldest after its copy (callers
  // hold staging_mutex_).
  struct Staging {
    PinnedBuffer buffer;
    Event done;         // recorded after the last copy out of or into `buffer`
    bool held = false;  // a pending read's bytes, not yet collected
  };
  static constexpr std::size_t kStagingRing = 32;
  Staging& staging_for(std::size_t bytes) {
    Staging* fitting = nullptr;
    for (auto& s : staging_) {
      if (s->held || s->buffer.size() < bytes) continue;
      if (fitting != nullptr && fitting->buffer.size() <= s->buffer.size()) continue;
      if (s->done.completed()) fitting = s.get();
    }
    if (fitting != nullptr) return *fitting;
    if (staging_.size() < kStagingRing) {
      staging_.push_back(std::make_unique<Staging>(
          Staging{PinnedBuffer(std::max<std::size_t>(bytes, 4096)), Event(), false}));
      return *staging_.back();
    }
    for (std::size_t tries = 0; tries < staging_.size(); ++tries) {
      Staging& oldest = *staging_[next_reuse_++ % staging_.size()];
      if (oldest.held) continue;
      oldest.done.synchronize();
      if (oldest.buffer.size() < bytes) oldest.buffer = PinnedBuffer(bytes);
      return oldest;
    }
    throw std::logic_error("every staging buffer holds a pending read: collect them");
  }

  // to_host_later's read: the staged bytes once the copy's event completes.
  class StagedRead final : public backend::PendingRead {
   public:
    StagedRead(GpuDevice& device, Staging& staging, std::size_t bytes)
        : device_(device), staging_(staging), bytes_(bytes) {}
    StagedRead(const StagedRead&) = delete;
    StagedRead& operator=(const StagedRead&) = delete;
    ~StagedRead() override {
      const std::lock_guard lock(device_.staging_mutex_);
      staging_.held = false;
    }
    void wait_into(void* host) override {
      staging_.done.synchronize();
      std::memcpy(host, staging_.buffer.data(), bytes_);
    }

   private:
    GpuDevice& device_;
    Staging& staging_;
    std::size_t bytes_;
  };

  // The bias is KernelBackend's own kernel, not the graph's.
  static backend::Conv2dShape without_bias(backend::Conv2dShape s) {
    s.bias = false;
    return s;
  }
  static dnn::ConvType conv_type(DType type) {
    if (type == DType::bf16) return dnn::ConvType::bf16;
    return type == DType::f16 ? dnn::ConvType::f16 : dnn::ConvType::f32;
  }
  static bool fused_attention_enabled() {
    static const bool enabled = [] {
      const char* value = std::getenv("RIG_CUDA_FUSED_ATTENTION");
      return value == nullptr || std::strcmp(value, "0") != 0;
    }();
    return enabled;
  }

  // Whether cuDNN plans `first` and the graphs `rest()` makes on this
  // device: asked once per first's key (the answers cached in `known`; the
  // other graphs are built only then). With RIG_CUDA_FUSED_ATTENTION set, a
  // refusal is printed with cuDNN's reason.
  template <class Rest>
  bool plans_once(std::map<std::string, bool>& known, const dnn::Graph& first, Rest&& rest) {
    const std::string key = first.key();
    const std::lock_guard lock(plans_mutex_);
    if (const auto it = known.find(key); it != known.end()) return it->second;
    bool ok = true;
    try {
      const DeviceGuard guard(device_);
      graphs().workspace_bytes(first);
      for (const dnn::Graph& g : rest()) graphs().workspace_bytes(g);
    } catch (const std::exception& e) {
      ok = false;
      if (std::getenv("RIG_CUDA_FUSED_ATTENTION") != nullptr) {
        std::fprintf(stderr,
                     "rig: cuDNN cannot plan %s here (f32 or composed kernels instead): %s\n",
                     first.name.c_str(), e.what());
      }
    }
    known.emplace(key, ok);
    return ok;
  }

  // The device-side inputs of one fused attention call: the rows' lengths
  // (every query row; the keys' from the caller), cuDNN's Philox seed and
  // offset, and the by-value scalars. Uploaded in stream order, so the
  // scratch may go back to the pool when the call is queued.
  struct FusedInputs {
    FusedInputs(GpuDevice& device, const backend::FusedAttention& a)
        : keep_scale(a.dropout_p > 0.0F ? 1.0F / (1.0F - a.dropout_p) : 1.0F),
          keep_scale_inv(1.0F - a.dropout_p),
          scale(a.scale) {
      if (a.key_lengths != nullptr) {
        const std::vector<std::int32_t> rows(static_cast<std::size_t>(a.b),
                                             static_cast<std::int32_t>(a.tq));
        query_lengths.emplace(device.pool_, rows.size() * sizeof(std::int32_t));
        device.from_host(query_lengths->as<void>(), rows.data(),
                         rows.size() * sizeof(std::int32_t));
      }
      if (a.dropout_p > 0.0F) {
        const std::int64_t seed_offset[2] = {static_cast<std::int64_t>(a.dropout_seed), 0};
        philox.emplace(device.pool_, sizeof(seed_offset));
        device.from_host(philox->as<void>(), seed_offset, sizeof(seed_offset));
      }
    }
    std::vector<dnn::Binding> common(const backend::FusedAttention& a) const {
      std::vector<dnn::Binding> b{{dnn::uid::q, a.q},
                                  {dnn::uid::k, a.k},
                                  {dnn::uid::v, a.v},
                                  {dnn::uid::attn_scale, &scale},
                                  {dnn::uid::neg_inf, &neg_inf}};
      if (query_lengths) {
        b.push_back({dnn::uid::seq_len_q, query_lengths->as<void>()});
        b.push_back({dnn::uid::seq_len_kv, a.key_lengths});
      }
      if (philox) {
        b.push_back({dnn::uid::seed, philox->as<std::int64_t>()});
        b.push_back({dnn::uid::offset, philox->as<std::int64_t>() + 1});
        b.push_back({dnn::uid::dropout_scale, &keep_scale});
      }
      return b;
    }
    float keep_scale, keep_scale_inv, scale;
    float neg_inf = -std::numeric_limits<float>::infinity();
    std::optional<DeviceScratch> query_lengths, philox;
  };

  // cuDNN's graphs, made on first use (with the device current).
  dnn::CudnnGraphs& graphs() {
    if (graphs_) return *graphs_;
    graphs_ = std::make_unique<dnn::CudnnGraphs>();
    const char* autotune = std::getenv("RIG_CUDNN_AUTOTUNE");
    if (autotune_ || (autotune != nullptr && std::strcmp(autotune, "1") == 0)) {
      time_engines(*graphs_);
    }
    return *graphs_;
  }

  void time_engines(dnn::CudnnGraphs& graphs) {
    graphs.autotune_with([this](const std::function<void()>& work) {
      Event start(Event::Timing::on), stop(Event::Timing::on);
      start.record(stream_);
      work();
      stop.record(stream_);
      stop.synchronize();
      return stop.milliseconds_since(start);
    });
  }

  // Runs `graph` with only the bindings it declares (the attention graphs
  // declare their inputs by mask and dropout).
  void execute(const dnn::Graph& graph, const std::vector<dnn::Binding>& all) {
    std::vector<dnn::Binding> bound;
    for (const dnn::Binding& b : all) {
      const dnn::TensorDesc* t = graph.tensor(b.uid);
      if (t != nullptr && !t->is_virtual) bound.push_back(b);
    }
    run_graph(graph, bound);
  }
  void execute(const dnn::Graph& graph, std::initializer_list<dnn::Binding> bindings) {
    run_graph(graph, std::span<const dnn::Binding>(bindings.begin(), bindings.size()));
  }
  void run_graph(const dnn::Graph& graph, std::span<const dnn::Binding> bindings) {
    const DeviceGuard guard(device_);
    const std::size_t bytes = graphs().workspace_bytes(graph);
    std::optional<DeviceScratch> workspace;
    if (bytes != 0) workspace.emplace(pool_, bytes);
    graphs().execute(graph, bindings, workspace ? workspace->as<void>() : nullptr, bytes,
                     stream_.native());
  }

  int device_;
  Stream stream_;
  GpuPool pool_;
  simt::DeviceProperties properties_;
  std::unique_ptr<CublasLtGemm> gemm_;
  std::unique_ptr<dnn::CudnnGraphs> graphs_;
  bool autotune_ = false;  // set_convolution_autotuning(true)
  std::mutex plans_mutex_;
  std::map<std::string, bool> fused_supported_;   // by forward graph key
  std::map<std::string, bool> conv16_supported_;  // by forward graph key
  std::map<std::string, bool> conv16_adds_;       // by accumulating dgrad / wgrad graph key
  std::mutex staging_mutex_;                      // also the uploads' state below
  std::vector<std::unique_ptr<Staging>> staging_;
  std::unique_ptr<Stream> copy_stream_;  // made by the first begin_uploads
  bool uploading_ = false;
  std::map<std::uint64_t, Event> uploads_;  // end_uploads' events, until used
  std::uint64_t last_upload_ = 0;
  std::size_t next_reuse_ = 0;
  std::mutex nvml_mutex_;
  std::unique_ptr<NvmlUtilisation> nvml_;  // made at the first utilisation()
};

}  // namespace

extern "C" __attribute__((visibility("default"))) int rig_cuda_make_backend(
    int factory_version, int device, std::unique_ptr<rig::backend::Backend>* out, char* error,
    std::size_t error_bytes) {
  try {
    if (factory_version != kFactoryVersion) {
      std::snprintf(error, error_bytes,
                    "librig_cuda's back-end factory is version %d, librig expects %d: rebuild "
                    "rig so that both come from one build",
                    kFactoryVersion, factory_version);
      return 1;
    }
    *out = std::make_unique<KernelBackend>(std::make_unique<GpuDevice>(device), device);
    return 0;
  } catch (const std::exception& e) {
    std::snprintf(error, error_bytes, "%s", e.what());
    return 1;
  }
}

}  // namespace rig::cuda
