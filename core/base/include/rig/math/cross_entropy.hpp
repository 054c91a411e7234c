// The per-row math of cross-entropy with label smoothing, for every back end.
// The target distribution puts `on` at the label and `off` on every other
// class; a row's loss is -sum_j q_j log softmax(x)_j = lse - (on - off)
// x_label - off sum_j x_j, and the logits' gradient is (softmax(x) - q) s.
#pragma once

#include <cstdint>

#include "rig/hd.hpp"

namespace rig::math {

struct SmoothedTargets {
  float on = 1.0F, off = 0.0F;
};

// PyTorch's label_smoothing e over c classes: q = (1 - e) one_hot + e / c.
RIG_HD_INLINE SmoothedTargets torch_smoothing(float e, std::int64_t classes) {
  const float off = e / static_cast<float>(classes);
  return SmoothedTargets{1.0F - e + off, off};
}

// OpenSeq2Seq's (and tensor2tensor's): confidence 1 - e at the label and
// (1 - confidence) / (c - 1) on the others, the targets of its padded
// cross-entropy; in double, then rounded, as TF mixes Python floats into f32.
RIG_HD_INLINE SmoothedTargets openseq2seq_smoothing(float e, std::int64_t classes) {
  const double confidence = 1.0 - static_cast<double>(e);
  const double off = classes > 1 ? (1.0 - confidence) / static_cast<double>(classes - 1) : 0.0;
  return SmoothedTargets{static_cast<float>(confidence), static_cast<float>(off)};
}

// A row's loss from its log-sum-exp, its label's logit and the sum of its logits.
RIG_HD_INLINE float smoothed_row_loss(float lse, float x_label, float sum_x, SmoothedTargets q) {
  return lse - (q.on - q.off) * x_label - (q.off != 0.0F ? q.off * sum_x : 0.0F);
}

// The gradient of logit j: (p_j - off) s everywhere, minus (on - off) s at the
// label; p_j = exp(x_j - lse) comes from the caller's exp.
template <class F>
RIG_HD_INLINE F smoothed_grad(F p, float off, float s) {
  return (p - off) * s;
}
RIG_HD_INLINE float smoothed_label_correction(SmoothedTargets q, float s) {
  return (q.on - q.off) * s;
}

}  // namespace rig::math
