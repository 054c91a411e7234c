// cuBLASLt, loaded with dlopen the first time a GEMM needs it. librig_cuda
// links no CUDA library but the static runtime, so that it loads (and rig
// falls back to the CPU with a reason) on a machine that has the driver but
// not the CUDA libraries; cuBLASLt is looked up only when a product runs.
#pragma once

#include <cublasLt.h>

namespace rig::cuda {

// The cuBLASLt functions rig calls, as pointers of their own types.
struct CublasLtApi {
  decltype(&cublasLtCreate) create;
  decltype(&cublasLtDestroy) destroy;
  decltype(&cublasLtGetVersion) get_version;
  decltype(&cublasLtGetStatusName) get_status_name;
  decltype(&cublasLtGetStatusString) get_status_string;
  decltype(&cublasLtMatmul) matmul;
  decltype(&cublasLtMatmulAlgoGetHeuristic) algo_get_heuristic;
  decltype(&cublasLtMatmulDescCreate) desc_create;
  decltype(&cublasLtMatmulDescDestroy) desc_destroy;
  decltype(&cublasLtMatmulDescSetAttribute) desc_set_attribute;
  decltype(&cublasLtMatmulPreferenceCreate) preference_create;
  decltype(&cublasLtMatmulPreferenceDestroy) preference_destroy;
  decltype(&cublasLtMatmulPreferenceSetAttribute) preference_set_attribute;
  decltype(&cublasLtMatrixLayoutCreate) layout_create;
  decltype(&cublasLtMatrixLayoutDestroy) layout_destroy;
  decltype(&cublasLtMatrixLayoutSetAttribute) layout_set_attribute;
};

// The library's name: the soname of the CUDA major version rig was built with.
const char* cublaslt_library_name();

// Loads cuBLASLt once per process (thread-safe) and returns its functions;
// throws std::runtime_error naming the library and dlerror()'s reason when it
// cannot be loaded or lacks a function.
const CublasLtApi& cublaslt();

}  // namespace rig::cuda
