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

// Whether the emulated device has 16-bit convolutions, as a GPU where cuDNN
// plans all three graphs of a shape (the default, so a bf16 step queues the
// GPU's kernels), or not, as a shape cuDNN refuses (the back end then runs
// the f32 convolutions on f32 copies).
enum class EmulatedConvolutions { with_16bit, f32_only };

// Whether the emulated device has fused attention (emulated_attention.hpp),
// as a GPU with cuDNN's, or not (the default: the back end composes attention
// from its kernels, with the CPU's dropout bits, so that the emulator's
// Transformer matches the CPU's). RIG_CUDA_EMULATOR_FUSED_ATTENTION=1 asks
// for it (emulated_attention_requested).
enum class EmulatedAttention { composed, fused };

// RIG_CUDA_EMULATOR_FUSED_ATTENTION: 1 fused, unset or 0 composed; anything
// else throws std::invalid_argument saying what is expected.
EmulatedAttention emulated_attention_requested();

// Whether the emulated device does the work it is given (the default) or
// only the host's part: with `host_only` every kernel is planned and
// counted but not run, products, convolutions, attention and device copies
// do nothing, reads from the device give zeros, and the index checks and
// gradient statistics report nothing wrong. A step then costs what
// the host spends queueing it (autograd, the ops, plans, allocation): the
// time below which a GPU step cannot go, without a GPU
// (RIG_CUDA_EMULATOR_HOST_ONLY=1, rig::cuda_emulator_host_only_requested,
// docs/gpu.md). Its numbers are meaningless.
enum class EmulatedWork { computed, host_only };

// Whether the emulated cuBLASLt plans every epilogue (the default) or, as an
// older GPU's may, finds no algorithm for those that read or write a relu
// mask or a bias gradient (its gemm throws, as the GPU's does then).
enum class EmulatedEpilogues { all, without_masks_and_bias_gradients };

// The emulated back end of device cuda:`index`.
std::unique_ptr<backend::Backend> make_emulated_backend(
    int index, EmulatedConvolutions convolutions = EmulatedConvolutions::with_16bit,
    EmulatedAttention attention = EmulatedAttention::composed,
    EmulatedWork work = EmulatedWork::computed,
    EmulatedEpilogues epilogues = EmulatedEpilogues::all);

}  // namespace rig::cuda
