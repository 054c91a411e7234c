// The one translation unit of rig that includes cuDNN: it loads libcudnn.so.9
// with dlopen and turns dnn::Graph into cuDNN backend descriptors.
#include "cuda/dnn/cudnn_graphs.hpp"

#include <dlfcn.h>

#include <cudnn_graph.h>

#include <algorithm>
#include <cstddef>
#include <cstdio>
#include <utility>
#include <vector>

namespace rig::cuda::dnn {

// ---- Loading cuDNN -------------------------------------------------------------------

namespace {

#define RIG_DNN_STRINGIFY_VALUE(x) #x
#define RIG_DNN_STRINGIFY(x) RIG_DNN_STRINGIFY_VALUE(x)

struct CudnnApi {
  decltype(&cudnnGetVersion) get_version = nullptr;
  decltype(&cudnnGetErrorString) get_error_string = nullptr;
  decltype(&cudnnGetLastErrorString) get_last_error_string = nullptr;
  decltype(&cudnnCreate) create = nullptr;
  decltype(&cudnnDestroy) destroy = nullptr;
  decltype(&cudnnSetStream) set_stream = nullptr;
  decltype(&cudnnBackendCreateDescriptor) create_descriptor = nullptr;
  decltype(&cudnnBackendDestroyDescriptor) destroy_descriptor = nullptr;
  decltype(&cudnnBackendSetAttribute) set_attribute = nullptr;
  decltype(&cudnnBackendGetAttribute) get_attribute = nullptr;
  decltype(&cudnnBackendFinalize) finalize = nullptr;
  decltype(&cudnnBackendExecute) execute = nullptr;
};

struct Loaded {
  CudnnApi api;
  std::string error;
};

template <class Fn>
bool resolve(void* library, const char* symbol, Fn& out, std::string& error) {
  void* address = dlsym(library, symbol);
  if (address == nullptr) {
    error = std::string(cudnn_library_name()) + " has no " + symbol +
            " (a cuDNN older than the " RIG_DNN_STRINGIFY(CUDNN_MAJOR) "." RIG_DNN_STRINGIFY(
                CUDNN_MINOR) " that rig was built with?)";
    return false;
  }
  out = reinterpret_cast<Fn>(address);
  return true;
}

Loaded load() {
  Loaded loaded;
  // Kept for the process's life. By name (LD_LIBRARY_PATH, ld.so.conf), then
  // where NVIDIA's packages put it without an ld.so.conf entry.
  void* library = dlopen(cudnn_library_name(), RTLD_NOW | RTLD_LOCAL);
  if (library == nullptr) {
    const std::string in_cuda = std::string("/usr/local/cuda/lib64/") + cudnn_library_name();
    library = dlopen(in_cuda.c_str(), RTLD_NOW | RTLD_LOCAL);
  }
  if (library == nullptr) {
    const char* reason = dlerror();
    loaded.error = std::string("cannot load cuDNN (") + cudnn_library_name() +
                   "): " + (reason != nullptr ? reason : "unknown reason") +
                   "; install cuDNN 9 or add its folder to LD_LIBRARY_PATH";
    return loaded;
  }
  CudnnApi& a = loaded.api;
  std::string& e = loaded.error;
  const bool ok = resolve(library, "cudnnGetVersion", a.get_version, e) &&
                  resolve(library, "cudnnGetErrorString", a.get_error_string, e) &&
                  resolve(library, "cudnnGetLastErrorString", a.get_last_error_string, e) &&
                  resolve(library, "cudnnCreate", a.create, e) &&
                  resolve(library, "cudnnDestroy", a.destroy, e) &&
                  resolve(library, "cudnnSetStream", a.set_stream, e) &&
                  resolve(library, "cudnnBackendCreateDescriptor", a.create_descriptor, e) &&
                  resolve(library, "cudnnBackendDestroyDescriptor", a.destroy_descriptor, e) &&
                  resolve(library, "cudnnBackendSetAttribute", a.set_attribute, e) &&
                  resolve(library, "cudnnBackendGetAttribute", a.get_attribute, e) &&
                  resolve(library, "cudnnBackendFinalize", a.finalize, e) &&
                  resolve(library, "cudnnBackendExecute", a.execute, e);
  if (ok && a.get_version() < 90800) {
    e = std::string(cudnn_library_name()) + " is cuDNN " + std::to_string(a.get_version()) +
        "; rig needs 9.8 or newer (device descriptions)";
  }
  return loaded;
}

const Loaded& loaded() {
  static const Loaded instance = load();
  return instance;
}

const CudnnApi& cudnn() {
  const Loaded& l = loaded();
  if (!l.error.empty()) throw CudnnError(CUDNN_STATUS_NOT_INITIALIZED, l.error);
  return l.api;
}

std::string last_error_text() {
  char text[2048] = {};
  cudnn().get_last_error_string(text, sizeof text);
  return text;
}

void check(cudnnStatus_t status, const std::string& what) {
  if (status == CUDNN_STATUS_SUCCESS) return;
  std::string message = what + ": " + cudnn().get_error_string(status);
  const std::string detail = last_error_text();
  if (!detail.empty()) message += " (" + detail + ")";
  throw CudnnError(static_cast<int>(status), message);
}

// ---- Descriptors -----------------------------------------------------------------------

class Descriptor {
 public:
  Descriptor() = default;
  explicit Descriptor(cudnnBackendDescriptorType_t type) {
    check(cudnn().create_descriptor(type, &handle_), "cudnnBackendCreateDescriptor");
  }
  ~Descriptor() {
    if (handle_ != nullptr) cudnn().destroy_descriptor(handle_);
  }
  Descriptor(Descriptor&& other) noexcept : handle_(other.handle_) { other.handle_ = nullptr; }
  Descriptor& operator=(Descriptor&& other) noexcept {
    std::swap(handle_, other.handle_);
    return *this;
  }
  cudnnBackendDescriptor_t get() const { return handle_; }
  cudnnBackendDescriptor_t* address() { return &handle_; }

  template <class T>
  void set(cudnnBackendAttributeName_t name, cudnnBackendAttributeType_t type, const T* values,
           std::int64_t count, const char* what) {
    check(cudnn().set_attribute(handle_, name, type, count, values), what);
  }
  template <class T>
  void set(cudnnBackendAttributeName_t name, cudnnBackendAttributeType_t type, const T& value,
           const char* what) {
    set(name, type, &value, 1, what);
  }
  void set_descriptor(cudnnBackendAttributeName_t name, const Descriptor& d, const char* what) {
    cudnnBackendDescriptor_t raw = d.get();
    set(name, CUDNN_TYPE_BACKEND_DESCRIPTOR, raw, what);
  }
  void finalize(const char* what) { check(cudnn().finalize(handle_), what); }

 private:
  cudnnBackendDescriptor_t handle_ = nullptr;
};

cudnnDataType_t data_type(DnnType type) {
  switch (type) {
    case DnnType::f32:
      return CUDNN_DATA_FLOAT;
    case DnnType::f16:
      return CUDNN_DATA_HALF;
    case DnnType::bf16:
      return CUDNN_DATA_BFLOAT16;
    case DnnType::i32:
      return CUDNN_DATA_INT32;
    case DnnType::i64:
      return CUDNN_DATA_INT64;
    case DnnType::u8:
      return CUDNN_DATA_UINT8;
    case DnnType::boolean:
      return CUDNN_DATA_BOOLEAN;
  }
  return CUDNN_DATA_FLOAT;
}

cudnnPointwiseMode_t pointwise_mode(PointwiseMode mode) {
  switch (mode) {
    case PointwiseMode::add:
      return CUDNN_POINTWISE_ADD;
    case PointwiseMode::sub:
      return CUDNN_POINTWISE_SUB;
    case PointwiseMode::mul:
      return CUDNN_POINTWISE_MUL;
    case PointwiseMode::div:
      return CUDNN_POINTWISE_DIV;
    case PointwiseMode::exp:
      return CUDNN_POINTWISE_EXP;
    case PointwiseMode::log:
      return CUDNN_POINTWISE_LOG;
    case PointwiseMode::identity:
      return CUDNN_POINTWISE_IDENTITY;
    case PointwiseMode::cmp_ge:
      return CUDNN_POINTWISE_CMP_GE;
    case PointwiseMode::cmp_lt:
      return CUDNN_POINTWISE_CMP_LT;
    case PointwiseMode::logical_and:
      return CUDNN_POINTWISE_LOGICAL_AND;
    case PointwiseMode::gen_index:
      return CUDNN_POINTWISE_GEN_INDEX;
    case PointwiseMode::binary_select:
      return CUDNN_POINTWISE_BINARY_SELECT;
  }
  return CUDNN_POINTWISE_IDENTITY;
}

// Everything a finalized operation graph owns: cuDNN keeps pointers into
// the tensors and operations, so they live as long as the graph.
struct BuiltGraph {
  std::map<std::int64_t, Descriptor> tensors;
  std::vector<Descriptor> parts;  // convolution / pointwise / ... descriptors
  std::vector<Descriptor> operations;
  Descriptor graph;
};

const Descriptor& tensor_of(const BuiltGraph& built, std::int64_t id, const Graph& graph) {
  const auto found = built.tensors.find(id);
  if (found == built.tensors.end()) {
    throw CudnnError(CUDNN_STATUS_BAD_PARAM, "graph " + graph.name + " names tensor " +
                                                 std::to_string(id) + " that it does not declare");
  }
  return found->second;
}

void build_node(BuiltGraph& built, const Graph& graph, const Node& node) {
  const auto tensor = [&](Slot slot) -> const Descriptor& {
    return tensor_of(built, node.operand(slot), graph);
  };
  const auto has = [&](Slot slot) { return node.operand(slot) != 0; };
  const cudnnDataType_t compute = data_type(graph.compute);
  const float one = 1.0F;
  const float zero = 0.0F;
  switch (node.kind) {
    case OpKind::conv_forward:
    case OpKind::conv_backward_data:
    case OpKind::conv_backward_filter: {
      Descriptor conv(CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR);
      const cudnnConvolutionMode_t mode = CUDNN_CROSS_CORRELATION;
      const std::int64_t dims = 2;
      conv.set(CUDNN_ATTR_CONVOLUTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, compute, "conv compute");
      conv.set(CUDNN_ATTR_CONVOLUTION_CONV_MODE, CUDNN_TYPE_CONVOLUTION_MODE, mode, "conv mode");
      conv.set(CUDNN_ATTR_CONVOLUTION_SPATIAL_DIMS, CUDNN_TYPE_INT64, dims, "conv dims");
      conv.set(CUDNN_ATTR_CONVOLUTION_PRE_PADDINGS, CUDNN_TYPE_INT64, node.padding.data(), 2,
               "conv pre-padding");
      conv.set(CUDNN_ATTR_CONVOLUTION_POST_PADDINGS, CUDNN_TYPE_INT64, node.padding.data(), 2,
               "conv post-padding");
      conv.set(CUDNN_ATTR_CONVOLUTION_DILATIONS, CUDNN_TYPE_INT64, node.dilation.data(), 2,
               "conv dilations");
      conv.set(CUDNN_ATTR_CONVOLUTION_FILTER_STRIDES, CUDNN_TYPE_INT64, node.stride.data(), 2,
               "conv strides");
      conv.finalize("finalizing the convolution descriptor");
      if (node.kind == OpKind::conv_forward) {
        Descriptor op(CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR);
        op.set_descriptor(CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_X, tensor(Slot::x), "conv x");
        op.set_descriptor(CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_W, tensor(Slot::w), "conv w");
        op.set_descriptor(CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_Y, tensor(Slot::y), "conv y");
        op.set_descriptor(CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_CONV_DESC, conv, "conv desc");
        op.set(CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_ALPHA, CUDNN_TYPE_FLOAT, one, "alpha");
        op.set(CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_BETA, CUDNN_TYPE_FLOAT, zero, "beta");
        op.finalize("finalizing the convolution forward");
        built.operations.push_back(std::move(op));
      } else if (node.kind == OpKind::conv_backward_data) {
        Descriptor op(CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_DATA_DESCRIPTOR);
        op.set_descriptor(CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_DY, tensor(Slot::dy), "dy");
        op.set_descriptor(CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_W, tensor(Slot::w), "w");
        op.set_descriptor(CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_DX, tensor(Slot::dx), "dx");
        op.set_descriptor(CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_CONV_DESC, conv, "conv desc");
        op.set(CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_ALPHA, CUDNN_TYPE_FLOAT, one, "alpha");
        op.set(CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_BETA, CUDNN_TYPE_FLOAT, node.beta, "beta");
        op.finalize("finalizing the convolution backward data");
        built.operations.push_back(std::move(op));
      } else {
        Descriptor op(CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_FILTER_DESCRIPTOR);
        op.set_descriptor(CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_X, tensor(Slot::x), "x");
        op.set_descriptor(CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_DY, tensor(Slot::dy), "dy");
        op.set_descriptor(CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_DW, tensor(Slot::dw), "dw");
        op.set_descriptor(CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_CONV_DESC, conv, "conv desc");
        op.set(CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_ALPHA, CUDNN_TYPE_FLOAT, one, "alpha");
        op.set(CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_BETA, CUDNN_TYPE_FLOAT, node.beta,
               "beta");
        op.finalize("finalizing the convolution backward filter");
        built.operations.push_back(std::move(op));
      }
      built.parts.push_back(std::move(conv));
      break;
    }
    case OpKind::pointwise: {
      Descriptor pw(CUDNN_BACKEND_POINTWISE_DESCRIPTOR);
      const cudnnPointwiseMode_t mode = pointwise_mode(node.pointwise);
      const cudnnDataType_t math = data_type(node.math);
      pw.set(CUDNN_ATTR_POINTWISE_MODE, CUDNN_TYPE_POINTWISE_MODE, mode, "pointwise mode");
      pw.set(CUDNN_ATTR_POINTWISE_MATH_PREC, CUDNN_TYPE_DATA_TYPE, math, "pointwise math");
      if (node.pointwise == PointwiseMode::gen_index) {
        pw.set(CUDNN_ATTR_POINTWISE_AXIS, CUDNN_TYPE_INT64, node.axis, "pointwise axis");
      }
      pw.finalize("finalizing a pointwise descriptor");
      Descriptor op(CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR);
      op.set_descriptor(CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR, pw, "pointwise desc");
      op.set_descriptor(CUDNN_ATTR_OPERATION_POINTWISE_XDESC, tensor(Slot::x), "pointwise x");
      if (has(Slot::b)) {
        op.set_descriptor(CUDNN_ATTR_OPERATION_POINTWISE_BDESC, tensor(Slot::b), "pointwise b");
      }
      if (has(Slot::t)) {
        op.set_descriptor(CUDNN_ATTR_OPERATION_POINTWISE_TDESC, tensor(Slot::t), "pointwise t");
      }
      op.set_descriptor(CUDNN_ATTR_OPERATION_POINTWISE_YDESC, tensor(Slot::y), "pointwise y");
      op.finalize("finalizing a pointwise operation");
      built.parts.push_back(std::move(pw));
      built.operations.push_back(std::move(op));
      break;
    }
    case OpKind::reduction: {
      Descriptor red(CUDNN_BACKEND_REDUCTION_DESCRIPTOR);
      const cudnnReduceTensorOp_t mode =
          node.reduce == ReduceMode::add ? CUDNN_REDUCE_TENSOR_ADD : CUDNN_REDUCE_TENSOR_MAX;
      red.set(CUDNN_ATTR_REDUCTION_OPERATOR, CUDNN_TYPE_REDUCTION_OPERATOR_TYPE, mode,
              "reduction mode");
      red.set(CUDNN_ATTR_REDUCTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, compute, "reduction compute");
      red.finalize("finalizing a reduction descriptor");
      Descriptor op(CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR);
      op.set_descriptor(CUDNN_ATTR_OPERATION_REDUCTION_DESC, red, "reduction desc");
      op.set_descriptor(CUDNN_ATTR_OPERATION_REDUCTION_XDESC, tensor(Slot::x), "reduction x");
      op.set_descriptor(CUDNN_ATTR_OPERATION_REDUCTION_YDESC, tensor(Slot::y), "reduction y");
      op.finalize("finalizing a reduction operation");
      built.parts.push_back(std::move(red));
      built.operations.push_back(std::move(op));
      break;
    }
    case OpKind::matmul: {
      Descriptor mm(CUDNN_BACKEND_MATMUL_DESCRIPTOR);
      mm.set(CUDNN_ATTR_MATMUL_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, compute, "matmul compute");
      mm.finalize("finalizing a matmul descriptor");
      Descriptor op(CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR);
      op.set_descriptor(CUDNN_ATTR_OPERATION_MATMUL_DESC, mm, "matmul desc");
      op.set_descriptor(CUDNN_ATTR_OPERATION_MATMUL_ADESC, tensor(Slot::a), "matmul a");
      op.set_descriptor(CUDNN_ATTR_OPERATION_MATMUL_BDESC, tensor(Slot::b), "matmul b");
      op.set_descriptor(CUDNN_ATTR_OPERATION_MATMUL_CDESC, tensor(Slot::c), "matmul c");
      if (has(Slot::m_override)) {
        op.set_descriptor(CUDNN_ATTR_OPERATION_MATMUL_GEMM_M_OVERRIDE_DESC,
                          tensor(Slot::m_override), "matmul m override");
      }
      if (has(Slot::n_override)) {
        op.set_descriptor(CUDNN_ATTR_OPERATION_MATMUL_GEMM_N_OVERRIDE_DESC,
                          tensor(Slot::n_override), "matmul n override");
      }
      if (has(Slot::k_override)) {
        op.set_descriptor(CUDNN_ATTR_OPERATION_MATMUL_GEMM_K_OVERRIDE_DESC,
                          tensor(Slot::k_override), "matmul k override");
      }
      op.finalize("finalizing a matmul operation");
      built.parts.push_back(std::move(mm));
      built.operations.push_back(std::move(op));
      break;
    }
    case OpKind::norm_forward: {
      Descriptor op(CUDNN_BACKEND_OPERATION_NORM_FORWARD_DESCRIPTOR);
      const cudnnBackendNormMode_t mode = CUDNN_BATCH_NORM;
      const cudnnBackendNormFwdPhase_t phase = CUDNN_NORM_FWD_TRAINING;
      op.set(CUDNN_ATTR_OPERATION_NORM_FWD_MODE, CUDNN_TYPE_NORM_MODE, mode, "norm mode");
      op.set(CUDNN_ATTR_OPERATION_NORM_FWD_PHASE, CUDNN_TYPE_NORM_FWD_PHASE, phase, "norm phase");
      op.set_descriptor(CUDNN_ATTR_OPERATION_NORM_FWD_XDESC, tensor(Slot::x), "norm x");
      op.set_descriptor(CUDNN_ATTR_OPERATION_NORM_FWD_SCALE_DESC, tensor(Slot::scale), "scale");
      op.set_descriptor(CUDNN_ATTR_OPERATION_NORM_FWD_BIAS_DESC, tensor(Slot::bias), "bias");
      op.set_descriptor(CUDNN_ATTR_OPERATION_NORM_FWD_EPSILON_DESC, tensor(Slot::epsilon),
                        "epsilon");
      op.set_descriptor(CUDNN_ATTR_OPERATION_NORM_FWD_YDESC, tensor(Slot::y), "norm y");
      op.set_descriptor(CUDNN_ATTR_OPERATION_NORM_FWD_MEAN_DESC, tensor(Slot::mean), "mean");
      op.set_descriptor(CUDNN_ATTR_OPERATION_NORM_FWD_INV_VARIANCE_DESC, tensor(Slot::inv_variance),
                        "inv variance");
      if (has(Slot::momentum)) {
        op.set_descriptor(CUDNN_ATTR_OPERATION_NORM_FWD_EXP_AVG_FACTOR_DESC, tensor(Slot::momentum),
                          "momentum");
        op.set_descriptor(CUDNN_ATTR_OPERATION_NORM_FWD_INPUT_RUNNING_MEAN_DESC,
                          tensor(Slot::running_mean_in), "running mean in");
        op.set_descriptor(CUDNN_ATTR_OPERATION_NORM_FWD_INPUT_RUNNING_VAR_DESC,
                          tensor(Slot::running_var_in), "running var in");
        op.set_descriptor(CUDNN_ATTR_OPERATION_NORM_FWD_OUTPUT_RUNNING_MEAN_DESC,
                          tensor(Slot::running_mean_out), "running mean out");
        op.set_descriptor(CUDNN_ATTR_OPERATION_NORM_FWD_OUTPUT_RUNNING_VAR_DESC,
                          tensor(Slot::running_var_out), "running var out");
      }
      op.finalize("finalizing the batch-norm forward");
      built.operations.push_back(std::move(op));
      break;
    }
    case OpKind::norm_backward: {
      Descriptor op(CUDNN_BACKEND_OPERATION_NORM_BACKWARD_DESCRIPTOR);
      const cudnnBackendNormMode_t mode = CUDNN_BATCH_NORM;
      op.set(CUDNN_ATTR_OPERATION_NORM_BWD_MODE, CUDNN_TYPE_NORM_MODE, mode, "norm mode");
      op.set_descriptor(CUDNN_ATTR_OPERATION_NORM_BWD_XDESC, tensor(Slot::x), "norm x");
      op.set_descriptor(CUDNN_ATTR_OPERATION_NORM_BWD_DYDESC, tensor(Slot::dy), "norm dy");
      op.set_descriptor(CUDNN_ATTR_OPERATION_NORM_BWD_SCALE_DESC, tensor(Slot::scale), "scale");
      op.set_descriptor(CUDNN_ATTR_OPERATION_NORM_BWD_MEAN_DESC, tensor(Slot::mean), "mean");
      op.set_descriptor(CUDNN_ATTR_OPERATION_NORM_BWD_INV_VARIANCE_DESC, tensor(Slot::inv_variance),
                        "inv variance");
      op.set_descriptor(CUDNN_ATTR_OPERATION_NORM_BWD_DXDESC, tensor(Slot::dx), "norm dx");
      op.set_descriptor(CUDNN_ATTR_OPERATION_NORM_BWD_DSCALE_DESC, tensor(Slot::dscale), "dscale");
      op.set_descriptor(CUDNN_ATTR_OPERATION_NORM_BWD_DBIAS_DESC, tensor(Slot::dbias), "dbias");
      op.finalize("finalizing the batch-norm backward");
      built.operations.push_back(std::move(op));
      break;
    }
    case OpKind::rng: {
      Descriptor rng(CUDNN_BACKEND_RNG_DESCRIPTOR);
      const cudnnRngDistribution_t distribution = CUDNN_RNG_DISTRIBUTION_BERNOULLI;
      rng.set(CUDNN_ATTR_RNG_DISTRIBUTION, CUDNN_TYPE_RNG_DISTRIBUTION, distribution,
              "rng distribution");
      rng.set(CUDNN_ATTR_RNG_BERNOULLI_DIST_PROBABILITY, CUDNN_TYPE_DOUBLE, node.probability,
              "rng probability");
      rng.finalize("finalizing the rng descriptor");
      Descriptor op(CUDNN_BACKEND_OPERATION_RNG_DESCRIPTOR);
      op.set_descriptor(CUDNN_ATTR_OPERATION_RNG_DESC, rng, "rng desc");
      op.set_descriptor(CUDNN_ATTR_OPERATION_RNG_YDESC, tensor(Slot::y), "rng y");
      op.set_descriptor(CUDNN_ATTR_OPERATION_RNG_SEED, tensor(Slot::seed), "rng seed");
      op.set_descriptor(CUDNN_ATTR_OPERATION_RNG_OFFSET_DESC, tensor(Slot::offset), "rng offset");
      op.finalize("finalizing the rng operation");
      built.parts.push_back(std::move(rng));
      built.operations.push_back(std::move(op));
      break;
    }
    case OpKind::reshape: {
      Descriptor op(CUDNN_BACKEND_OPERATION_RESHAPE_DESCRIPTOR);
      op.set_descriptor(CUDNN_ATTR_OPERATION_RESHAPE_XDESC, tensor(Slot::x), "reshape x");
      op.set_descriptor(CUDNN_ATTR_OPERATION_RESHAPE_YDESC, tensor(Slot::y), "reshape y");
      op.finalize("finalizing a reshape operation");
      built.operations.push_back(std::move(op));
      break;
    }
  }
}

std::unique_ptr<BuiltGraph> build_graph(const Graph& graph) {
  auto built = std::make_unique<BuiltGraph>();
  for (const TensorDesc& t : graph.tensors) {
    Descriptor d(CUDNN_BACKEND_TENSOR_DESCRIPTOR);
    const cudnnDataType_t type = data_type(t.type);
    const std::int64_t alignment = 16;
    const auto rank = static_cast<std::int64_t>(t.dims.size());
    d.set(CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, t.uid, "tensor uid");
    d.set(CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, type, "tensor type");
    d.set(CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, t.dims.data(), rank, "tensor dims");
    d.set(CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, t.strides.data(), rank, "tensor strides");
    d.set(CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, alignment, "tensor alignment");
    if (t.is_virtual) {
      const bool yes = true;
      d.set(CUDNN_ATTR_TENSOR_IS_VIRTUAL, CUDNN_TYPE_BOOLEAN, yes, "tensor virtual");
    }
    if (t.by_value) {
      const bool yes = true;
      d.set(CUDNN_ATTR_TENSOR_IS_BY_VALUE, CUDNN_TYPE_BOOLEAN, yes, "tensor by value");
    }
    d.finalize(("finalizing tensor " + std::to_string(t.uid)).c_str());
    built->tensors.emplace(t.uid, std::move(d));
  }
  for (const Node& node : graph.nodes) build_node(*built, graph, node);
  Descriptor g(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR);
  std::vector<cudnnBackendDescriptor_t> ops;
  ops.reserve(built->operations.size());
  for (const Descriptor& op : built->operations) ops.push_back(op.get());
  g.set(CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR, ops.data(),
        static_cast<std::int64_t>(ops.size()), "graph operations");
  g.finalize("finalizing the operation graph");
  built->graph = std::move(g);
  return built;
}

// Whether TF32 engines are ruled out: f32 convolutions unless allowed.
bool forbids_tf32(const Graph& graph) {
  if (graph.allow_tf32) return false;
  for (const Node& n : graph.nodes) {
    if (n.kind != OpKind::conv_forward && n.kind != OpKind::conv_backward_data &&
        n.kind != OpKind::conv_backward_filter && n.kind != OpKind::matmul) {
      continue;
    }
    for (const auto& [slot, id] : n.operands) {
      // The inputs decide: an f32 output (attention's dq accumulator) is no TF32.
      if (slot != Slot::x && slot != Slot::w && slot != Slot::dy && slot != Slot::a &&
          slot != Slot::b) {
        continue;
      }
      const TensorDesc* t = graph.tensor(id);
      if (t != nullptr && t->type == DnnType::f32 && !t->is_virtual) return true;
    }
  }
  return false;
}

// The engine of a config: its global index and numerical notes.
struct EngineInfo {
  std::int64_t index = -1;
  std::vector<cudnnBackendNumericalNote_t> notes;
  std::vector<cudnnBackendBehaviorNote_t> behavior;
  bool has(cudnnBackendNumericalNote_t note) const {
    return std::find(notes.begin(), notes.end(), note) != notes.end();
  }
  bool nondeterministic() const { return has(CUDNN_NUMERICAL_NOTE_NONDETERMINISTIC); }
  std::string describe() const {
    std::string text = "engine " + std::to_string(index);
    if (std::find(behavior.begin(), behavior.end(), CUDNN_BEHAVIOR_NOTE_RUNTIME_COMPILATION) !=
        behavior.end()) {
      text += " runtime_compiled";
    }
    for (cudnnBackendNumericalNote_t note : notes) {
      switch (note) {
        case CUDNN_NUMERICAL_NOTE_TENSOR_CORE:
          text += " tensor_core";
          break;
        case CUDNN_NUMERICAL_NOTE_DOWN_CONVERT_INPUTS:
          text += " down_convert";
          break;
        case CUDNN_NUMERICAL_NOTE_REDUCED_PRECISION_REDUCTION:
          text += " reduced_precision";
          break;
        case CUDNN_NUMERICAL_NOTE_FFT:
          text += " fft";
          break;
        case CUDNN_NUMERICAL_NOTE_NONDETERMINISTIC:
          text += " nondeterministic";
          break;
        case CUDNN_NUMERICAL_NOTE_WINOGRAD:
        case CUDNN_NUMERICAL_NOTE_WINOGRAD_TILE_4x4:
        case CUDNN_NUMERICAL_NOTE_WINOGRAD_TILE_6x6:
        case CUDNN_NUMERICAL_NOTE_WINOGRAD_TILE_13x13:
          text += " winograd";
          break;
        default:
          break;
      }
    }
    if (!nondeterministic()) text += " (deterministic)";
    return text;
  }
};

EngineInfo engine_info(const Descriptor& config) {
  EngineInfo info;
  Descriptor engine(CUDNN_BACKEND_ENGINE_DESCRIPTOR);
  std::int64_t count = 0;
  cudnnBackendDescriptor_t raw = engine.get();
  if (cudnn().get_attribute(config.get(), CUDNN_ATTR_ENGINECFG_ENGINE,
                            CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &count,
                            &raw) != CUDNN_STATUS_SUCCESS) {
    return info;
  }
  cudnn().get_attribute(engine.get(), CUDNN_ATTR_ENGINE_GLOBAL_INDEX, CUDNN_TYPE_INT64, 1, &count,
                        &info.index);
  cudnnBackendNumericalNote_t notes[CUDNN_NUMERICAL_NOTE_TYPE_COUNT] = {};
  if (cudnn().get_attribute(engine.get(), CUDNN_ATTR_ENGINE_NUMERICAL_NOTE,
                            CUDNN_TYPE_NUMERICAL_NOTE, CUDNN_NUMERICAL_NOTE_TYPE_COUNT, &count,
                            notes) == CUDNN_STATUS_SUCCESS) {
    info.notes.assign(notes,
                      notes + std::min<std::int64_t>(count, CUDNN_NUMERICAL_NOTE_TYPE_COUNT));
  }
  cudnnBackendBehaviorNote_t behavior[CUDNN_BEHAVIOR_NOTE_TYPE_COUNT] = {};
  if (cudnn().get_attribute(engine.get(), CUDNN_ATTR_ENGINE_BEHAVIOR_NOTE, CUDNN_TYPE_BEHAVIOR_NOTE,
                            CUDNN_BEHAVIOR_NOTE_TYPE_COUNT, &count,
                            behavior) == CUDNN_STATUS_SUCCESS) {
    info.behavior.assign(behavior,
                         behavior + std::min<std::int64_t>(count, CUDNN_BEHAVIOR_NOTE_TYPE_COUNT));
  }
  return info;
}

// The heuristics' engine configs for the graph on the device in `mode`, in
// their order.
std::vector<Descriptor> engine_configs(const BuiltGraph& built, cudnnBackendDescriptor_t device,
                                       cudnnBackendHeurMode_t mode) {
  Descriptor heuristics(CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR);
  heuristics.set_descriptor(CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, built.graph, "heuristics graph");
  heuristics.set(CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, mode, "heuristics mode");
  heuristics.set(CUDNN_ATTR_ENGINEHEUR_DEVICEPROP, CUDNN_TYPE_BACKEND_DESCRIPTOR, device,
                 "heuristics device");
  heuristics.finalize(mode == CUDNN_HEUR_MODE_A ? "heuristics (mode A)" : "heuristics (fallback)");
  std::int64_t count = 0;
  check(cudnn().get_attribute(heuristics.get(), CUDNN_ATTR_ENGINEHEUR_RESULTS,
                              CUDNN_TYPE_BACKEND_DESCRIPTOR, 0, &count, nullptr),
        "counting the heuristics' results");
  if (count == 0) return {};
  std::vector<Descriptor> configs;
  std::vector<cudnnBackendDescriptor_t> raw;
  for (std::int64_t i = 0; i < count; ++i) {
    configs.emplace_back(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR);
    raw.push_back(configs.back().get());
  }
  std::int64_t returned = 0;
  check(cudnn().get_attribute(heuristics.get(), CUDNN_ATTR_ENGINEHEUR_RESULTS,
                              CUDNN_TYPE_BACKEND_DESCRIPTOR, count, &returned, raw.data()),
        "reading the heuristics' results");
  configs.resize(static_cast<std::size_t>(std::min(returned, count)));
  return configs;
}

// One finalized plan and what it needs.
struct PlanChoice {
  Descriptor plan;
  std::int64_t workspace = 0;
  std::string engine;
};

// The first finalized plan, or why none.
struct PlanResult {
  PlanChoice first;
  SupportReport report;
  // With keep_others: the plans that finalized after the first, in the
  // heuristics' order (autotuning's other candidates).
  std::vector<PlanChoice> others;
};

// Finalizes plans for the heuristics' configs in order (mode A's, then, where
// none of those is usable and finalizes, the fallback list's), skipping
// engines that use TF32 where the graph forbids it and engines marked
// nondeterministic unless the graph allows them.
PlanResult make_plan(const Graph& graph, const BuiltGraph& built, cudnnBackendDescriptor_t device,
                     int max_plans, bool keep_others = false) {
  PlanResult result;
  SupportReport& report = result.report;
  report.graph_finalized = true;
  const bool no_tf32 = forbids_tf32(graph);
  for (cudnnBackendHeurMode_t mode : {CUDNN_HEUR_MODE_A, CUDNN_HEUR_MODE_FALLBACK}) {
    if (report.plans_finalized > 0 || report.plan_needs_driver) break;
    std::vector<Descriptor> configs;
    if (mode == CUDNN_HEUR_MODE_A) {
      configs = engine_configs(built, device, mode);
    } else {
      try {
        configs = engine_configs(built, device, mode);
      } catch (const CudnnError&) {
        if (report.engine_configs == 0) throw;  // mode A had none either: the reason
      }
    }
    report.engine_configs += static_cast<std::int64_t>(configs.size());
    const char* list = mode == CUDNN_HEUR_MODE_A ? "" : ", from the fallback list";
    for (Descriptor& config : configs) {
      const EngineInfo info = engine_info(config);
      if (no_tf32 && info.has(CUDNN_NUMERICAL_NOTE_TENSOR_CORE)) continue;
      if (info.nondeterministic()) {
        ++report.nondeterministic_configs;
        if (!graph.allow_nondeterministic) continue;
      }
      ++report.usable_configs;
      if (report.plans_finalized >= max_plans) continue;
      Descriptor plan(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR);
      cudnnBackendDescriptor_t raw = config.get();
      cudnnStatus_t status =
          cudnn().set_attribute(plan.get(), CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG,
                                CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &raw);
      if (status == CUDNN_STATUS_SUCCESS) {
        status = cudnn().set_attribute(plan.get(), CUDNN_ATTR_EXECUTION_PLAN_DEVICEPROP,
                                       CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &device);
      }
      if (status == CUDNN_STATUS_SUCCESS) status = cudnn().finalize(plan.get());
      if (status != CUDNN_STATUS_SUCCESS) {
        if (report.error.empty()) {
          report.error = info.describe() +
                         ": finalizing the plan: " + cudnn().get_error_string(status) + " (" +
                         last_error_text() + ")";
        }
        // A runtime-compiled engine is compiled (NVRTC), then loaded into the
        // driver: with no driver, or the CUDA install's stub (which answers
        // CUDA_ERROR_STUB_LIBRARY), every such plan fails the same way. The
        // engine is the one a GPU would get.
        if (status == CUDNN_STATUS_EXECUTION_FAILED_CUDA_DRIVER) {
          report.plan_needs_driver = true;
          report.engine = info.describe() + list;
          break;
        }
        continue;
      }
      std::int64_t workspace = 0;
      std::int64_t count = 0;
      check(cudnn().get_attribute(plan.get(), CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE,
                                  CUDNN_TYPE_INT64, 1, &count, &workspace),
            "reading the plan's workspace size");
      if (report.plans_finalized == 0) {
        result.first = {std::move(plan), workspace, info.describe() + list};
        report.workspace_bytes = workspace;
        report.engine = result.first.engine;
      } else if (keep_others) {
        result.others.push_back({std::move(plan), workspace, info.describe() + list});
      }
      ++report.plans_finalized;
    }
  }
  if (report.engine_configs == 0 && report.error.empty()) {
    report.error = "the heuristics (mode A and fallback) found no engine";
  } else if (report.usable_configs == 0 && report.error.empty()) {
    if (report.nondeterministic_configs > 0 && !graph.allow_nondeterministic) {
      report.no_deterministic_engine = true;
      report.error = "no deterministic engine: of the " + std::to_string(report.engine_configs) +
                     " engine configs the heuristics found (mode A and fallback), " +
                     std::to_string(report.nondeterministic_configs) +
                     " are marked nondeterministic, which the graph forbids "
                     "(Graph::allow_nondeterministic)";
      if (report.nondeterministic_configs < report.engine_configs) {
        report.error += ", and the others use TF32, which it forbids too";
      }
    } else {
      report.error =
          "every engine the heuristics found uses TF32 tensor cores, which the graph "
          "forbids";
    }
  }
  return result;
}

}  // namespace

// ---- Public ------------------------------------------------------------------------

const char* cudnn_library_name() {
  return "libcudnn.so." RIG_DNN_STRINGIFY(CUDNN_MAJOR);
}

const std::string& cudnn_load_error() {
  return loaded().error;
}

std::size_t cudnn_version() {
  return cudnn().get_version();
}

std::unique_ptr<DeviceDescription> DeviceDescription::from_json(const std::string& json) {
  Descriptor d(CUDNN_BACKEND_DEVICEPROP_DESCRIPTOR);
  std::string text = json;
  while (!text.empty() && (text.back() == '\n' || text.back() == '\r' || text.back() == ' ')) {
    text.pop_back();
  }
  d.set(CUDNN_ATTR_DEVICEPROP_JSON_REPRESENTATION, CUDNN_TYPE_CHAR, text.data(),
        static_cast<std::int64_t>(text.size()), "setting the device description's JSON");
  d.finalize("finalizing the device description");
  std::unique_ptr<DeviceDescription> description(new DeviceDescription(d.get()));
  *d.address() = nullptr;  // owned by `description` now
  return description;
}

DeviceDescription::~DeviceDescription() {
  if (descriptor_ != nullptr) {
    cudnn().destroy_descriptor(static_cast<cudnnBackendDescriptor_t>(descriptor_));
  }
}

SupportReport check_support(const Graph& graph, const DeviceDescription& device, int max_plans) {
  SupportReport report;
  try {
    std::unique_ptr<BuiltGraph> built = build_graph(graph);
    PlanResult result = make_plan(
        graph, *built, static_cast<cudnnBackendDescriptor_t>(device.descriptor()), max_plans);
    report = result.report;
  } catch (const std::exception& e) {
    // cuDNN's own C++ exceptions have been seen to cross its C API.
    report.error = e.what();
  }
  return report;
}

struct CudnnGraphs::Plan {
  std::unique_ptr<BuiltGraph> graph;
  Descriptor plan;
  std::int64_t workspace = 0;  // cuDNN's (the largest candidate's) and the scratch tensors
  std::string engine;
  // Autotuning: the other plans to time against `plan` at the first
  // execute(); empty once timed (or when not autotuning).
  std::vector<PlanChoice> candidates;
  std::vector<std::pair<std::int64_t, std::int64_t>> scratch;  // (uid, workspace offset)
  std::vector<std::pair<std::int64_t, float>> constants;       // (uid, value); never resized
  // Autotuning a graph that adds to its outputs (Graph::accumulated): the
  // candidates run with those bound to copies after the rest of the
  // workspace. tuning_workspace: the workspace until they have run (then
  // `workspace`), the copies included.
  std::vector<std::pair<std::int64_t, std::int64_t>> tuning_copies;  // (uid, workspace offset)
  std::int64_t tuning_workspace = 0;
};

namespace {

std::int64_t element_bytes(DnnType type) {
  switch (type) {
    case DnnType::f32:
    case DnnType::i32:
      return 4;
    case DnnType::f16:
    case DnnType::bf16:
      return 2;
    case DnnType::i64:
      return 8;
    case DnnType::u8:
    case DnnType::boolean:
      return 1;
  }
  return 4;
}

constexpr std::int64_t kWorkspaceAlignment = 256;
// Autotuning passes over engines that want more workspace than this.
constexpr std::int64_t kAutotuneWorkspaceCap = std::int64_t{1} << 30;

std::string milliseconds(float ms) {
  char text[32];
  std::snprintf(text, sizeof(text), "%.3f ms", static_cast<double>(ms));
  return text;
}

std::int64_t aligned(std::int64_t bytes) {
  return (bytes + kWorkspaceAlignment - 1) / kWorkspaceAlignment * kWorkspaceAlignment;
}

// The bytes a tensor's strides span.
std::int64_t extent_bytes(const TensorDesc& t) {
  std::int64_t extent = 1;
  for (std::size_t i = 0; i < t.dims.size(); ++i) extent += (t.dims[i] - 1) * t.strides[i];
  return extent * element_bytes(t.type);
}

// Places the graph's scratch tensors after cuDNN's workspace (and, where its
// candidates are to be timed, copies of the outputs it adds to after those)
// and collects its constants.
void lay_out(const Graph& graph, CudnnGraphs::Plan& plan) {
  std::int64_t offset = aligned(plan.workspace);
  for (const TensorDesc& t : graph.tensors) {
    if (t.by_value && t.value) plan.constants.emplace_back(t.uid, *t.value);
    if (!t.scratch) continue;
    plan.scratch.emplace_back(t.uid, offset);
    offset += aligned(extent_bytes(t));
  }
  if (!plan.scratch.empty()) plan.workspace = offset;
  plan.tuning_workspace = plan.workspace;
  if (plan.candidates.empty() || graph.accumulated.empty()) return;
  for (const std::int64_t uid : graph.accumulated) {
    plan.tuning_copies.emplace_back(uid, offset);
    offset += aligned(extent_bytes(*graph.tensor(uid)));
  }
  plan.tuning_workspace = offset;
}

}  // namespace

CudnnGraphs::CudnnGraphs() {
  cudnnHandle_t handle = nullptr;
  check(cudnn().create(&handle), "cudnnCreate");
  handle_ = handle;
  try {
    Descriptor d(CUDNN_BACKEND_DEVICEPROP_DESCRIPTOR);
    d.set(CUDNN_ATTR_DEVICEPROP_HANDLE, CUDNN_TYPE_HANDLE, handle, "device description handle");
    d.finalize("finalizing the device description");
    device_.reset(new DeviceDescription(d.get()));
    *d.address() = nullptr;
  } catch (...) {
    cudnn().destroy(handle);
    throw;
  }
}

CudnnGraphs::~CudnnGraphs() {
  plans_.clear();
  device_.reset();
  cudnn().destroy(static_cast<cudnnHandle_t>(handle_));
}

CudnnGraphs::Plan& CudnnGraphs::plan(const Graph& graph) {
  const std::string key = graph.key();
  std::lock_guard<std::mutex> lock(mutex_);
  const auto found = plans_.find(key);
  if (found != plans_.end()) return *found->second;
  auto plan = std::make_unique<Plan>();
  try {
    plan->graph = build_graph(graph);
  } catch (const CudnnError& e) {
    throw CudnnError(e.status(), std::string(e.what()) + " for " + key);
  }
  // A graph that adds to its outputs is timed on copies of them (lay_out).
  const bool tune = timer_ && (graph.rerunnable || !graph.accumulated.empty());
  PlanResult result =
      make_plan(graph, *plan->graph, static_cast<cudnnBackendDescriptor_t>(device_->descriptor()),
                tune ? autotune_candidates_ : 1, tune);
  if (!result.report.supported()) {
    throw CudnnError(CUDNN_STATUS_NOT_SUPPORTED,
                     "cuDNN has no plan for " + key + ": " + result.report.error);
  }
  plan->plan = std::move(result.first.plan);
  plan->workspace = result.first.workspace;
  plan->engine = result.first.engine;
  for (PlanChoice& other : result.others) {
    if (other.workspace > kAutotuneWorkspaceCap) continue;
    plan->workspace = std::max(plan->workspace, other.workspace);
    plan->candidates.push_back(std::move(other));
  }
  lay_out(graph, *plan);
  ++plans_built_;
  Plan& out = *plan;
  plans_.emplace(key, std::move(plan));
  return out;
}

std::size_t CudnnGraphs::workspace_bytes(const Graph& graph) {
  const Plan& p = plan(graph);
  return static_cast<std::size_t>(p.candidates.empty() ? p.workspace : p.tuning_workspace);
}

std::string CudnnGraphs::engine(const Graph& graph) {
  std::lock_guard<std::mutex> lock(mutex_);
  const auto found = plans_.find(graph.key());
  return found == plans_.end() ? std::string() : found->second->engine;
}

void CudnnGraphs::execute(const Graph& graph, std::span<const Binding> bindings, void* workspace,
                          std::size_t workspace_size, cudaStream_t stream) {
  Plan& p = plan(graph);
  if (workspace_size < static_cast<std::size_t>(p.workspace)) {
    throw CudnnError(CUDNN_STATUS_BAD_PARAM, graph.name + " needs a workspace of " +
                                                 std::to_string(p.workspace) + " bytes, given " +
                                                 std::to_string(workspace_size));
  }
  std::vector<std::int64_t> ids;
  std::vector<void*> pointers;
  for (const TensorDesc& t : graph.tensors) {
    if (t.is_virtual) continue;
    if (t.scratch) {
      const auto placed = std::find_if(p.scratch.begin(), p.scratch.end(),
                                       [&](const auto& s) { return s.first == t.uid; });
      ids.push_back(t.uid);
      pointers.push_back(static_cast<std::byte*>(workspace) + placed->second);
      continue;
    }
    const auto bound = std::find_if(bindings.begin(), bindings.end(),
                                    [&](const Binding& b) { return b.uid == t.uid; });
    if ((bound == bindings.end() || bound->data == nullptr) && t.value) {
      const auto constant = std::find_if(p.constants.begin(), p.constants.end(),
                                         [&](const auto& c) { return c.first == t.uid; });
      ids.push_back(t.uid);
      pointers.push_back(&constant->second);
      continue;
    }
    if (bound == bindings.end() || bound->data == nullptr) {
      throw CudnnError(CUDNN_STATUS_BAD_PARAM,
                       graph.name + ": tensor " + std::to_string(t.uid) + " is not bound");
    }
    ids.push_back(t.uid);
    pointers.push_back(const_cast<void*>(bound->data));
  }
  const auto make_pack = [&](std::vector<void*>& data) {
    Descriptor pack(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR);
    pack.set(CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, ids.data(),
             static_cast<std::int64_t>(ids.size()), "variant pack ids");
    pack.set(CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, data.data(),
             static_cast<std::int64_t>(data.size()), "variant pack pointers");
    pack.set(CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, workspace,
             "variant pack workspace");
    pack.finalize("finalizing the variant pack");
    return pack;
  };
  Descriptor pack = make_pack(pointers);
  const auto handle = static_cast<cudnnHandle_t>(handle_);
  check(cudnn().set_stream(handle, stream), "cudnnSetStream");
  if (!p.candidates.empty() && p.tuning_copies.empty()) {
    tune(p, pack.get());
  } else if (!p.candidates.empty()) {
    // Timed with the outputs it adds to bound to copies in the workspace,
    // so only the run below adds to them.
    if (workspace_size < static_cast<std::size_t>(p.tuning_workspace)) {
      throw CudnnError(CUDNN_STATUS_BAD_PARAM,
                       graph.name + " needs a workspace of " + std::to_string(p.tuning_workspace) +
                           " bytes while autotuning, given " + std::to_string(workspace_size));
    }
    std::vector<void*> on_copies = pointers;
    for (const auto& [uid, offset] : p.tuning_copies) {
      const auto at = std::find(ids.begin(), ids.end(), uid);
      if (at == ids.end()) {
        throw CudnnError(CUDNN_STATUS_BAD_PARAM, graph.name + ": the output it adds to, tensor " +
                                                     std::to_string(uid) + ", is not bound");
      }
      on_copies[static_cast<std::size_t>(at - ids.begin())] =
          static_cast<std::byte*>(workspace) + offset;
    }
    Descriptor tuning_pack = make_pack(on_copies);
    tune(p, tuning_pack.get());
  }
  check(cudnn().execute(handle, p.plan.get(), pack.get()), "cudnnBackendExecute of " + graph.name);
}

void CudnnGraphs::autotune_with(Timer timer, int candidates) {
  const std::lock_guard<std::mutex> lock(mutex_);
  timer_ = std::move(timer);
  autotune_candidates_ = std::max(candidates, 1);
}

// Each plan runs twice on the call's own bindings (the first run loads and
// warms it), the second timed; an engine that fails to run is passed over.
// The graph is rerunnable, so the runs only rewrite its outputs, or the
// outputs it adds to are copies (execute).
void CudnnGraphs::tune(Plan& p, void* variant_pack) {
  const auto handle = static_cast<cudnnHandle_t>(handle_);
  const auto pack = static_cast<cudnnBackendDescriptor_t>(variant_pack);
  auto time = [&](const Descriptor& plan) -> float {
    float ms = -1.0F;
    for (int run = 0; run < 2; ++run) {
      cudnnStatus_t status = CUDNN_STATUS_SUCCESS;
      ms = timer_([&] { status = cudnn().execute(handle, plan.get(), pack); });
      if (status != CUDNN_STATUS_SUCCESS) return -1.0F;
    }
    return ms;
  };
  const float first_ms = time(p.plan);
  float best_ms = first_ms;
  PlanChoice* best = nullptr;
  for (PlanChoice& c : p.candidates) {
    const float ms = time(c.plan);
    if (ms >= 0.0F && (best_ms < 0.0F || ms < best_ms)) {
      best_ms = ms;
      best = &c;
    }
  }
  const std::size_t timed = p.candidates.size() + 1;
  if (best != nullptr) {
    std::swap(p.plan, best->plan);
    p.engine = best->engine;
  }
  p.engine += " (autotuned: the fastest of " + std::to_string(timed) + " engines, " +
              milliseconds(best_ms) + "; the heuristics' first " +
              (first_ms < 0.0F ? std::string("failed") : milliseconds(first_ms)) + ")";
  p.candidates.clear();
  ++plans_autotuned_;
}

}  // namespace rig::cuda::dnn
