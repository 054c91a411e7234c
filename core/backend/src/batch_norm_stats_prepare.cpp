// Backend::batch_norm_stats_prepare's default: the statistics, then the
// per-channel coefficients from them, as two calls.
#include "backend/backend.hpp"

namespace rig::backend {

void Backend::batch_norm_stats_prepare(const BatchNormShape& s, DType type, const void* x,
                                       float* var, const BatchNormPrepare& args) {
  if (type == DType::f32) {
    batch_norm_stats(s, static_cast<const float*>(x), args.mean, var);
  } else {
    batch_norm_stats_16(s, type, x, args.mean, var);
  }
  BatchNormPrepare with_var = args;
  with_var.var = var;
  batch_norm_prepare(with_var);
}

}  // namespace rig::backend
