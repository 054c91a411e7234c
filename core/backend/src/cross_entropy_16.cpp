// Backend::cross_entropy_*_16's defaults: a back end that does not read
// 16-bit logits says so (cross_entropy_reads_16bit() is false) and the ops
// give it f32 copies; a call anyway is a bug in the caller.
#include <stdexcept>

#include "backend/backend.hpp"

namespace rig::backend {

void Backend::cross_entropy_forward_16(DType, const void*, const std::int64_t*, std::int64_t,
                                       std::int64_t, float, float, float*, float*) {
  throw std::logic_error(
      "Backend::cross_entropy_forward_16 called on a back end that reads only f32 logits");
}

void Backend::cross_entropy_backward_16(DType, const void*, const std::int64_t*, const float*,
                                        const float*, float, const float*, std::int64_t,
                                        std::int64_t, float, float, void*) {
  throw std::logic_error(
      "Backend::cross_entropy_backward_16 called on a back end that reads only f32 logits");
}

}  // namespace rig::backend
