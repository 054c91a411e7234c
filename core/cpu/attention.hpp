// Fused scaled-dot-product attention over f32 q [B, H, Tq, D], k and v
// [B, H, Tk, D]: per (batch, head) the scores, masked softmax, dropout and
// weights x values run as one task on small in-cache GEMMs.
#pragma once

#include <array>
#include <cstdint>

#include "backend/kernel_args.hpp"

namespace rig::cpu {

using backend::AttentionShape;
using backend::HeadStrides;

// out = dropout(softmax(q k^T * scale, masked)) v; a query with no allowed
// key gets zeros. `probs` ([B, H, Tq, Tk] contiguous, before dropout) is
// written when not null: backward needs it.
void attention_forward(const AttentionShape& s, const float* q, const HeadStrides& qs,
                       const float* k, const HeadStrides& ks, const float* v, const HeadStrides& vs,
                       float* out, const HeadStrides& os, float* probs);

// dq, dk, dv (each may be null) from the upstream gradient dout.
void attention_backward(const AttentionShape& s, const float* q, const HeadStrides& qs,
                        const float* k, const HeadStrides& ks, const float* v,
                        const HeadStrides& vs, const float* probs, const float* dout,
                        const HeadStrides& dos, float* dq, const HeadStrides& dqs, float* dk,
                        const HeadStrides& dks, float* dv, const HeadStrides& dvs);

}  // namespace rig::cpu
