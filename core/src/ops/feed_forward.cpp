// relu_feed_forward: linear(linear(x, w1, b1, relu, dropout), w2, b2, none,
// {}, keep_scale), a Transformer's feed-forward block. On a back end whose
// products take a relu mask (gemm_relu_masks: cuBLASLt's DRELU and BGRADA
// epilogues), 16-bit layers with biases run as one op:
//   forward: h = relu(x W1^T + b1) (the product's epilogue), then one pass
//     drops h's elements in place and writes the mask of h > 0 (a bit per
//     element: Backend::relu_mask), y = keep_scale h W2^T + b2;
//   backward: dz = keep_scale (g W2) where the mask is set, else 0, by the
//     product itself (its DRELU epilogue), and db1 by the dW1 product's
//     (BGRADA): no pass over the hidden layer's gradient, which the two
//     linear layers spend reading g and h and writing dz (rows x hidden x 6
//     bytes in bf16).
// dz, dx, dW1, dW2 and db2 have the composed layers' bits (the mask is the
// stored h > 0, which is what their relu backward reads); db1 is summed by
// cuBLASLt, in its own order. Elsewhere (the CPU, f32, no bias, a scaled
// dropout, no gradient wanted) it is the two linear layers themselves.
#include <optional>

#include "ops/op_util.hpp"
#include "rig/autograd.hpp"
#include "rig/ops.hpp"

namespace rig::ops {

namespace {

using backend::GemmOperand;
using backend::GemmProduct;

// Bits per mask row: cuBLASLt wants a multiple of 128.
std::int64_t mask_ld_of(std::int64_t hidden) {
  return (hidden + 127) / 128 * 128;
}

// The 16-bit type the masked block runs in, where it applies.
std::optional<DType> masked_type(const Tensor& x, const Tensor& w1, const Tensor& b1,
                                 const Tensor& w2, const Tensor& b2, const OutputDropout& dropout) {
  if (!grad_mode_enabled() || !b1.defined() || !b2.defined()) return std::nullopt;
  if (!(x.requires_grad() || w1.requires_grad() || b1.requires_grad() || w2.requires_grad() ||
        b2.requires_grad())) {
    return std::nullopt;
  }
  const DType type = x.dtype();
  for (const Tensor* t : {&w1, &b1, &w2, &b2}) {
    if (t->dtype() != type || t->device() != x.device()) return std::nullopt;
  }
  backend::Backend& be = detail::backend_of(x);
  const MatmulPrecision precision = matmul_precision();
  const bool bf16 = type == DType::bf16 && precision == MatmulPrecision::bf16 &&
                    be.rounds_bf16_operands() && be.gemm_writes_bf16();
  const bool f16 = type == DType::f16 && precision == MatmulPrecision::f32 && be.f16_products();
  if ((!bf16 && !f16) || !be.gemm_relu_masks(type)) return std::nullopt;
  if (dropout.p > 0.0F && dropout.scaled) return std::nullopt;
  if (!(dropout.p >= 0.0F && dropout.p <= 1.0F)) return std::nullopt;  // linear refuses it
  if (w1.dim() != 2 || w2.dim() != 2 || x.dim() < 1) return std::nullopt;
  const std::int64_t in = w1.size(1), hidden = w1.size(0), out = w2.size(0);
  if (x.size(-1) != in || w2.size(1) != hidden || b1.shape() != Shape{hidden} ||
      b2.shape() != Shape{out}) {
    return std::nullopt;  // the composed layers say what is wrong
  }
  const std::int64_t rows = in > 0 ? x.numel() / in : 0;
  if (rows == 0 || in == 0 || out == 0 || hidden == 0 || hidden % 8 != 0) return std::nullopt;
  if (!b1.is_contiguous() || !b2.is_contiguous() || !be.gemm_adds_bias(b1.raw_data()) ||
      !be.gemm_adds_bias(b2.raw_data())) {
    return std::nullopt;
  }
  return type;
}

// A 16-bit operand of `type` (bf16 or f16) as the products take it.
GemmOperand operand(const Tensor& t, DType type, std::int64_t ld, bool trans) {
  GemmOperand o{nullptr, ld, trans};
  (type == DType::bf16 ? o.bf16 : o.f16) = t.data<std::uint16_t>();
  return o;
}

// C [m, n] = alpha op(A) op(B) + beta C, written to c (contiguous, of the
// 16-bit `type`).
GemmProduct product(std::int64_t m, std::int64_t n, std::int64_t k, float alpha, GemmOperand a,
                    GemmOperand b, float beta, Tensor& c, DType type) {
  GemmProduct p{m, n, k, alpha, a, b, beta};
  p.ldc = n;
  (type == DType::bf16 ? p.c_bf16 : p.c_f16) = c.data<std::uint16_t>();
  return p;
}

Tensor masked_feed_forward(DType type, const Tensor& x, const Tensor& w1, const Tensor& b1,
                           const Tensor& w2, const Tensor& b2, const OutputDropout& dropout,
                           float keep_scale) {
  const Tensor xc = x.detach().contiguous();
  const Tensor w1c = w1.detach().contiguous(), w2c = w2.detach().contiguous();
  const std::int64_t in = w1c.size(1), hidden = w1c.size(0), out = w2c.size(0);
  const std::int64_t rows = xc.numel() / in;
  const std::int64_t mask_ld = mask_ld_of(hidden);
  backend::Backend& be = detail::backend_of(xc);
  const MatmulPrecision precision = matmul_precision();

  // h = relu(x W1^T + b1), in the product's epilogue.
  Tensor h = detail::empty_on(xc, {rows, hidden}, type);
  GemmProduct first = product(rows, hidden, in, 1.0F, operand(xc, type, in, false),
                              operand(w1c, type, in, true), 0.0F, h, type);
  first.bias = b1.raw_data();
  first.relu = true;
  be.gemm(first, precision);
  // The dropout (unscaled: keep_scale is the next product's) and the mask.
  Tensor mask = detail::empty_on(xc, {rows * mask_ld / 8}, DType::u8);
  be.relu_mask(dropout.p > 0.0F ? &dropout.key : nullptr, dropout.p, type, h.raw_data(), rows,
               hidden, mask.data<std::uint8_t>(), mask_ld);
  // y = keep_scale h W2^T + b2.
  Shape out_shape = x.shape();
  out_shape.back() = out;
  Tensor y = detail::empty_on(xc, out_shape, type);
  GemmProduct second = product(rows, out, hidden, keep_scale, operand(h, type, hidden, false),
                               operand(w2c, type, hidden, true), 0.0F, y, type);
  second.bias = b2.raw_data();
  be.gemm(second, precision);

  return autograd::record(
      y, "relu_feed_forward", {x, w1, b1, w2, b2},
      [xc, w1c, w2c, h, mask, type, keep_scale, rows, in, hidden, out, mask_ld, precision,
       need_x = x.requires_grad(), need_w1 = w1.requires_grad(), need_b1 = b1.requires_grad(),
       need_w2 = w2.requires_grad(), need_b2 = b2.requires_grad()](const Tensor& g) {
        backend::Backend& be = detail::backend_of(g);
        const Tensor gc = (g.dtype() == type ? g : g.to(type)).contiguous();
        // db = the column sums of src [rows, cols] (rounded once), added into what db holds.
        const auto column_sums = [&](const Tensor& src, std::int64_t cols, Tensor& db, bool add) {
          be.activation_backward_16(Activation::none, type, src.raw_data(), DType::f32, nullptr,
                                    type, nullptr, type, db.raw_data(), rows, cols, 1.0F, add);
        };
        // db2 (added into b2's .grad where it has one).
        const Tensor db2_into = need_b2 ? autograd::accumulation_target(4) : Tensor();
        Tensor db2 = detail::gradient_buffer(need_b2, db2_into, gc, {out}, type);
        if (need_b2) column_sums(gc, out, db2, db2_into.defined());
        // dW2 [out, hidden] = keep_scale g^T h.
        const Tensor dw2_into = need_w2 ? autograd::accumulation_target(3) : Tensor();
        Tensor dw2 = detail::gradient_buffer(need_w2, dw2_into, gc, {out, hidden}, type);
        if (need_w2) {
          be.gemm(
              product(out, hidden, rows, keep_scale, operand(gc, type, out, true),
                      operand(h, type, hidden, false), dw2_into.defined() ? 1.0F : 0.0F, dw2, type),
              precision);
        }
        const bool need_dz = need_x || need_w1 || need_b1;
        if (!need_dz) return autograd::TensorList{Tensor(), Tensor(), Tensor(), dw2, db2};
        // dz [rows, hidden] = keep_scale g W2 where the mask is set (the DRELU epilogue).
        Tensor dz = detail::empty_on(gc, {rows, hidden}, type);
        GemmProduct to_dz = product(rows, hidden, out, keep_scale, operand(gc, type, out, false),
                                    operand(w2c, type, hidden, false), 0.0F, dz, type);
        to_dz.relu_mask = mask.data<std::uint8_t>();
        to_dz.relu_mask_ld = mask_ld;
        be.gemm(to_dz, precision);
        // dW1 [hidden, in] = dz^T x, with db1 (the row sums of dz^T) in its
        // epilogue, written to scratch and added where b1's .grad is one.
        const Tensor dw1_into = need_w1 ? autograd::accumulation_target(1) : Tensor();
        Tensor dw1 = detail::gradient_buffer(need_w1, dw1_into, gc, {hidden, in}, type);
        Tensor db1_into = need_b1 ? autograd::accumulation_target(2) : Tensor();
        Tensor db1;
        if (need_w1) {
          GemmProduct p =
              product(hidden, in, rows, 1.0F, operand(dz, type, hidden, true),
                      operand(xc, type, in, false), dw1_into.defined() ? 1.0F : 0.0F, dw1, type);
          if (need_b1) {
            db1 = detail::empty_on(gc, {hidden}, type);
            p.bias_grad = db1.raw_data();
          }
          be.gemm(p, precision);
          if (need_b1 && db1_into.defined()) {
            be.add_strided(db1_into.shape(), db1_into.raw_data(), db1_into.strides(),
                           db1_into.dtype(), db1.raw_data(), db1.strides(), db1.dtype());
            db1 = db1_into;
          }
        } else if (need_b1) {  // W1 frozen: db1 in a pass of its own
          db1 = detail::gradient_buffer(true, db1_into, gc, {hidden}, type);
          column_sums(dz, hidden, db1, db1_into.defined());
        }
        // dx [rows, in] = dz W1.
        const Tensor dx_into = need_x ? autograd::accumulation_target(0) : Tensor();
        Tensor dx = detail::gradient_buffer(need_x, dx_into, gc, xc.shape(), type);
        if (need_x) {
          be.gemm(product(rows, in, hidden, 1.0F, operand(dz, type, hidden, false),
                          operand(w1c, type, in, false), dx_into.defined() ? 1.0F : 0.0F, dx, type),
                  precision);
        }
        return autograd::TensorList{dx, dw1, db1, dw2, db2};
      });
}

}  // namespace

Tensor relu_feed_forward(const Tensor& x, const Tensor& w1, const Tensor& b1, const Tensor& w2,
                         const Tensor& b2, const OutputDropout& dropout, float keep_scale) {
  if (const std::optional<DType> type = masked_type(x, w1, b1, w2, b2, dropout)) {
    return masked_feed_forward(*type, x, w1, b1, w2, b2, dropout, keep_scale);
  }
  return linear(linear(x, w1, b1, Activation::relu, dropout), w2, b2, Activation::none, {},
                keep_scale);
}

}  // namespace rig::ops
