// backend::cuda_backend(index): the back end of one visible GPU, made on
// first use and kept for the process's life. It is deliberately never
// destroyed: tensors in static storage may outlive any destructor order, and
// the CUDA runtime inside librig_cuda may already be torn down at exit.
#include <dlfcn.h>

#include <array>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <vector>

#include <fmt/format.h>

#include "backend/backend.hpp"
#include "cuda/backend_abi.hpp"
#include "cuda/emulated/emulated_device.hpp"

namespace rig::backend {

namespace {

std::unique_ptr<Backend> make_library_backend(int index) {
  // The device probe loaded librig_cuda already (RTLD_NOLOAD finds it by its soname).
  void* library = dlopen(RIG_CUDA_BACKEND_FILE, RTLD_NOW | RTLD_NOLOAD);
  if (library == nullptr) {
    throw std::invalid_argument(
        fmt::format("device cuda:{}: the CUDA back end ({}) is not loaded; choose the device with "
                    "`device: cuda` so that rig probes the GPU first",
                    index, RIG_CUDA_BACKEND_FILE));
  }
  auto make = reinterpret_cast<RigCudaMakeBackend>(dlsym(library, cuda::kBackendFactory));
  if (make == nullptr) {
    throw std::invalid_argument(fmt::format("device cuda:{}: {} has no {} (rebuild rig)", index,
                                            RIG_CUDA_BACKEND_FILE, cuda::kBackendFactory));
  }
  std::unique_ptr<Backend> backend;
  std::array<char, 1024> error{};
  if (make(cuda::kFactoryVersion, index, &backend, error.data(), error.size()) != 0) {
    throw std::invalid_argument(fmt::format("device cuda:{}: {}", index, error.data()));
  }
  return backend;
}

}  // namespace

Backend& cuda_backend(int index) {
  static std::mutex mutex;
  // Never destroyed (see the top of this file).
  static auto& backends = *new std::vector<std::unique_ptr<Backend>>();
  const std::lock_guard lock(mutex);
  if (index < 0) throw std::invalid_argument(fmt::format("device cuda:{}: bad index", index));
  if (backends.size() <= static_cast<std::size_t>(index)) {
    backends.resize(static_cast<std::size_t>(index) + 1);
  }
  auto& slot = backends[static_cast<std::size_t>(index)];
  if (!slot) {
    slot = cuda_emulator_requested()
               ? cuda::make_emulated_backend(index, cuda::EmulatedConvolutions::with_16bit,
                                             cuda::emulated_attention_requested(),
                                             cuda_emulator_host_only_requested()
                                                 ? cuda::EmulatedWork::host_only
                                                 : cuda::EmulatedWork::computed)
               : make_library_backend(index);
  }
  return *slot;
}

}  // namespace rig::backend
