// Every kernel struct of core/cuda/kernels, once: X(Name) for each. The GPU's
// launchers (runtime/kernel_runs.cu*) and backend/kernel_device.hpp's run()
// overloads are generated from this list, so a new kernel is added here and
// nowhere else but its own header.
#pragma once

#include "cuda/kernels/accumulate.hpp"
#include "cuda/kernels/attention_softmax.hpp"
#include "cuda/kernels/batch_norm.hpp"
#include "cuda/kernels/checks.hpp"
#include "cuda/kernels/compare.hpp"
#include "cuda/kernels/copy.hpp"
#include "cuda/kernels/cross_entropy.hpp"
#include "cuda/kernels/dropout.hpp"
#include "cuda/kernels/dropout_mask.hpp"
#include "cuda/kernels/elementwise.hpp"
#include "cuda/kernels/index_add.hpp"
#include "cuda/kernels/index_value.hpp"
#include "cuda/kernels/indexing.hpp"
#include "cuda/kernels/larc.hpp"
#include "cuda/kernels/layer_norm.hpp"
#include "cuda/kernels/novograd.hpp"
#include "cuda/kernels/optimizer.hpp"
#include "cuda/kernels/padded_loss.hpp"
#include "cuda/kernels/pool.hpp"
#include "cuda/kernels/reduce.hpp"
#include "cuda/kernels/selection.hpp"
#include "cuda/kernels/softmax.hpp"
#include "cuda/kernels/unscale.hpp"

// clang-format off
#define RIG_CUDA_KERNELS(X) \
  X(SoftmaxForward) X(SoftmaxBackward) \
  X(LayerNormForward) X(LayerNormBackwardDx) X(LayerNormBackwardParams) \
  X(CrossEntropyForward) X(CrossEntropyBackward) \
  X(AdamUpdateKernel) X(SgdUpdateKernel) X(NovogradUpdateKernel) \
  X(UnscalePartials) X(UnscaleFinish) \
  X(DropoutForward) X(DropoutBackward) \
  X(UnaryForward) X(UnaryBackward) X(BinaryKernel) X(BiasActivation) X(BiasReluDropoutStore) \
  X(ActivationBackward) \
  X(ColumnTotals) \
  X(CopyStrided) X(FillStrided) X(CopyContiguous) \
  X(SumPartials) X(SumFinish) X(SumAxis) X(MaxAxis) X(MaxAxisBackward) \
  X(IndexSelect) X(IndexAdd) X(Gather) X(GatherBackward) X(Select) \
  X(IndexAddRank) X(IndexAddScatter) X(IndexAddSegments) \
  X(ConcatRows) X(ExtractRows) X(ZeroRows) \
  X(Argmax) X(TopK) \
  X(AttentionSoftmaxForward) X(AttentionSoftmaxBackward) X(CompareKernel) X(AddStrided) \
  X(PaddedLossPartials) X(PaddedLossFinish) X(PaddedLossBackward) \
  X(IndexCheckPartials) X(IndexCheckFinish) X(IndexValueAt) X(GradStatsPartials) X(GradStatsFinish) \
  X(ClipByNorm) \
  X(DropoutMask) X(LarcPartials) X(LarcRatios) X(LarcScale) \
  X(MaxPool2dForward) X(MaxPool2dBackward) X(AvgPool2dForward) X(AvgPool2dBackward) \
  X(GlobalAvgPoolForward) X(GlobalAvgPoolBackward) \
  X(BatchNormStatsPartial) X(BatchNormStatsFinish) X(BatchNormPrepareChannels) X(BatchNormApply) \
  X(BatchNormGradPartial) X(BatchNormGradFinish) X(BatchNormBackwardDx) \
  X(BatchNormStatsPartialPacked) X(BatchNormGradPartialPacked)
// clang-format on
