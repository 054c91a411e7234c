#include "engine/gradient_norm.hpp"

#include "rig/ops.hpp"

namespace rig::engine {

void clip_gradients(ParameterStore& params, double norm, double max_norm) {
  if (!(norm > max_norm)) return;
  Tensor grads = params.grads();
  ops::scale_(grads, static_cast<float>(max_norm / (norm + 1e-6)));
}

}  // namespace rig::engine
