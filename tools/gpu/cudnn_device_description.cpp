// rig-cudnn-device-description: serialises cuDNN's description of a real GPU
// (CUDNN_BACKEND_DEVICEPROP_DESCRIPTOR as JSON), so that cuDNN graphs can be
// planned and checked for support on machines without that GPU.
//
// Usage: rig-cudnn-device-description [DEVICE] > description.json
// Prints the cuDNN and CUDA versions it ran with on stderr. Exit codes: 0 done,
// 2 bad arguments, 1 no device or cuDNN refused.
#include <cuda_runtime.h>
#include <cudnn_graph.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

namespace {

[[noreturn]] void fail(const char* what, cudnnStatus_t status) {
  char detail[1024] = {};
  cudnnGetLastErrorString(detail, sizeof detail);
  std::fprintf(stderr, "rig-cudnn-device-description: %s failed: %s (%s)\n", what,
               cudnnGetErrorString(status), detail);
  std::exit(1);
}

void check(cudnnStatus_t status, const char* what) {
  if (status != CUDNN_STATUS_SUCCESS) fail(what, status);
}

// A backend descriptor that is destroyed with its scope.
class Descriptor {
 public:
  explicit Descriptor(cudnnBackendDescriptorType_t type) {
    check(cudnnBackendCreateDescriptor(type, &handle_), "cudnnBackendCreateDescriptor");
  }
  ~Descriptor() { cudnnBackendDestroyDescriptor(handle_); }
  Descriptor(const Descriptor&) = delete;
  Descriptor& operator=(const Descriptor&) = delete;
  cudnnBackendDescriptor_t get() const { return handle_; }

 private:
  cudnnBackendDescriptor_t handle_ = nullptr;
};

}  // namespace

int main(int argc, char** argv) {
  if (argc > 2) {
    std::fprintf(stderr, "usage: rig-cudnn-device-description [DEVICE] > description.json\n");
    return 2;
  }
  char* end = nullptr;
  const long device = argc == 2 ? std::strtol(argv[1], &end, 10) : 0;
  if (argc == 2 && (end == argv[1] || *end != '\0' || device < 0)) {
    std::fprintf(stderr, "rig-cudnn-device-description: DEVICE must be a device number, got '%s'\n",
                 argv[1]);
    return 2;
  }
  if (cudaError_t e = cudaSetDevice(static_cast<int>(device)); e != cudaSuccess) {
    std::fprintf(stderr, "rig-cudnn-device-description: cudaSetDevice(%ld): %s\n", device,
                 cudaGetErrorString(e));
    return 1;
  }
  cudaDeviceProp properties{};
  cudaGetDeviceProperties(&properties, static_cast<int>(device));
  int runtime = 0;
  int driver = 0;
  cudaRuntimeGetVersion(&runtime);
  cudaDriverGetVersion(&driver);
  std::fprintf(
      stderr,
      "device %ld: %s, compute capability %d.%d, %d SMs, %zu bytes of memory, L2 %d bytes, "
      "shared memory %zu per block (opt-in) / %zu per SM, %d registers per SM, "
      "%d threads per SM; cuDNN %zu; CUDA runtime %d, driver %d\n",
      device, properties.name, properties.major, properties.minor, properties.multiProcessorCount,
      properties.totalGlobalMem, properties.l2CacheSize, properties.sharedMemPerBlockOptin,
      properties.sharedMemPerMultiprocessor, properties.regsPerMultiprocessor,
      properties.maxThreadsPerMultiProcessor, cudnnGetVersion(), runtime, driver);

  cudnnHandle_t handle = nullptr;
  check(cudnnCreate(&handle), "cudnnCreate");
  int exit_code = 0;
  {
    Descriptor description(CUDNN_BACKEND_DEVICEPROP_DESCRIPTOR);
    check(cudnnBackendSetAttribute(description.get(), CUDNN_ATTR_DEVICEPROP_HANDLE,
                                   CUDNN_TYPE_HANDLE, 1, &handle),
          "setting CUDNN_ATTR_DEVICEPROP_HANDLE");
    check(cudnnBackendFinalize(description.get()), "finalizing the device description");
    std::int64_t size = 0;
    check(cudnnBackendGetAttribute(description.get(), CUDNN_ATTR_DEVICEPROP_JSON_REPRESENTATION,
                                   CUDNN_TYPE_CHAR, 0, &size, nullptr),
          "reading the JSON size");
    std::vector<char> json(static_cast<std::size_t>(size) + 1, '\0');
    check(cudnnBackendGetAttribute(description.get(), CUDNN_ATTR_DEVICEPROP_JSON_REPRESENTATION,
                                   CUDNN_TYPE_CHAR, size, &size, json.data()),
          "reading the JSON");
    const std::string text(json.data());
    if (text.empty()) {
      std::fprintf(stderr, "rig-cudnn-device-description: cuDNN returned an empty description\n");
      exit_code = 1;
    } else {
      std::printf("%s\n", text.c_str());
    }
  }
  cudnnDestroy(handle);
  return exit_code;
}
