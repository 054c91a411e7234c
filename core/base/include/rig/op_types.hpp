// Plain types that the op API (rig/ops.hpp) and the compute backends share:
// the fused activations, the precision of matrix products, and the
// hyperparameters of one fused optimizer update.
#pragma once

#include <cstdint>

#include "rig/dtype.hpp"

namespace rig {

enum class Activation { none, relu, gelu, tanh, sigmoid };

// How matrix products compute. f32: as given. bf16: both operands rounded to
// bfloat16 (nearest even) and the products accumulated in f32, as PyTorch's
// autocast computes a linear layer.
enum class MatmulPrecision { f32, bf16 };

// One fused Adam / AdamW / AMSGrad step (rig::ops::adam_update):
//   p *= shrink;  g = grad + coupled_decay * p;
//   m = beta1 m + (1 - beta1) g;  v = beta2 v + (1 - beta2) g^2;
//   d = v, or with AMSGrad d = max_exp_avg_sq = max(max_exp_avg_sq, v);
//   p -= step_size * m / (sqrt(d) * inv_bc2_sqrt + epsilon)
// with step_size = lr / (1 - beta1^t) and inv_bc2_sqrt = 1 / sqrt(1 - beta2^t).
struct AdamUpdate {
  float beta1 = 0.9F, beta2 = 0.999F, epsilon = 1e-8F;
  float step_size = 0.0F, inv_bc2_sqrt = 1.0F;
  float coupled_decay = 0.0F;  // torch.optim.Adam's weight_decay (L2 added to the gradient)
  float shrink = 1.0F;         // AdamW's 1 - lr * weight_decay
};

// Where an optimizer update and the gradient statistics read the gradients:
// the f32 master gradients, or under mixed precision the model's f16 / bf16
// gradients still multiplied by the loss scale. Each is widened to f32 and
// multiplied by `scale` (1 / the loss scale) before anything else, as
// ParameterStore::unscale_grads would have written it: the pass that reads
// the gradients unscales them, and nothing writes the f32 copy.
struct GradientSource {
  const void* data = nullptr;
  DType type = DType::f32;
  float scale = 1.0F;

  GradientSource() = default;
  // The f32 gradients as they are: the plain case, converted implicitly.
  GradientSource(const float* f32) : data(f32) {}  // NOLINT(google-explicit-constructor)
  GradientSource(const void* gradients, DType dtype, float multiplier)
      : data(gradients), type(dtype), scale(multiplier) {}
};

// Where an update also writes its new values rounded to the model's f16 /
// bf16 (ParameterStore::publish_values's copy, in the same pass); data null:
// nowhere.
struct PublishedValues {
  void* data = nullptr;
  DType type = DType::f32;
};

// One fused torch.optim.SGD step (dampening 0) over flat f32 buffers:
//   g = grad + weight_decay * p;  without momentum p -= lr * g; else
//   buf = first ? g : momentum * buf + g;  p -= lr * (nesterov ? g + momentum * buf : buf)
struct SgdUpdate {
  float learning_rate = 0.0F;
  float weight_decay = 0.0F;
  float momentum = 0.0F;
  bool nesterov = false;
  bool first = true;  // the momentum buffer starts as g
};

// One NovoGrad step (OpenSeq2Seq's): per parameter slice l,
//   n = sum(g^2) (f64, rounded to f32); ema_l = n while ema_l is 0, else b2 ema_l + c2 n
//   m = b1 m + (avg / sqrt(ema_l + eps)) g + avg wd p;  p -= lr m
// with c2 = 1 - b2 and avg = 1 - b1 under grad_averaging (else 1), both
// computed from the double hyperparameters by the caller.
struct NovogradUpdate {
  float learning_rate = 0.0F;
  float beta1 = 0.95F, beta2 = 0.98F, c2 = 0.02F, epsilon = 1e-8F, weight_decay = 0.0F;
  float avg = 1.0F;
};

// The global L2 norm and the largest |g| of a flat f32 gradient buffer (+inf
// for both when any gradient is inf or NaN), summed in f64 in fixed chunks:
// the same bits whatever the thread timing. loss: the step's loss, read in the
// same trip to the device (0 when none was given), and whether it is finite.
struct GradientStats {
  double norm = 0.0;
  double amax = 0.0;
  bool loss_finite = true;
  float loss = 0.0F;
};
// A device holds GradientStats records in i64 words (ops::gradient_stats_into).
inline constexpr std::int64_t kGradientStatsWords = 3;
static_assert(sizeof(GradientStats) == kGradientStatsWords * sizeof(std::int64_t));

// One parameter's elements [offset, offset + size) of the flat buffers.
struct FlatSlice {
  std::int64_t offset = 0;
  std::int64_t size = 0;
};

// LARC as OpenSeq2Seq's larc_params: per parameter, with v_norm = ||v||_2 and
// g_norm = ||g||_2 (f64),
//   clip:  g *= min(max(eta v_norm / (lr (g_norm + eps)), min_update), 1)
//   scale: g *= max(eta v_norm / (g_norm + eps), min_update)
// (a zero denominator in clip mode leaves g alone; the ratio is saturated to
// the f32 range).
struct LarcOptions {
  double eta = 0.0;
  bool clip = true;
  double min_update = 1e-7;
  double epsilon = 1e-7;
  double learning_rate = 0.0;
};

}  // namespace rig
