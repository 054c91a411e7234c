// The kernel census: with RIG_CUDA_CENSUS=FILE, the CUDA back end (on the GPU
// and on the emulator) counts what it queues on the device, per kernel and
// per operand types: launches, elements, an estimate of the bytes moved (each
// operand read once, each result written once; 0 where not estimated),
// cuBLASLt's and the convolutions' floating-point operations, and the
// device's own copies. On a GPU each line also has its device time: each
// piece of work runs between two timing events (KernelDevice::mark), so
// where the GPU waits for the host to queue the work, the wait is counted
// in. FILE is rewritten, whole, each time the host waits for the device (a
// read or a synchronize), so it holds the counts up to the last wait when
// the process ends. tools/kernel-census subtracts two runs to give one
// training step's census. It answers "which copies and casts does a bf16
// step still do" without a profiler, on any machine (the emulator's kernel
// sequence is the GPU's where both have the same libraries' paths), and on
// a GPU which of them take the time.
#pragma once

#include <memory>
#include <string>

#include "cuda/backend/kernel_device.hpp"

namespace rig::cuda {

// The census's file from RIG_CUDA_CENSUS; empty when the census is off.
std::string census_file_requested();

// `device` wrapped so that everything queued on it is counted into `file`;
// with `shapes` (rig::census_shapes_requested, RIG_CUDA_CENSUS_SHAPES=1) each
// product and convolution shape gets a line of its own (" [m 8000 n 512 k
// 2048]", " [256x64x56x56 -> 64 3x3/1]"), so a GPU's timed census says which
// shapes fall short.
std::unique_ptr<KernelDevice> with_census(std::unique_ptr<KernelDevice> device, std::string file,
                                          bool shapes = false);

}  // namespace rig::cuda
