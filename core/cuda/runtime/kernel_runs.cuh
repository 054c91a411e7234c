// Runs the kernel bodies of core/cuda/kernels on the GPU: each with the launch
// its plan() gives for the calling thread's current device. The bodies are
// compiled into librig_cuda once (kernel_runs.cu, and kernel_runs_exact.cu for
// the families whose bits must equal the CPU back end's); callers include no
// CUDA kernel code. Throws CudaError when the device refuses a launch.
#pragma once

#include <cuda_runtime_api.h>

#include "cuda/kernels/copy.hpp"
#include "cuda/kernels/cross_entropy.hpp"
#include "cuda/kernels/dropout.hpp"
#include "cuda/kernels/elementwise.hpp"
#include "cuda/kernels/indexing.hpp"
#include "cuda/kernels/layer_norm.hpp"
#include "cuda/kernels/novograd.hpp"
#include "cuda/kernels/optimizer.hpp"
#include "cuda/kernels/reduce.hpp"
#include "cuda/kernels/selection.hpp"
#include "cuda/kernels/softmax.hpp"
#include "cuda/kernels/unscale.hpp"

namespace rig::cuda {

template <class Kernel>
void run(const Kernel& kernel, cudaStream_t stream);

#define RIG_CUDA_DECLARE_RUN(K) \
  extern template void run<kernels::K>(const kernels::K&, cudaStream_t);
RIG_CUDA_DECLARE_RUN(SoftmaxForward)
RIG_CUDA_DECLARE_RUN(SoftmaxBackward)
RIG_CUDA_DECLARE_RUN(LayerNormForward)
RIG_CUDA_DECLARE_RUN(LayerNormBackwardDx)
RIG_CUDA_DECLARE_RUN(LayerNormBackwardParams)
RIG_CUDA_DECLARE_RUN(CrossEntropyForward)
RIG_CUDA_DECLARE_RUN(CrossEntropyBackward)
RIG_CUDA_DECLARE_RUN(AdamUpdateKernel)
RIG_CUDA_DECLARE_RUN(SgdUpdateKernel)
RIG_CUDA_DECLARE_RUN(NovogradUpdateKernel)
RIG_CUDA_DECLARE_RUN(UnscalePartials)
RIG_CUDA_DECLARE_RUN(UnscaleFinish)
RIG_CUDA_DECLARE_RUN(DropoutForward)
RIG_CUDA_DECLARE_RUN(DropoutBackward)
RIG_CUDA_DECLARE_RUN(UnaryForward)
RIG_CUDA_DECLARE_RUN(UnaryBackward)
RIG_CUDA_DECLARE_RUN(BinaryKernel)
RIG_CUDA_DECLARE_RUN(BiasActivation)
RIG_CUDA_DECLARE_RUN(ActivationBackward)
RIG_CUDA_DECLARE_RUN(ColumnTotals)
RIG_CUDA_DECLARE_RUN(CopyStrided)
RIG_CUDA_DECLARE_RUN(FillStrided)
RIG_CUDA_DECLARE_RUN(CopyContiguous)
RIG_CUDA_DECLARE_RUN(SumPartials)
RIG_CUDA_DECLARE_RUN(SumFinish)
RIG_CUDA_DECLARE_RUN(SumAxis)
RIG_CUDA_DECLARE_RUN(MaxAxis)
RIG_CUDA_DECLARE_RUN(MaxAxisBackward)
RIG_CUDA_DECLARE_RUN(IndexSelect)
RIG_CUDA_DECLARE_RUN(IndexAdd)
RIG_CUDA_DECLARE_RUN(Gather)
RIG_CUDA_DECLARE_RUN(GatherBackward)
RIG_CUDA_DECLARE_RUN(Select)
RIG_CUDA_DECLARE_RUN(ConcatRows)
RIG_CUDA_DECLARE_RUN(ExtractRows)
RIG_CUDA_DECLARE_RUN(ZeroRows)
RIG_CUDA_DECLARE_RUN(Argmax)
RIG_CUDA_DECLARE_RUN(TopK)
#undef RIG_CUDA_DECLARE_RUN

}  // namespace rig::cuda
