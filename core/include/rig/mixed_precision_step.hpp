// Mixed precision's work that an element-wise optimizer update folds into its
// own pass over the flat buffers (ops::adam_update, ops::sgd_update, and the
// optimizer plugins that take it: Optimizer::folds_mixed_precision).
#pragma once

#include "rig/tensor.hpp"

namespace rig {

// Without it a mixed-precision step makes three passes besides the update:
// the 16-bit gradients unscaled into the f32 masters, the statistics read
// from those, and the new f32 values rounded into the model's 16-bit copy.
// With it the update reads `grads16` (the model's f16 / bf16 gradients
// [n], still multiplied by the loss scale) times `unscale` instead of the f32
// gradients, and writes its new values rounded into `publish` (the model's f16
// / bf16 values [n]): the same bits, with the f32 master gradients left as
// they were. Either may be undefined: the f32 gradients are read, nothing is
// published.
struct MixedPrecisionStep {
  Tensor grads16;
  float unscale = 1.0F;
  Tensor publish;
};

}  // namespace rig
