#include "cuda/runtime/cublaslt_gemm.cuh"

#include <array>
#include <cstdint>
#include <limits>
#include <optional>
#include <span>
#include <string>
#include <utility>

#include "cuda/runtime/cublaslt_library.cuh"
#include "cuda/runtime/cuda_error.hpp"
#include "cuda/runtime/device_guard.hpp"
#include "cuda/runtime/event.hpp"
#include "rig/environment_switch.hpp"

namespace rig::cuda {

// LtEpilogue mirrors cublasLtEpilogue_t value for value.
static_assert(static_cast<std::uint32_t>(LtEpilogue::default_) == CUBLASLT_EPILOGUE_DEFAULT);
static_assert(static_cast<std::uint32_t>(LtEpilogue::relu) == CUBLASLT_EPILOGUE_RELU);
static_assert(static_cast<std::uint32_t>(LtEpilogue::relu_aux) == CUBLASLT_EPILOGUE_RELU_AUX);
static_assert(static_cast<std::uint32_t>(LtEpilogue::bias) == CUBLASLT_EPILOGUE_BIAS);
static_assert(static_cast<std::uint32_t>(LtEpilogue::relu_bias) == CUBLASLT_EPILOGUE_RELU_BIAS);
static_assert(static_cast<std::uint32_t>(LtEpilogue::relu_aux_bias) ==
              CUBLASLT_EPILOGUE_RELU_AUX_BIAS);
static_assert(static_cast<std::uint32_t>(LtEpilogue::drelu) == CUBLASLT_EPILOGUE_DRELU);
static_assert(static_cast<std::uint32_t>(LtEpilogue::drelu_bgrad) == CUBLASLT_EPILOGUE_DRELU_BGRAD);
static_assert(static_cast<std::uint32_t>(LtEpilogue::gelu) == CUBLASLT_EPILOGUE_GELU);
static_assert(static_cast<std::uint32_t>(LtEpilogue::gelu_aux) == CUBLASLT_EPILOGUE_GELU_AUX);
static_assert(static_cast<std::uint32_t>(LtEpilogue::gelu_bias) == CUBLASLT_EPILOGUE_GELU_BIAS);
static_assert(static_cast<std::uint32_t>(LtEpilogue::gelu_aux_bias) ==
              CUBLASLT_EPILOGUE_GELU_AUX_BIAS);
static_assert(static_cast<std::uint32_t>(LtEpilogue::dgelu) == CUBLASLT_EPILOGUE_DGELU);
static_assert(static_cast<std::uint32_t>(LtEpilogue::dgelu_bgrad) == CUBLASLT_EPILOGUE_DGELU_BGRAD);
static_assert(static_cast<std::uint32_t>(LtEpilogue::bgrada) == CUBLASLT_EPILOGUE_BGRADA);
static_assert(static_cast<std::uint32_t>(LtEpilogue::bgradb) == CUBLASLT_EPILOGUE_BGRADB);

void check_cublas(cublasStatus_t status, const char* call, const std::string& context) {
  if (status == CUBLAS_STATUS_SUCCESS) return;
  std::string what = std::string(call) + " failed: " + cublaslt().get_status_name(status) + ": " +
                     cublaslt().get_status_string(status);
  if (!context.empty()) what += " for " + context;
  throw CublasLtError(status, what);
}

namespace {

cudaDataType_t data_type(GemmType type) {
  switch (type) {
    case GemmType::f32:
      return CUDA_R_32F;
    case GemmType::f16:
      return CUDA_R_16F;
    case GemmType::bf16:
      return CUDA_R_16BF;
  }
  return CUDA_R_32F;
}

// RAII for the descriptors of one call.
struct MatmulDesc {
  cublasLtMatmulDesc_t desc = nullptr;
  ~MatmulDesc() {
    if (desc != nullptr) cublaslt().desc_destroy(desc);
  }
};
struct Layout {
  cublasLtMatrixLayout_t layout = nullptr;
  ~Layout() {
    if (layout != nullptr) cublaslt().layout_destroy(layout);
  }
};
struct Preference {
  cublasLtMatmulPreference_t preference = nullptr;
  ~Preference() {
    if (preference != nullptr) cublaslt().preference_destroy(preference);
  }
};

template <typename T>
void set(cublasLtMatmulDesc_t desc, cublasLtMatmulDescAttributes_t attribute, const T& value,
         const char* name, const std::string& context) {
  check_cublas(cublaslt().desc_set_attribute(desc, attribute, &value, sizeof(value)), name,
               context);
}

void make_layout(Layout& out, const LtLayout& layout, const std::string& context) {
  check_cublas(cublaslt().layout_create(&out.layout, data_type(layout.type),
                                        static_cast<std::uint64_t>(layout.rows),
                                        static_cast<std::uint64_t>(layout.cols), layout.ld),
               "cublasLtMatrixLayoutCreate", context);
  // A single product keeps cuBLASLt's defaults (count 1, offset 0) unset.
  if (!layout.batched()) return;
  const std::int32_t count = layout.batch_count;
  check_cublas(cublaslt().layout_set_attribute(out.layout, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT,
                                               &count, sizeof(count)),
               "cublasLtMatrixLayoutSetAttribute(CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT)", context);
  const std::int64_t offset = layout.batch_offset;
  check_cublas(
      cublaslt().layout_set_attribute(out.layout, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET,
                                      &offset, sizeof(offset)),
      "cublasLtMatrixLayoutSetAttribute(CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET)", context);
}

// The largest power of two (up to 256) dividing the address: the heuristic
// is told each operand's, so it is part of the cache key.
unsigned alignment(const void* pointer) {
  const auto address = reinterpret_cast<std::uintptr_t>(pointer);
  unsigned align = 1;
  while (align < 256 && address % (align * 2) == 0) align *= 2;
  return align;
}

// The bytes D's layout spans: its last matrix's last column's end.
std::size_t span_bytes(const LtLayout& l) {
  const std::int64_t batches = l.batch_count > 1 ? (l.batch_count - 1) * l.batch_offset : 0;
  return static_cast<std::size_t>((l.cols - 1) * l.ld + l.rows + batches) * size_of(l.type);
}

// Whether a plan's timed runs can write D alone: no bias gradient or aux
// output that its call would then have written more than once.
bool tunable(const LtPlan& plan) {
  return plan.bias_role != BiasRole::bias_grad && plan.aux_role != AuxRole::write_relu_mask &&
         plan.aux_role != AuxRole::write_gelu_input;
}

// Device memory from cudaMalloc, freed on every path (autotuning's scratch D).
struct CudaScratch {
  void* data = nullptr;
  explicit CudaScratch(std::size_t bytes) { RIG_CUDA_CHECK(cudaMalloc(&data, bytes)); }
  ~CudaScratch() { cudaFree(data); }
  CudaScratch(const CudaScratch&) = delete;
  CudaScratch& operator=(const CudaScratch&) = delete;
};

// One product as cublasLtMatmul takes it, with the algorithm left open.
struct MatmulCall {
  cublasLtHandle_t handle;
  cublasLtMatmulDesc_t desc;
  cublasLtMatrixLayout_t la, lb, lc, ld;
  const void *a, *b, *c;
  void* d;
  void* workspace;
  std::size_t workspace_bytes;
  cudaStream_t stream;

  cublasStatus_t run(const LtPlan& plan, const cublasLtMatmulAlgo_t& algo, void* into) const {
    const float alpha = plan.alpha, beta = plan.beta;
    return cublaslt().matmul(handle, desc, &alpha, a, la, b, lb, &beta, c, lc, into, ld, &algo,
                             workspace, workspace_bytes, stream);
  }
};

// The index of the fastest of the heuristic's `results` on the call's own
// operands: each candidate once to warm it up, then three runs timed
// together by events; one that fails to run is skipped (0 where none ran).
// A product that reads D (beta != 0) writes its timed runs to scratch, so
// its call adds once.
std::size_t fastest(const MatmulCall& call, const LtPlan& plan,
                    std::span<const cublasLtMatmulHeuristicResult_t> results) {
  constexpr int kTimedRuns = 3;
  std::optional<CudaScratch> scratch;
  if (plan.beta != 0.0F) scratch.emplace(span_bytes(plan.d));
  void* timed_d = scratch ? scratch->data : call.d;
  Event start(Event::Timing::on), stop(Event::Timing::on);
  float best = std::numeric_limits<float>::infinity();
  std::size_t chosen = 0;
  for (std::size_t i = 0; i < results.size(); ++i) {
    const cublasLtMatmulHeuristicResult_t& r = results[i];
    if (r.state != CUBLAS_STATUS_SUCCESS || r.workspaceSize > call.workspace_bytes) continue;
    if (call.run(plan, r.algo, timed_d) != CUBLAS_STATUS_SUCCESS) continue;
    RIG_CUDA_CHECK(cudaEventRecord(start.native(), call.stream));
    bool ran = true;
    for (int rep = 0; rep < kTimedRuns && ran; ++rep) {
      ran = call.run(plan, r.algo, timed_d) == CUBLAS_STATUS_SUCCESS;
    }
    RIG_CUDA_CHECK(cudaEventRecord(stop.native(), call.stream));
    stop.synchronize();
    const float ms = stop.milliseconds_since(start);
    if (ran && ms < best) {
      best = ms;
      chosen = i;
    }
  }
  return chosen;
}

}  // namespace

void CublasLtGemm::set_autotune(bool on) {
  std::lock_guard<std::mutex> lock(mutex_);
  autotune_ = on;
}
bool CublasLtGemm::autotune() const {
  return autotune_;
}
std::size_t CublasLtGemm::tuned_plans() const {
  return tuned_plans_;
}
std::size_t CublasLtGemm::retuned_plans() const {
  return retuned_plans_;
}

CublasLtGemm::CublasLtGemm(int device)
    : device_(device), autotune_(rig::gemm_autotune_requested()) {
  DeviceGuard guard(device);
  check_cublas(cublaslt().create(&handle_), "cublasLtCreate");
  try {
    RIG_CUDA_CHECK(cudaMalloc(&workspace_, kWorkspaceBytes));
  } catch (...) {
    cublaslt().destroy(handle_);
    throw;
  }
}

CublasLtGemm::~CublasLtGemm() {
  DeviceGuard guard(device_);
  // The workspace may still be in use by queued products: wait for the device.
  cudaDeviceSynchronize();
  cudaFree(workspace_);
  cublaslt().destroy(handle_);
}

void CublasLtGemm::run(const LtPlan& plan, const void* a, const void* b, const void* c, void* d,
                       void* bias, void* aux, cudaStream_t stream) {
  DeviceGuard guard(device_);
  // An empty batch computes nothing (plans give a batch no bias gradient to zero).
  if (plan.batch_count() == 0) return;
  if (plan.m == 0 || plan.n == 0) {
    if (plan.bias_role == BiasRole::bias_grad && plan.bias_length > 0) {
      RIG_CUDA_CHECK(cudaMemsetAsync(
          bias, 0, static_cast<std::size_t>(plan.bias_length) * size_of(plan.bias_type), stream));
    }
    return;
  }
  const std::string context = plan.describe();
  MatmulDesc desc;
  const cublasComputeType_t compute =
      plan.compute == GemmCompute::tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
  check_cublas(cublaslt().desc_create(&desc.desc, compute, data_type(plan.scale_type)),
               "cublasLtMatmulDescCreate", context);
  const cublasOperation_t transa = plan.transa ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t transb = plan.transb ? CUBLAS_OP_T : CUBLAS_OP_N;
  set(desc.desc, CUBLASLT_MATMUL_DESC_TRANSA, transa, "CUBLASLT_MATMUL_DESC_TRANSA", context);
  set(desc.desc, CUBLASLT_MATMUL_DESC_TRANSB, transb, "CUBLASLT_MATMUL_DESC_TRANSB", context);
  const auto epilogue = static_cast<cublasLtEpilogue_t>(plan.epilogue);
  set(desc.desc, CUBLASLT_MATMUL_DESC_EPILOGUE, epilogue, "CUBLASLT_MATMUL_DESC_EPILOGUE", context);
  // The erf GELU's backward leaves its bias gradient to the own kernel too.
  const bool lt_bias = plan.bias_role != BiasRole::none && !plan.own_bias_grad;
  if (lt_bias) {
    set(desc.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, bias, "CUBLASLT_MATMUL_DESC_BIAS_POINTER",
        context);
    const auto bias_type = static_cast<std::int32_t>(data_type(plan.bias_type));
    set(desc.desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, bias_type,
        "CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE", context);
  }
  // Own work reads or writes the aux buffer after the matmul; cuBLASLt only
  // where its epilogue does (DEFAULT / BIAS take no aux pointer).
  const bool lt_aux = plan.aux_role != AuxRole::none && plan.own_work == OwnWork::none;
  if (lt_aux) {
    set(desc.desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, aux,
        "CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER", context);
    const std::int64_t aux_ld = plan.aux_ld;
    set(desc.desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, aux_ld,
        "CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD", context);
    if (plan.aux_role == AuxRole::write_gelu_input || plan.aux_role == AuxRole::read_gelu_input) {
      const auto aux_type = static_cast<std::int32_t>(data_type(plan.aux_type));
      set(desc.desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_DATA_TYPE, aux_type,
          "CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_DATA_TYPE", context);
    }
  }
  Layout la, lb, lc, ld;
  make_layout(la, plan.a, context);
  make_layout(lb, plan.b, context);
  make_layout(lc, plan.c, context);
  make_layout(ld, plan.d, context);
  const MatmulCall call{handle_, desc.desc, la.layout, lb.layout,  lc.layout,       ld.layout, a,
                        b,       c,         d,         workspace_, kWorkspaceBytes, stream};

  const std::string key = context + " align " + std::to_string(alignment(a)) + " " +
                          std::to_string(alignment(b)) + " " + std::to_string(alignment(c)) + " " +
                          std::to_string(alignment(d)) + " " + std::to_string(alignment(bias)) +
                          " " + std::to_string(alignment(aux));
  cublasLtMatmulAlgo_t algo{};
  {
    std::lock_guard<std::mutex> lock(mutex_);
    const auto found = algorithms_.find(key);
    if (found != algorithms_.end()) {
      algo = found->second;
    } else {
      Preference preference;
      check_cublas(cublaslt().preference_create(&preference.preference),
                   "cublasLtMatmulPreferenceCreate", context);
      const std::uint64_t workspace_bytes = kWorkspaceBytes;
      check_cublas(cublaslt().preference_set_attribute(preference.preference,
                                                       CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                       &workspace_bytes, sizeof(workspace_bytes)),
                   "cublasLtMatmulPreferenceSetAttribute", context);
      // Unless told, the heuristic takes every operand to be 256-byte aligned,
      // and may pick an algorithm that fails on a view at an odd offset (a
      // parameter after one of odd size in the flat buffer, a column slice).
      const std::pair<cublasLtMatmulPreferenceAttributes_t, const void*> operands[] = {
          {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, a},
          {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, b},
          {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, c},
          {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, d}};
      for (const auto& [attribute, pointer] : operands) {
        const std::uint32_t bytes = alignment(pointer);
        check_cublas(cublaslt().preference_set_attribute(preference.preference, attribute, &bytes,
                                                         sizeof(bytes)),
                     "cublasLtMatmulPreferenceSetAttribute(MIN_ALIGNMENT)", context);
      }
      const bool tune = autotune_ && tunable(plan);
      std::array<cublasLtMatmulHeuristicResult_t, kAutotuneCandidates> results{};
      int found_count = 0;
      ++heuristic_queries_;
      check_cublas(cublaslt().algo_get_heuristic(handle_, desc.desc, la.layout, lb.layout,
                                                 lc.layout, ld.layout, preference.preference,
                                                 tune ? kAutotuneCandidates : 1, results.data(),
                                                 &found_count),
                   "cublasLtMatmulAlgoGetHeuristic", context);
      if (found_count == 0) {
        throw CublasLtError(CUBLAS_STATUS_NOT_SUPPORTED,
                            "cublasLtMatmulAlgoGetHeuristic found no algorithm for " + context);
      }
      std::size_t chosen = 0;
      if (tune && found_count > 1) {
        chosen =
            fastest(call, plan, std::span(results.data(), static_cast<std::size_t>(found_count)));
        ++tuned_plans_;
        if (chosen != 0) ++retuned_plans_;
      }
      algo = results[chosen].algo;
      algorithms_.emplace(key, algo);
    }
  }
  check_cublas(call.run(plan, algo, d), "cublasLtMatmul", context);
}

}  // namespace rig::cuda
