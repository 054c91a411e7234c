// The kernels whose results are compared with the CPU back end within
// tolerances: they call exp / log / tanh, whose last bits differ between
// libraries, or sum floats in another order than the CPU's SIMD lanes.
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
template void run<kernels::UnaryForward>(const kernels::UnaryForward&, cudaStream_t);
template void run<kernels::UnaryBackward>(const kernels::UnaryBackward&, cudaStream_t);
template void run<kernels::BiasActivation>(const kernels::BiasActivation&, cudaStream_t);
template void run<kernels::ActivationBackward>(const kernels::ActivationBackward&, cudaStream_t);
template void run<kernels::ColumnTotals>(const kernels::ColumnTotals&, cudaStream_t);
template void run<kernels::SumAxis>(const kernels::SumAxis&, cudaStream_t);
template void run<kernels::AttentionSoftmaxForward>(const kernels::AttentionSoftmaxForward&,
                                                    cudaStream_t);
template void run<kernels::AttentionSoftmaxBackward>(const kernels::AttentionSoftmaxBackward&,
                                                     cudaStream_t);

}  // namespace rig::cuda
