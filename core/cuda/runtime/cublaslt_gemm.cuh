// Executes GEMM plans (cuda/gemm/gemm_plan.hpp) with cublasLtMatmul: one
// cuBLASLt handle, a 32 MiB workspace and the chosen algorithm per plan: the
// heuristic's first, or with autotuning (RIG_GEMM_AUTOTUNE=1, as PyTorch's
// TunableOp) the fastest of its first kAutotuneCandidates, timed on the
// plan's first call.
//
// Errors are exceptions (CublasLtError, CudaError): code that calls this from
// the back end's extern "C" entry points (backend_entry.cu) must catch them
// there, as it does for CudaError; no exception may cross that ABI.
#pragma once

#include <cstddef>
#include <mutex>
#include <stdexcept>
#include <string>
#include <unordered_map>

#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include "cuda/gemm/gemm_plan.hpp"

namespace rig::cuda {

// A cuBLAS status other than CUBLAS_STATUS_SUCCESS, naming the call, the
// status and (where there is one) the plan.
class CublasLtError : public std::runtime_error {
 public:
  CublasLtError(cublasStatus_t status, const std::string& what)
      : std::runtime_error(what), status_(status) {}
  cublasStatus_t status() const { return status_; }

 private:
  cublasStatus_t status_;
};

// Throws CublasLtError naming `call`, the status and `context` unless `status` is success.
void check_cublas(cublasStatus_t status, const char* call, const std::string& context = "");

// cuBLASLt products on one device. Not thread-safe for concurrent run() calls
// sharing the workspace on different streams: use one CublasLtGemm per stream
// (the workspace is the only state a call writes on the device).
class CublasLtGemm {
 public:
  static constexpr std::size_t kWorkspaceBytes = std::size_t{32} << 20U;
  static constexpr int kAutotuneCandidates = 8;

  // Autotuning is on where RIG_GEMM_AUTOTUNE is 1 (rig::gemm_autotune_requested).
  explicit CublasLtGemm(int device);
  ~CublasLtGemm();
  CublasLtGemm(const CublasLtGemm&) = delete;
  CublasLtGemm& operator=(const CublasLtGemm&) = delete;

  // Queues D = alpha op(A) op(B) + beta C and the plan's epilogue on `stream`
  // (device pointers; a and b are cuBLASLt's A and B, i.e. rig's operands as
  // plan.a_is / plan.b_is say; c may equal d). `bias` is read (BIAS*) or
  // written (bias gradients), `aux` read or written as plan.aux_role says;
  // both may be null where the plan does not use them. The plan's own work
  // (the erf GELU) is not done here: the caller runs it after. Products with
  // m or n == 0 queue nothing but zero a bias gradient. A batched plan
  // (plan.batch_count() != 1) sets CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT and
  // ..._STRIDED_BATCH_OFFSET on every layout (the offsets are in the plan's
  // describe(), so in the algorithm's cache key); a batch of 0 queues nothing.
  void run(const LtPlan& plan, const void* a, const void* b, const void* c, void* d, void* bias,
           void* aux, cudaStream_t stream);

  int device() const { return device_; }
  // How many algorithms the heuristic was asked for (one per distinct plan key).
  std::size_t heuristic_queries() const { return heuristic_queries_; }

  // Autotuning: a plan's first call (its cache miss) asks the heuristic for
  // up to kAutotuneCandidates algorithms and times each on the call's own
  // operands, keeping the fastest. It synchronises the stream once per plan.
  // A product that reads D (beta != 0: a gradient added into) writes its
  // timed runs to scratch, so it still adds once; plans whose epilogue
  // writes a second output (a bias gradient, an aux buffer) are not tuned.
  // Different processes may choose differently: the bits of a tuned run
  // are not reproducible across runs.
  void set_autotune(bool on);
  bool autotune() const;
  // Plans whose algorithm was chosen by timing (more than one candidate),
  // and how many of those chose another than the heuristic's first.
  std::size_t tuned_plans() const;
  std::size_t retuned_plans() const;

 private:
  int device_ = 0;
  cublasLtHandle_t handle_ = nullptr;
  void* workspace_ = nullptr;
  std::mutex mutex_;
  std::unordered_map<std::string, cublasLtMatmulAlgo_t> algorithms_;
  std::size_t heuristic_queries_ = 0;
  bool autotune_ = false;
  std::size_t tuned_plans_ = 0, retuned_plans_ = 0;
};

}  // namespace rig::cuda
