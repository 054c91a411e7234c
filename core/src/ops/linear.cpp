// linear: activation(x W^T + b) as one GEMM (W [out, in] read transposed by
// BLAS, no copy) and one fused bias + activation pass. Backward fuses the
// activation derivative with the bias gradient, then two GEMMs give dx and dW.
// bf16 x and W at bf16 matmul precision go to the products as they are (y
// and dx are computed in f32 and rounded once, by the product itself where
// the back end can); other f16/bf16 inputs are computed in f32 and the
// result cast back to x's dtype.
// With an output dropout (after relu) the dropout runs in place on y, and y
// is all backward keeps: relu' times the mask is (y > 0) * scale. On a back
// end that reads 16-bit storage, a bf16 layer's bias, relu, dropout and
// rounding are one pass over the f32 product, and the bf16 y is kept.
// At bf16 matmul precision, on a backend that rounds operands ahead of its
// products (the CPU), x and W are rounded once, used by the forward product
// and kept for backward (x in bf16: half its f32 size). f16 x and W at f32
// precision go to a back end's f16 products where it has them
// (linear_f16.cpp). A 16-bit gradient that x or W already has
// (autograd::accumulation_target: a residual stream's, W's .grad) takes dx
// or dW added in f32 and rounded once, by the product (beta 1) where it
// writes 16 bits, else in the pass that would have cast the f32 result; on
// a back end that reads 16-bit storage an f32 one takes them added by the
// product (beta 1).
#include <stdexcept>

#include <fmt/format.h>

#include "ops/linear_f16.hpp"
#include "ops/op_util.hpp"
#include "rig/autograd.hpp"
#include "rig/ops.hpp"

namespace rig::ops {

namespace {

using backend::GemmOperand;
using backend::GemmProduct;

Tensor linear_impl(const Tensor& x, const Tensor& weight, const Tensor& bias, Activation activation,
                   const OutputDropout& dropout, float input_scale) {
  detail::require_floating("linear", x, "x");
  detail::require_floating("linear", weight, "weight");
  if (bias.defined()) detail::require_floating("linear", bias, "bias");
  detail::require_same_device("linear", {&x, &weight, &bias});
  if (weight.dim() != 2 || x.dim() < 1) {
    throw std::invalid_argument(
        fmt::format("linear: x {} and weight {}: weight must be [out, in] and x [..., in]",
                    to_string(x.shape()), to_string(weight.shape())));
  }
  const std::int64_t in = weight.size(1);
  const std::int64_t out_features = weight.size(0);
  if (x.size(-1) != in) {
    throw std::invalid_argument(
        fmt::format("linear: x {} and weight {}: in_features {} and {} differ",
                    to_string(x.shape()), to_string(weight.shape()), x.size(-1), in));
  }
  if (bias.defined() && bias.shape() != Shape{out_features}) {
    throw std::invalid_argument(fmt::format("linear: weight {} and bias {}: bias must be [{}]",
                                            to_string(weight.shape()), to_string(bias.shape()),
                                            out_features));
  }
  if (!(dropout.p >= 0.0F && dropout.p <= 1.0F)) {
    throw std::invalid_argument(
        fmt::format("linear: output dropout p = {} is not in [0, 1]", dropout.p));
  }
  if (dropout.p > 0.0F && activation != Activation::relu) {
    throw std::invalid_argument(
        "linear: output dropout needs activation relu (its backward reads the dropped output); "
        "apply ops::dropout after other activations");
  }
  const MatmulPrecision precision = matmul_precision();
  const bool dropped = dropout.p > 0.0F;
  // As ops::dropout: p = 1 keeps nothing and scales by 0 (zeros, zero gradient).
  // Unscaled, the kept outputs stay as they are: the next layer scales them.
  const float keep_scale = !dropped || !dropout.scaled ? 1.0F
                           : dropout.p < 1.0F          ? 1.0F / (1.0F - dropout.p)
                                                       : 0.0F;
  // f16 x and W at f32 precision (their values exact) on a back end that
  // multiplies f16 as it is: the tensor cores, no f32 copies.
  if (precision == MatmulPrecision::f32 && x.dtype() == DType::f16 &&
      weight.dtype() == DType::f16 && detail::backend_of(x).f16_products()) {
    return detail::linear_f16_products(x, weight, bias, activation, dropout, keep_scale,
                                       input_scale);
  }
  // bf16 x and W at bf16 precision feed the products as they are: no f32
  // copies of them, y computed in f32 and rounded once, the gradients
  // returned in the inputs' dtypes. Other 16-bit inputs compute through f32.
  const bool bf16_operands = precision == MatmulPrecision::bf16 && x.dtype() == DType::bf16 &&
                             weight.dtype() == DType::bf16 &&
                             detail::backend_of(x).rounds_bf16_operands();
  if (!bf16_operands && (x.dtype() != DType::f32 || weight.dtype() != DType::f32 ||
                         (bias.defined() && bias.dtype() != DType::f32))) {
    return linear_impl(detail::as_f32(x), detail::as_f32(weight),
                       bias.defined() ? detail::as_f32(bias) : bias, activation, dropout,
                       input_scale)
        .to(x.dtype());
  }
  const Tensor xc = x.detach().contiguous();
  const Tensor w = weight.detach().contiguous();
  Shape out_shape = x.shape();
  out_shape.back() = out_features;
  backend::Backend& be = detail::backend_of(xc);
  // A back end whose products add a bias and apply relu in their epilogue
  // (gemm_adds_bias) gives y with them, computed in f32 and stored once: no
  // pass over an f32 y. A bf16 layer's bias must be bf16 there (C's type),
  // and a scaled output dropout (applied before the rounding) keeps the pass
  // below; an unscaled one (a mask: exact after the rounding) runs after it.
  const bool epilogue_activation =
      activation == Activation::relu || (activation == Activation::none && bias.defined());
  // (The bias it reads: this one, or a contiguous copy in fresh memory.)
  const void* bias_at = bias.defined() && bias.is_contiguous() ? bias.raw_data() : nullptr;
  const bool fused =
      epilogue_activation && in > 0 && be.gemm_adds_bias(bias_at) &&
      (bf16_operands ? (!bias.defined() || bias.dtype() == DType::bf16) &&
                           (dropout.p == 0.0F || !dropout.scaled) && be.gemm_writes_bf16()
                     : !bias.defined() || bias.dtype() == DType::f32);
  // With nothing to add or apply after the product (or all of it in the
  // epilogue), a back end that can writes y in bf16 straight from the
  // product (no f32 y at all).
  const bool y_bf16 =
      bf16_operands && be.gemm_writes_bf16() &&
      (fused || (!bias.defined() && activation == Activation::none && dropout.p == 0.0F));
  Tensor y = detail::empty_on(xc, out_shape, y_bf16 ? DType::bf16 : DType::f32);
  // Else, a back end that reads 16-bit storage adds the bias, applies relu
  // and the dropout and rounds y to bf16 in one pass over the f32 product;
  // relu's backward then reads the bf16 y (its sign is the f32 y's).
  const bool store_bf16 = bf16_operands && !y_bf16 && be.reads_16bit_storage() &&
                          (activation == Activation::none || activation == Activation::relu);
  // That pass and the epilogue read a bf16 bias as it is (its values are exact in f32).
  const bool bias_bf16 = (store_bf16 || y_bf16) && bias.defined() && bias.dtype() == DType::bf16;
  const Tensor b = !bias.defined() ? Tensor()
                   : bias_bf16     ? bias.detach().contiguous()
                                   : detail::as_f32(bias.detach()).contiguous();
  const bool needs_grad = grad_mode_enabled() && (x.requires_grad() || weight.requires_grad() ||
                                                  (bias.defined() && bias.requires_grad()));
  Tensor pre =
      needs_grad && activation == Activation::gelu ? detail::empty_on(xc, out_shape) : Tensor();
  // Rows of x (and y): every axis but the last; counted from the shape, as
  // in or out_features may be 0.
  const std::int64_t n_rows = shape_numel(Shape(x.shape().begin(), x.shape().end() - 1));
  GemmOperand x_operand{bf16_operands ? nullptr : xc.data<float>(), in, false};
  GemmOperand w_operand{bf16_operands ? nullptr : w.data<float>(), in, true};
  // Rounded once here, shared by the forward and backward products.
  const bool rounded = precision == MatmulPrecision::bf16 && be.rounds_bf16_operands();
  const auto round = [&](const GemmOperand& operand, const Shape& stored, std::int64_t rows,
                         std::int64_t cols) {
    if (!rounded) return Tensor();
    Tensor bits = detail::empty_on(xc, stored, DType::bf16);
    be.round_bf16(operand, rows, cols, bits.data<std::uint16_t>());
    return bits;
  };
  // bf16 tensors are their own rounded operands (dense: contiguous above).
  const Tensor x_bf16 = bf16_operands ? xc : round(x_operand, {n_rows, in}, n_rows, in);
  const Tensor w_bf16 = bf16_operands ? w : round(w_operand, {out_features, in}, in, out_features);
  const auto bits = [](const Tensor& t) { return t.defined() ? t.data<std::uint16_t>() : nullptr; };
  x_operand.bf16 = bits(x_bf16);
  w_operand.bf16 = bits(w_bf16);
  GemmProduct product{n_rows,       out_features,
                      in,           input_scale,
                      x_operand,    w_operand,
                      0.0F,         y_bf16 ? nullptr : y.data<float>(),
                      out_features, y_bf16 ? y.data<std::uint16_t>() : nullptr};
  if (fused) {
    product.bias = b.defined() ? b.raw_data() : nullptr;
    product.relu = activation == Activation::relu;
  }
  be.gemm(product, precision);
  if (store_bf16) {
    Tensor rounded = detail::empty_on(xc, out_shape, DType::bf16);
    be.bias_activation_16(DType::bf16, y.data<float>(), b.defined() ? b.dtype() : DType::f32,
                          b.defined() ? b.raw_data() : nullptr, n_rows, out_features, activation,
                          dropped ? &dropout.key : nullptr, dropout.p, keep_scale,
                          rounded.raw_data());
    y = std::move(rounded);
  } else if (!y_bf16 && !fused && (b.defined() || activation != Activation::none)) {
    // (Else the product's epilogue did it, or there is nothing to do.)
    be.bias_activation(y.data<float>(), pre.defined() ? pre.data<float>() : nullptr,
                       b.defined() ? b.data<float>() : nullptr, n_rows, out_features, activation);
  }
  if (dropped && !store_bf16) {
    be.dropout_forward(dropout.key, dropout.p, keep_scale, y.dtype(), y.raw_data(), y.raw_data(),
                       y.numel(), nullptr);
  }
  // y still to be cast to the inputs' bf16 (its f32 copy is what backward keeps).
  const bool cast_y = bf16_operands && !y_bf16 && !store_bf16;
  const DType x_dtype = x.dtype(), w_dtype = weight.dtype();
  const DType b_dtype = bias.defined() ? bias.dtype() : DType::f32;
  if (!needs_grad) return cast_y ? y.to(x_dtype) : y;

  // The activation derivative reads the output (relu, tanh, sigmoid) or the pre-activation (gelu).
  const Tensor saved = activation == Activation::gelu   ? pre
                       : activation == Activation::none ? Tensor()
                                                        : y.detach();
  // dW needs x, rounded when the products are; dx needs W.
  const Tensor x_kept = x_bf16.defined() ? Tensor() : xc;
  Tensor out = cast_y ? y.to(x_dtype) : std::move(y);
  return autograd::record(
      std::move(out), "linear", {x, weight, bias},
      [x_kept, x_bf16, x_shape = xc.shape(), w, w_bf16, bits, saved, activation, keep_scale,
       input_scale, n_rows, in, out_features, precision, bf16_operands, x_dtype, w_dtype, b_dtype,
       need_x = x.requires_grad(), need_w = weight.requires_grad(),
       need_b = bias.defined() && bias.requires_grad()](const Tensor& g) {
        // A bf16 g with nothing to form from it (no activation, no bias) is
        // the products' dz as it is: no f32 copy (the logits' gradient).
        const bool g_is_dz =
            bf16_operands && g.dtype() == DType::bf16 && activation == Activation::none && !need_b;
        backend::Backend& be = detail::backend_of(g);
        // A bf16 g that a pass forms dz from, on a back end that reads it: no f32 copy either.
        const bool g_bf16 =
            g_is_dz || (bf16_operands && g.dtype() == DType::bf16 && be.reads_16bit_storage());
        const Tensor gc = g_bf16 ? g.contiguous() : detail::as_f32(g).contiguous();
        const void* saved_data = saved.defined() ? saved.raw_data() : nullptr;
        const DType saved_dtype = saved.defined() ? saved.dtype() : DType::f32;
        // The pass that forms a bf16 dz from bf16 g or saved writes a bf16
        // bias's gradient rounded too (no f32 db and cast after).
        const bool pass_16 = !g_is_dz && x_bf16.defined() &&
                             (activation != Activation::none || need_b) &&
                             (g_bf16 || saved_dtype == DType::bf16);
        const DType db_dtype = pass_16 && b_dtype == DType::bf16 ? DType::bf16 : DType::f32;
        // That pass adds db into a gradient the bias already has (its .grad).
        const Tensor db_into =
            need_b && pass_16 && db_dtype == b_dtype ? autograd::accumulation_target(2) : Tensor();
        Tensor db = detail::gradient_buffer(need_b, db_into, gc, {out_features}, db_dtype);
        void* db_data = need_b ? db.raw_data() : nullptr;
        // dz for the two products: g itself, f32 dz, or (at bf16 precision,
        // when a pass over g runs anyway) dz written only rounded to bf16.
        Tensor dz = gc;
        Tensor dz_bf16;
        if (g_is_dz) {
          dz_bf16 = gc;
        } else if (x_bf16.defined() && (activation != Activation::none || need_b)) {
          // Without an activation a bf16 g is dz itself: the pass sums db only.
          const bool g_as_dz = pass_16 && activation == Activation::none && g_bf16;
          dz_bf16 = g_as_dz ? gc : detail::empty_on(gc, {n_rows, out_features}, DType::bf16);
          if (pass_16) {
            be.activation_backward_16(activation, gc.dtype(), gc.raw_data(), saved_dtype,
                                      saved_data, DType::bf16,
                                      g_as_dz ? nullptr : dz_bf16.raw_data(), db_dtype, db_data,
                                      n_rows, out_features, keep_scale, db_into.defined());
          } else {
            be.activation_backward_bf16(activation, gc.data<float>(),
                                        static_cast<const float*>(saved_data),
                                        dz_bf16.data<std::uint16_t>(), static_cast<float*>(db_data),
                                        n_rows, out_features, keep_scale);
          }
        } else {
          if (activation != Activation::none) dz = detail::empty_on(gc, gc.shape());
          be.activation_backward(activation, gc.data<float>(),
                                 static_cast<const float*>(saved_data),
                                 activation == Activation::none ? nullptr : dz.data<float>(),
                                 static_cast<float*>(db_data), n_rows, out_features, keep_scale);
        }
        const GemmOperand dz_operand{dz_bf16.defined() ? nullptr : dz.data<float>(), out_features,
                                     false, bits(dz_bf16)};
        // A back end that can writes dx in bf16 straight from its product.
        const bool dx_bf16 = bf16_operands && be.gemm_writes_bf16();
        // Likewise dW for a bf16 weight: written rounded by its product, not
        // rounded by a cast of an f32 dW afterwards (a pass and a launch per weight).
        const bool dw_bf16 = dx_bf16 && w_dtype == DType::bf16;
        // A 16-bit gradient that x or W already has (x's other uses, W's
        // .grad) takes the product's result added in f32 and rounded once:
        // by the product itself (beta 1) where it writes bf16, else from the
        // f32 result in one pass, which is also the cast it saves.
        // f32 gradients too, on a back end that reads 16-bit storage (the
        // GPU's: beta 1 in the product's epilogue, one f32 add, the bits of
        // the add it replaces; the CPU's BLAS would add per block of k).
        const bool f32_adds = !bf16_operands && be.reads_16bit_storage();
        const Tensor dx_into =
            need_x && (bf16_operands || f32_adds) ? autograd::accumulation_target(0) : Tensor();
        const Tensor dw_into =
            need_w && (bf16_operands || f32_adds) ? autograd::accumulation_target(1) : Tensor();
        // The targets the products themselves add into (beta 1).
        const Tensor dx_added = dx_bf16 || f32_adds ? dx_into : Tensor();
        const Tensor dw_added = dw_bf16 || f32_adds ? dw_into : Tensor();
        Tensor dx = detail::gradient_buffer(need_x, dx_added, gc, x_shape,
                                            dx_bf16 ? DType::bf16 : DType::f32);
        Tensor dw = detail::gradient_buffer(need_w, dw_added, gc, {out_features, in},
                                            dw_bf16 ? DType::bf16 : DType::f32);
        const float dx_beta = dx_added.defined() ? 1.0F : 0.0F;
        const float dw_beta = dw_added.defined() ? 1.0F : 0.0F;
        // dx [rows, in] = dz [rows, out] W [out, in]
        const auto dx_product = [&] {
          return GemmProduct{
              n_rows,       in,
              out_features, input_scale,
              dz_operand,   {bf16_operands ? nullptr : w.data<float>(), in, false, bits(w_bf16)},
              dx_beta,      dx_bf16 ? nullptr : dx.data<float>(),
              in,           dx_bf16 ? dx.data<std::uint16_t>() : nullptr};
        };
        // dW [out, in] = dz^T [out, rows] x [rows, in]
        const auto dw_product = [&] {
          return GemmProduct{
              out_features,
              in,
              n_rows,
              input_scale,
              {dz_operand.data, out_features, true, dz_operand.bf16},
              {x_kept.defined() ? x_kept.data<float>() : nullptr, in, false, bits(x_bf16)},
              dw_beta,
              dw_bf16 ? nullptr : dw.data<float>(),
              in,
              dw_bf16 ? dw.data<std::uint16_t>() : nullptr};
        };
        if (need_x && need_w) {
          be.gemm_pair(dx_product(), dw_product(), precision);
        } else if (need_x) {
          be.gemm(dx_product(), precision);
        } else if (need_w) {
          be.gemm(dw_product(), precision);
        }
        if (!bf16_operands) return autograd::TensorList{dx, dw, db};
        // An f32 result goes to its dtype by a cast, or added into its target.
        const auto as = [](const Tensor& t, DType dtype, Tensor into) {
          if (!t.defined() || t.dtype() == dtype) return t;
          if (!into.defined()) return t.to(dtype);
          detail::backend_of(into).add_strided(into.shape(), into.raw_data(), into.strides(),
                                               into.dtype(), t.raw_data(), t.strides(), t.dtype());
          return into;
        };
        return autograd::TensorList{as(dx, x_dtype, dx_into), as(dw, w_dtype, dw_into),
                                    as(db, b_dtype, Tensor())};
      });
}

}  // namespace

Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias, Activation activation) {
  return linear_impl(x, weight, bias, activation, {}, 1.0F);
}

Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias, Activation activation,
              const OutputDropout& dropout, float input_scale) {
  return linear_impl(x, weight, bias, activation, dropout, input_scale);
}

}  // namespace rig::ops
