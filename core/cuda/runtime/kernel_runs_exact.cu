// The kernels whose bits must equal the CPU back end's: optimizer updates,
// dropout and unscale share their per-element math with it (rig/math/), and
// this file is compiled with -fmad=false (core/cuda/CMakeLists.txt) so that
// nvcc does not contract a * b + c into one rounding where g++ rounds twice.
#include "cuda/runtime/kernel_runs.inl"

namespace rig::cuda {

template void run<kernels::AdamUpdateKernel>(const kernels::AdamUpdateKernel&, cudaStream_t);
template void run<kernels::SgdUpdateKernel>(const kernels::SgdUpdateKernel&, cudaStream_t);
template void run<kernels::UnscalePartials>(const kernels::UnscalePartials&, cudaStream_t);
template void run<kernels::UnscaleFinish>(const kernels::UnscaleFinish&, cudaStream_t);
template void run<kernels::DropoutForward>(const kernels::DropoutForward&, cudaStream_t);
template void run<kernels::DropoutBackward>(const kernels::DropoutBackward&, cudaStream_t);

}  // namespace rig::cuda
