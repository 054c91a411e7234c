// The CUDA back end's kernels on the CPU: a KernelDevice whose memory is host
// memory and whose kernels run in the SIMT emulator (core/simt) with an H100's
// launch plans. `RIG_CUDA_EMULATOR=1` makes `device: cuda` use it, so the
// engine, the ops and every entry point of KernelBackend run their CUDA
// kernel sequences in tests on machines without a GPU. It is slow (one fiber
// per GPU thread): for tiny models and tests, never for training.
#pragma once

#include <memory>

#include "backend/backend.hpp"

namespace rig::cuda {

// The emulated back end of device cuda:`index`.
std::unique_ptr<backend::Backend> make_emulated_backend(int index);

}  // namespace rig::cuda
