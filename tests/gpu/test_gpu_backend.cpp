// The CUDA back end on a GPU: the conformance tests of its entry points
// against the CPU back end (tests/unit/test_kernel_backend.cpp, there on the
// SIMT-emulated device) with backend::cuda_backend(0), the back end `device:
// cuda` trains with: device memory from the caching allocator, kernels on the
// device's stream, cuBLASLt and cuDNN. They skip where no GPU can be used.
#define RIG_KERNEL_BACKEND_ON_GPU 1
#include "../unit/test_kernel_backend.cpp"  // NOLINT(bugprone-suspicious-include)
