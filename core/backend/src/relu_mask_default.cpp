// Backend's default for a back end whose products take no relu mask
// (gemm_relu_masks false): the ops then keep a relu layer's output for its
// backward pass instead. A call anyway is a bug in the caller.
#include <stdexcept>

#include "backend/backend.hpp"

namespace rig::backend {

void Backend::relu_mask(const RandomKey*, float, DType, void*, std::int64_t, std::int64_t,
                        std::uint8_t*, std::int64_t) {
  throw std::logic_error("Backend::relu_mask called on a back end whose products take no mask");
}

}  // namespace rig::backend
