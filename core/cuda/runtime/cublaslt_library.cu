#include "cuda/runtime/cublaslt_library.cuh"

#include <dlfcn.h>

#include <stdexcept>
#include <string>

#define RIG_STRINGIFY_VALUE(x) #x
#define RIG_STRINGIFY(x) RIG_STRINGIFY_VALUE(x)

namespace rig::cuda {

namespace {

template <class Fn>
void resolve(void* library, const char* symbol, Fn& out) {
  void* address = dlsym(library, symbol);
  if (address == nullptr) {
    throw std::runtime_error(std::string(cublaslt_library_name()) + " has no " + symbol +
                             " (a cuBLASLt older than the CUDA " RIG_STRINGIFY(
                                 CUDART_VERSION) " that rig was built with?)");
  }
  out = reinterpret_cast<Fn>(address);
}

CublasLtApi load() {
  // Kept for the process's life: cuBLASLt handles may outlive any scope here.
  // By name (LD_LIBRARY_PATH, ld.so.conf), then where NVIDIA's runfile puts it
  // without an ld.so.conf entry.
  void* library = dlopen(cublaslt_library_name(), RTLD_NOW | RTLD_LOCAL);
  if (library == nullptr) {
    const std::string in_cuda = std::string("/usr/local/cuda/lib64/") + cublaslt_library_name();
    library = dlopen(in_cuda.c_str(), RTLD_NOW | RTLD_LOCAL);
  }
  if (library == nullptr) {
    const char* reason = dlerror();
    throw std::runtime_error(std::string("cannot load cuBLASLt (") + cublaslt_library_name() +
                             "): " + (reason != nullptr ? reason : "unknown reason") +
                             "; install the CUDA toolkit's cuBLAS or add its folder to "
                             "LD_LIBRARY_PATH");
  }
  CublasLtApi api{};
  resolve(library, "cublasLtCreate", api.create);
  resolve(library, "cublasLtDestroy", api.destroy);
  resolve(library, "cublasLtGetVersion", api.get_version);
  resolve(library, "cublasLtGetStatusName", api.get_status_name);
  resolve(library, "cublasLtGetStatusString", api.get_status_string);
  resolve(library, "cublasLtMatmul", api.matmul);
  resolve(library, "cublasLtMatmulAlgoGetHeuristic", api.algo_get_heuristic);
  resolve(library, "cublasLtMatmulDescCreate", api.desc_create);
  resolve(library, "cublasLtMatmulDescDestroy", api.desc_destroy);
  resolve(library, "cublasLtMatmulDescSetAttribute", api.desc_set_attribute);
  resolve(library, "cublasLtMatmulPreferenceCreate", api.preference_create);
  resolve(library, "cublasLtMatmulPreferenceDestroy", api.preference_destroy);
  resolve(library, "cublasLtMatmulPreferenceSetAttribute", api.preference_set_attribute);
  resolve(library, "cublasLtMatrixLayoutCreate", api.layout_create);
  resolve(library, "cublasLtMatrixLayoutDestroy", api.layout_destroy);
  resolve(library, "cublasLtMatrixLayoutSetAttribute", api.layout_set_attribute);
  return api;
}

}  // namespace

const char* cublaslt_library_name() {
  return "libcublasLt.so." RIG_STRINGIFY(CUBLAS_VER_MAJOR);
}

const CublasLtApi& cublaslt() {
  static const CublasLtApi api = load();
  return api;
}

}  // namespace rig::cuda
