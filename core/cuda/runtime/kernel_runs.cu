// The kernels whose results are compared with the CPU back end within
// tolerances (they call exp / log, whose last bits differ between libraries).
#include "cuda/runtime/kernel_runs.inl"

namespace rig::cuda {

template void run<kernels::SoftmaxForward>(const kernels::SoftmaxForward&, cudaStream_t);
template void run<kernels::SoftmaxBackward>(const kernels::SoftmaxBackward&, cudaStream_t);
template void run<kernels::LayerNormForward>(const kernels::LayerNormForward&, cudaStream_t);
template void run<kernels::LayerNormBackwardDx>(const kernels::LayerNormBackwardDx&, cudaStream_t);
template void run<kernels::LayerNormBackwardParams>(const kernels::LayerNormBackwardParams&,
                                                    cudaStream_t);
template void run<kernels::CrossEntropyForward>(const kernels::CrossEntropyForward&, cudaStream_t);
template void run<kernels::CrossEntropyBackward>(const kernels::CrossEntropyBackward&,
                                                 cudaStream_t);

}  // namespace rig::cuda
