// Fused scaled-dot-product attention over f32 q [B, H, Tq, D], k and v
// [B, H, Tk, D]: per (batch, head) the scores, masked softmax, dropout and
// weights x values run as one task on small in-cache GEMMs.
#pragma once

#include <array>
#include <cstdint>

namespace rig::cpu {

// Element strides of a [B, H, T, D] operand whose last axis is contiguous.
struct HeadStrides {
  std::int64_t batch = 0, head = 0, time = 0;
};

struct AttentionShape {
  std::int64_t b = 0, h = 0, tq = 0, tk = 0, d = 0;
  float scale = 1.0F;
  bool causal = false;  // query i sees keys j <= i + (tk - tq)
  // Keep-mask (1 = may attend), u8 with strides over [B, H, Tq, Tk] (0 on
  // broadcast axes); null for none.
  const std::uint8_t* mask = nullptr;
  std::array<std::int64_t, 4> mask_strides{};
  // Dropout on the weights: keep [B, H, Tq, Tk] contiguous (1 = kept) and
  // the factor for kept weights; null for no dropout.
  const std::uint8_t* keep = nullptr;
  float keep_scale = 1.0F;
  // Round the operands of every per-head product (q k^T, weights v and the
  // backward's four) to bfloat16 and accumulate in f32, as cpu::gemm does at
  // GemmPrecision::bf16; softmax, dropout and the outputs stay f32.
  bool bf16_products = false;
};

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
