// What the chosen GPU can compute: a run's 16-bit types against the GPU's
// compute capability, checked before anything is built on it.
#pragma once

#include "config/resolved_config.hpp"
#include "engine/device_choice.hpp"
#include "engine/settings.hpp"

namespace rig::engine {

// bfloat16 (dtype bfloat16, mixed with mixed_dtype bfloat16, or
// matmul_precision bfloat16) needs compute capability 8.0 or newer: cuBLASLt's
// and cuDNN's bf16 kernels stop there (a T4 is 7.5). Throws UserError naming
// the key, the GPU and what to use instead (float16, as AMP on those GPUs).
// Nothing to check without a real GPU (the CPU, sim, the emulator).
void check_gpu_dtypes(const DeviceChoice& choice, const EngineSettings& settings,
                      const config::ResolvedConfig& config);

}  // namespace rig::engine
