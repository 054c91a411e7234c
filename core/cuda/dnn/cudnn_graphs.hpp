// cuDNN 9's graph API for rig's Graphs (dnn/graph.hpp): the support check
// against a device description (no GPU needed) and execution with a cache of
// finalized plans per graph key.
//
// cuDNN itself is confined to dnn/cudnn_graphs.cpp, which loads libcudnn.so.9
// with dlopen the first time a graph is checked or built: librig_cuda links no
// CUDA library, and a machine without cuDNN runs everything else. No cuDNN
// type appears here.
//
// Attention dropout (AttentionDropout in graph.hpp): `mask` multiplies by
// rig's keep mask, the Philox stream of rig/math/philox.hpp that the CPU and
// the dropout kernels use, so the kept set is bit-identical to the CPU's; it
// costs reading B*H*Tq*Tk bytes per pass and the caller's kernel that writes
// them. `philox` is cuDNN's own generator (seed, offset): nothing read, but
// other bits than the CPU's. The backward takes `philox` only (cuDNN 9.14's
// fused backward mishandled a keep tensor, see attention_backward_graph), so
// GPU attention dropout uses cuDNN's Philox.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <span>
#include <stdexcept>
#include <string>

#include <cuda_runtime_api.h>

#include "cuda/dnn/graph.hpp"

namespace rig::cuda::dnn {

// A cuDNN status other than success, naming the call, the status, cuDNN's
// last error text and (where there is one) the graph.
class CudnnError : public std::runtime_error {
 public:
  CudnnError(int status, const std::string& what) : std::runtime_error(what), status_(status) {}
  int status() const { return status_; }  // a cudnnStatus_t

 private:
  int status_;
};

// The library rig loads: "libcudnn.so.9".
const char* cudnn_library_name();
// Loads cuDNN once per process; "" when loaded, else why not (dlopen's text).
const std::string& cudnn_load_error();
// cudnnGetVersion() of the loaded library (91900 for 9.19.0); throws when
// cuDNN cannot be loaded.
std::size_t cudnn_version();

// cuDNN's description of a GPU (CUDNN_BACKEND_DEVICEPROP_DESCRIPTOR), from
// the JSON that tools/gpu/cudnn_device_description.cpp writes on that GPU.
// Plans can be made for it on a machine without a GPU.
class DeviceDescription {
 public:
  static std::unique_ptr<DeviceDescription> from_json(const std::string& json);
  ~DeviceDescription();
  DeviceDescription(const DeviceDescription&) = delete;
  DeviceDescription& operator=(const DeviceDescription&) = delete;
  void* descriptor() const { return descriptor_; }  // cudnnBackendDescriptor_t

 private:
  explicit DeviceDescription(void* descriptor) : descriptor_(descriptor) {}
  friend class CudnnGraphs;
  void* descriptor_ = nullptr;
};

// What cuDNN said of one graph on one device.
struct SupportReport {
  bool graph_finalized = false;  // the operation graph is valid
  // The heuristics' answers: mode A's, and the fallback list's where none of
  // mode A's was usable and finalized.
  std::int64_t engine_configs = 0;
  // Of those, the ones with the NONDETERMINISTIC numerical note (skipped
  // unless Graph::allow_nondeterministic).
  std::int64_t nondeterministic_configs = 0;
  // Usable: without TF32 where the graph forbids it, deterministic unless the
  // graph allows otherwise.
  std::int64_t usable_configs = 0;
  std::int64_t plans_finalized = 0;
  std::int64_t workspace_bytes = -1;  // cuDNN's, of the first plan that finalized
  // The chosen engine: its global index and notes ("engine 8 tensor_core
  // (deterministic)"), of the first plan that finalized or, where the driver
  // is the stub, of the first usable config whose plan compiled.
  std::string engine;
  std::string error;  // the first failure, with cuDNN's own text
  // Every engine the heuristics found is nondeterministic and the graph does
  // not allow that: no plan (error says so).
  bool no_deterministic_engine = false;
  // A plan failed to finalize with CUDNN_STATUS_EXECUTION_FAILED_CUDA_DRIVER:
  // a runtime-compiled engine (batch norm, attention) compiles its kernel and
  // loads it into the driver when its plan finalizes, which the driver stub
  // of a GPU-less machine refuses (cuLibraryLoadData: CUDA_ERROR_STUB_LIBRARY).
  bool plan_needs_driver = false;
  // A plan finalized, or (where the driver is missing) the heuristics found
  // an engine whose plan only the driver's load refused.
  bool supported() const { return plans_finalized > 0; }
  bool supported_without_driver() const {
    return supported() || (usable_configs > 0 && plan_needs_driver);
  }
};

// Builds `graph`, asks the heuristics for `device` and finalizes plans until
// one finalizes (up to `max_plans` of them counted). Needs cuDNN, not a GPU.
// cuDNN errors become the report's `error`, never exceptions.
SupportReport check_support(const Graph& graph, const DeviceDescription& device, int max_plans = 1);

// One address per non-virtual tensor of a graph; by-value tensors take a
// host pointer to their value (float epsilon, scales; -inf for neg_inf).
struct Binding {
  std::int64_t uid = 0;
  const void* data = nullptr;
};

// Plans for the current device, cached by Graph::key(). Create and use it
// with the device current (cudaSetDevice) that it was made on. Not
// thread-safe for concurrent execute() on one object's handle: use one per
// stream-owning thread.
class CudnnGraphs {
 public:
  CudnnGraphs();  // cudnnCreate on the current device; throws CudnnError
  ~CudnnGraphs();
  CudnnGraphs(const CudnnGraphs&) = delete;
  CudnnGraphs& operator=(const CudnnGraphs&) = delete;

  // The plan's workspace (building and caching the plan if it is new):
  // cuDNN's own and, after it, the graph's scratch tensors.
  std::size_t workspace_bytes(const Graph& graph);
  // Queues the graph on `stream`: every non-virtual tensor bound except the
  // graph's constants and scratch tensors (TensorDesc), `workspace` at least
  // workspace_bytes(graph) bytes of device memory (null when 0), 256-byte
  // aligned.
  void execute(const Graph& graph, std::span<const Binding> bindings, void* workspace,
               std::size_t workspace_size, cudaStream_t stream);

  // Autotuning, as PyTorch's cudnn.benchmark: from now on a new plan for a
  // rerunnable graph (Graph::rerunnable: the convolutions) keeps up to
  // `candidates` usable engines (deterministic ones unless the graph allows
  // otherwise, within 1 GiB of workspace), and its first execute() runs each
  // on that call's own data, timed by `timer`, and keeps the fastest.
  // `timer` runs the work it is given on the stream and returns its
  // milliseconds. Which engine wins may differ from run to run, and with it
  // the results' last bits: off by default.
  using Timer = std::function<float(const std::function<void()>& work)>;
  void autotune_with(Timer timer, int candidates = 8);
  std::size_t plans_autotuned() const { return plans_autotuned_; }

  std::size_t plans_built() const { return plans_built_; }
  // The engine chosen for a graph ("" before it is built).
  std::string engine(const Graph& graph);

  struct Plan;

 private:
  Plan& plan(const Graph& graph);
  void tune(Plan& p, void* variant_pack);  // a cudnnBackendDescriptor_t
  void* handle_ = nullptr;                 // cudnnHandle_t
  std::unique_ptr<DeviceDescription> device_;
  std::mutex mutex_;
  std::map<std::string, std::unique_ptr<Plan>> plans_;
  std::size_t plans_built_ = 0;
  Timer timer_;
  int autotune_candidates_ = 1;
  std::size_t plans_autotuned_ = 0;
};

}  // namespace rig::cuda::dnn
