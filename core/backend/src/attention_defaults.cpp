// Backend's defaults for the attention a back end may lack: fused attention
// (fused_attention_supported false) and composed attention on 16-bit
// operands (composes_attention_16 false); the ops then compose attention
// from attention_forward / attention_backward on f32 copies. A call anyway
// is a bug in the caller.
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

bool Backend::composes_attention_16(DType) const {
  return false;
}

void Backend::attention_forward_16(const AttentionShape&, DType, const void*, const HeadStrides&,
                                   const void*, const HeadStrides&, const void*, const HeadStrides&,
                                   void*, const HeadStrides&, float*) {
  throw std::logic_error(
      "Backend::attention_forward_16 called on a back end without 16-bit composed attention");
}

void Backend::attention_backward_16(const AttentionShape&, DType, const void*, const HeadStrides&,
                                    const void*, const HeadStrides&, const void*,
                                    const HeadStrides&, const float*, const void*,
                                    const HeadStrides&, void*, const HeadStrides&, void*,
                                    const HeadStrides&, void*, const HeadStrides&) {
  throw std::logic_error(
      "Backend::attention_backward_16 called on a back end without 16-bit composed attention");
}

}  // namespace rig::backend
