// The emulated device's fused attention (KernelDevice::fused_attention_*),
// where it is asked for (RIG_CUDA_EMULATOR_FUSED_ATTENTION=1): the contract
// of cuDNN's on the GPU, on host memory, so that a 16-bit Transformer step on
// the emulator queues the GPU's kernel sequence around its attention (no
// [B, H, Tq, Tk] weights, key padding as lengths) and the ops' fused path
// runs without a GPU. Computed by the CPU back end's attention on f32 copies
// (accumulation in f32, the outputs rounded once, as cuDNN's). Dropout draws
// from its own Philox stream keyed by the call's dropout_seed (as cuDNN's
// draws other bits than the CPU's stream): the same mask in the forward and
// the backward of one seed. The backward recomputes the weights from q and k.
#pragma once

#include "backend/kernel_args.hpp"

namespace rig::cuda {

// Whether the emulated fused attention takes `a` (cuDNN's conditions:
// f16 / bf16, dropout_p in [0, 1), causal only with tq == tk).
bool emulated_attention_supported(const backend::FusedAttention& a);
void emulated_attention_forward(const backend::FusedAttention& a);
void emulated_attention_backward(const backend::FusedAttention& a);

}  // namespace rig::cuda
