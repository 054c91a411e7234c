// The kernels whose bits must equal the CPU back end's: optimizer updates,
// dropout and unscale share their per-element math with it (rig/math/);
// copies, casts, indexing, selection and f64 sums have no rounding to differ
// in. The file is compiled with -fmad=false (core/cuda/CMakeLists.txt) so
// that nvcc does not contract a * b + c into one rounding where g++ rounds twice.
#include "cuda/runtime/kernel_runs.inl"

namespace rig::cuda {

template void run<kernels::AdamUpdateKernel>(const kernels::AdamUpdateKernel&, cudaStream_t);
template void run<kernels::SgdUpdateKernel>(const kernels::SgdUpdateKernel&, cudaStream_t);
template void run<kernels::NovogradUpdateKernel>(const kernels::NovogradUpdateKernel&,
                                                 cudaStream_t);
template void run<kernels::UnscalePartials>(const kernels::UnscalePartials&, cudaStream_t);
template void run<kernels::UnscaleFinish>(const kernels::UnscaleFinish&, cudaStream_t);
template void run<kernels::DropoutForward>(const kernels::DropoutForward&, cudaStream_t);
template void run<kernels::DropoutBackward>(const kernels::DropoutBackward&, cudaStream_t);
template void run<kernels::BiasReluDropoutStore>(const kernels::BiasReluDropoutStore&,
                                                 cudaStream_t);
template void run<kernels::BinaryKernel>(const kernels::BinaryKernel&, cudaStream_t);
template void run<kernels::CopyStrided>(const kernels::CopyStrided&, cudaStream_t);
template void run<kernels::FillStrided>(const kernels::FillStrided&, cudaStream_t);
template void run<kernels::CopyContiguous>(const kernels::CopyContiguous&, cudaStream_t);
template void run<kernels::SumPartials>(const kernels::SumPartials&, cudaStream_t);
template void run<kernels::SumFinish>(const kernels::SumFinish&, cudaStream_t);
template void run<kernels::MaxAxis>(const kernels::MaxAxis&, cudaStream_t);
template void run<kernels::MaxAxisBackward>(const kernels::MaxAxisBackward&, cudaStream_t);
template void run<kernels::IndexSelect>(const kernels::IndexSelect&, cudaStream_t);
template void run<kernels::IndexAdd>(const kernels::IndexAdd&, cudaStream_t);
template void run<kernels::IndexAddRank>(const kernels::IndexAddRank&, cudaStream_t);
template void run<kernels::IndexAddScatter>(const kernels::IndexAddScatter&, cudaStream_t);
template void run<kernels::IndexAddSegments>(const kernels::IndexAddSegments&, cudaStream_t);
template void run<kernels::Gather>(const kernels::Gather&, cudaStream_t);
template void run<kernels::GatherBackward>(const kernels::GatherBackward&, cudaStream_t);
template void run<kernels::Select>(const kernels::Select&, cudaStream_t);
template void run<kernels::ConcatRows>(const kernels::ConcatRows&, cudaStream_t);
template void run<kernels::ExtractRows>(const kernels::ExtractRows&, cudaStream_t);
template void run<kernels::ZeroRows>(const kernels::ZeroRows&, cudaStream_t);
template void run<kernels::Argmax>(const kernels::Argmax&, cudaStream_t);
template void run<kernels::TopK>(const kernels::TopK&, cudaStream_t);
template void run<kernels::CompareKernel>(const kernels::CompareKernel&, cudaStream_t);
template void run<kernels::AddStrided>(const kernels::AddStrided&, cudaStream_t);
template void run<kernels::PaddedLossPartials>(const kernels::PaddedLossPartials&, cudaStream_t);
template void run<kernels::PaddedLossFinish>(const kernels::PaddedLossFinish&, cudaStream_t);
template void run<kernels::PaddedLossBackward>(const kernels::PaddedLossBackward&, cudaStream_t);
template void run<kernels::IndexCheckPartials>(const kernels::IndexCheckPartials&, cudaStream_t);
template void run<kernels::IndexCheckFinish>(const kernels::IndexCheckFinish&, cudaStream_t);
template void run<kernels::IndexValueAt>(const kernels::IndexValueAt&, cudaStream_t);
template void run<kernels::GradStatsPartials>(const kernels::GradStatsPartials&, cudaStream_t);
template void run<kernels::GradStatsFinish>(const kernels::GradStatsFinish&, cudaStream_t);
template void run<kernels::ClipByNorm>(const kernels::ClipByNorm&, cudaStream_t);
template void run<kernels::DropoutMask>(const kernels::DropoutMask&, cudaStream_t);
template void run<kernels::LarcPartials>(const kernels::LarcPartials&, cudaStream_t);
template void run<kernels::LarcRatios>(const kernels::LarcRatios&, cudaStream_t);
template void run<kernels::LarcScale>(const kernels::LarcScale&, cudaStream_t);
template void run<kernels::MaxPool2dForward>(const kernels::MaxPool2dForward&, cudaStream_t);
template void run<kernels::MaxPool2dBackward>(const kernels::MaxPool2dBackward&, cudaStream_t);
template void run<kernels::AvgPool2dForward>(const kernels::AvgPool2dForward&, cudaStream_t);
template void run<kernels::AvgPool2dBackward>(const kernels::AvgPool2dBackward&, cudaStream_t);
template void run<kernels::GlobalAvgPoolForward>(const kernels::GlobalAvgPoolForward&,
                                                 cudaStream_t);
template void run<kernels::GlobalAvgPoolBackward>(const kernels::GlobalAvgPoolBackward&,
                                                  cudaStream_t);
template void run<kernels::BatchNormStatsPartial>(const kernels::BatchNormStatsPartial&,
                                                  cudaStream_t);
template void run<kernels::BatchNormStatsFinish>(const kernels::BatchNormStatsFinish&,
                                                 cudaStream_t);
template void run<kernels::BatchNormPrepareChannels>(const kernels::BatchNormPrepareChannels&,
                                                     cudaStream_t);
template void run<kernels::BatchNormApply>(const kernels::BatchNormApply&, cudaStream_t);
template void run<kernels::BatchNormGradPartial>(const kernels::BatchNormGradPartial&,
                                                 cudaStream_t);
template void run<kernels::BatchNormGradFinish>(const kernels::BatchNormGradFinish&, cudaStream_t);
template void run<kernels::BatchNormBackwardDx>(const kernels::BatchNormBackwardDx&, cudaStream_t);
template void run<kernels::BatchNormStatsPartialPacked>(const kernels::BatchNormStatsPartialPacked&,
                                                        cudaStream_t);
template void run<kernels::BatchNormGradPartialPacked>(const kernels::BatchNormGradPartialPacked&,
                                                       cudaStream_t);

}  // namespace rig::cuda
