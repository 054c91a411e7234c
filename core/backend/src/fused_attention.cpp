// Backend::fused_attention_*'s defaults: a back end without fused attention
// says so (fused_attention_supported is false) and the ops compose attention
// from attention_forward / attention_backward; a call anyway is a bug in the
// caller.
#include <stdexcept>

#include "backend/backend.hpp"

namespace rig::backend {

bool Backend::fused_attention_supported(const FusedAttention&) {
  return false;
}

void Backend::fused_attention_forward(const FusedAttention&) {
  throw std::logic_error(
      "Backend::fused_attention_forward called on a back end without fused attention");
}

void Backend::fused_attention_backward(const FusedAttention&) {
  throw std::logic_error(
      "Backend::fused_attention_backward called on a back end without fused attention");
}

}  // namespace rig::backend
