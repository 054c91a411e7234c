// linear on f16 x and W, on a back end with f16 products: the products read
// x, W and (backward) dz in f16 as they are and accumulate in f32, which is
// the f32 path's arithmetic on the same (exact) values, on the tensor cores
// instead of f32 copies. y, dx and dW are written in f16 by their products
// where nothing follows; an f16 bias and relu are the product's epilogue
// where the back end has it (gemm_adds_bias), y stored in f16 once, and an
// unscaled output dropout (a mask, exact after the rounding) a pass over
// that f16 y; else, with a bias, relu and output dropout, one pass over
// the f32 product adds, clamps, drops and rounds (bias_activation_16).
// relu's backward reads the f16 y. dz, the products' operand in backward,
// is rounded to f16 as autocast's is (the f32 path keeps it in f32). A
// gradient x or W already has (autograd::accumulation_target) is added to by
// the products themselves (beta 1).
#include "ops/linear_f16.hpp"

#include "ops/op_util.hpp"
#include "rig/autograd.hpp"

namespace rig::ops::detail {

namespace {

using backend::GemmOperand;
using backend::GemmProduct;

const std::uint16_t* f16_of(const Tensor& t) {
  return t.data<std::uint16_t>();
}

}  // namespace

Tensor linear_f16_products(const Tensor& x, const Tensor& weight, const Tensor& bias,
                           Activation activation, const OutputDropout& dropout, float keep_scale,
                           float input_scale) {
  const Tensor xc = x.detach().contiguous();
  const Tensor w = weight.detach().contiguous();
  const std::int64_t in = w.size(1), out_features = w.size(0);
  const std::int64_t n_rows = shape_numel(Shape(x.shape().begin(), x.shape().end() - 1));
  Shape out_shape = x.shape();
  out_shape.back() = out_features;
  backend::Backend& be = backend_of(xc);
  const bool dropped = dropout.p > 0.0F;
  const bool needs_grad = grad_mode_enabled() && (x.requires_grad() || weight.requires_grad() ||
                                                  (bias.defined() && bias.requires_grad()));
  // Written in f16 by the product where nothing follows it; else an f32
  // product, then one pass (none / relu) or the f32 activation and a cast.
  const bool direct = !bias.defined() && activation == Activation::none && !dropped;
  // The product's epilogue adds an f16 bias (C's type) and applies relu
  // where the back end can for this bias (the one given, or a contiguous
  // copy in fresh memory); any dropout must be unscaled (keep_scale 1).
  const void* bias_at = bias.defined() && bias.is_contiguous() ? bias.raw_data() : nullptr;
  const bool epilogue =
      !direct && in > 0 &&
      (activation == Activation::relu || (activation == Activation::none && bias.defined())) &&
      (!bias.defined() || bias.dtype() == DType::f16) && (!dropped || keep_scale == 1.0F) &&
      be.gemm_adds_bias(bias_at);
  const bool fused =
      !direct && !epilogue && (activation == Activation::none || activation == Activation::relu);
  // The fused pass and the epilogue read an f16 bias as it is (its values are exact in f32).
  const bool bias_f16 = (fused || epilogue) && bias.defined() && bias.dtype() == DType::f16;
  const Tensor b = !bias.defined() ? Tensor()
                   : bias_f16      ? bias.detach().contiguous()
                                   : as_f32(bias.detach()).contiguous();
  const bool y_f16 = direct || epilogue;
  Tensor y = empty_on(xc, out_shape, y_f16 ? DType::f16 : DType::f32);
  Tensor pre = needs_grad && activation == Activation::gelu ? empty_on(xc, out_shape) : Tensor();
  GemmProduct forward{n_rows,
                      out_features,
                      in,
                      input_scale,
                      {nullptr, in, false, nullptr, f16_of(xc)},
                      {nullptr, in, true, nullptr, f16_of(w)},
                      0.0F,
                      y_f16 ? nullptr : y.data<float>(),
                      out_features};
  if (y_f16) forward.c_f16 = y.data<std::uint16_t>();
  if (epilogue) {
    forward.bias = b.defined() ? b.raw_data() : nullptr;
    forward.relu = activation == Activation::relu;
  }
  be.gemm(forward, matmul_precision());
  Tensor out;
  if (direct) {
    out = y;
  } else if (epilogue) {
    if (dropped) {
      be.dropout_forward(dropout.key, dropout.p, keep_scale, DType::f16, y.raw_data(), y.raw_data(),
                         y.numel(), nullptr);
    }
    out = y;
  } else if (fused) {
    out = empty_on(xc, out_shape, DType::f16);
    be.bias_activation_16(DType::f16, y.data<float>(), b.defined() ? b.dtype() : DType::f32,
                          b.defined() ? b.raw_data() : nullptr, n_rows, out_features, activation,
                          dropped ? &dropout.key : nullptr, dropout.p, keep_scale, out.raw_data());
  } else {  // gelu, tanh, sigmoid (no dropout: linear_impl allows it after relu only)
    be.bias_activation(y.data<float>(), pre.defined() ? pre.data<float>() : nullptr,
                       b.defined() ? b.data<float>() : nullptr, n_rows, out_features, activation);
    out = y.to(DType::f16);
  }
  if (!needs_grad) return out;

  // What the activation's derivative reads: the f16 output (relu), the f32
  // output (tanh, sigmoid) or pre-activation (gelu); none reads nothing.
  const Tensor saved = activation == Activation::none   ? Tensor()
                       : activation == Activation::gelu ? pre
                       : fused || epilogue              ? out.detach()
                                                        : y;
  const DType w_dtype = weight.dtype();
  const DType b_dtype = bias.defined() ? bias.dtype() : DType::f32;
  return autograd::record(
      out, "linear", {x, weight, bias},
      [xc, w, saved, activation, keep_scale, input_scale, n_rows, in, out_features, w_dtype,
       b_dtype, need_x = x.requires_grad(), need_w = weight.requires_grad(),
       need_b = bias.defined() && bias.requires_grad()](const Tensor& g) {
        backend::Backend& be = backend_of(g);
        const Tensor gc = g.dtype() == DType::f16 || g.dtype() == DType::f32
                              ? g.contiguous()
                              : as_f32(g).contiguous();
        // An f16 bias's gradient is written rounded by the pass that forms dz.
        const DType db_dtype = b_dtype == DType::f16 ? DType::f16 : DType::f32;
        // Added into a gradient the bias already has (its .grad) by that pass.
        const Tensor db_into =
            need_b && db_dtype == b_dtype ? autograd::accumulation_target(2) : Tensor();
        Tensor db = gradient_buffer(need_b, db_into, gc, {out_features}, db_dtype);
        // dz in f16 for the products: an f16 g with nothing to form is dz itself.
        Tensor dz = gc;
        if (activation != Activation::none || need_b || gc.dtype() != DType::f16) {
          // Without an activation an f16 g is dz itself: the pass sums db only.
          const bool g_as_dz = activation == Activation::none && gc.dtype() == DType::f16;
          if (!g_as_dz) dz = empty_on(gc, {n_rows, out_features}, DType::f16);
          be.activation_backward_16(
              activation, gc.dtype(), gc.raw_data(), saved.defined() ? saved.dtype() : DType::f32,
              saved.defined() ? saved.raw_data() : nullptr, DType::f16,
              g_as_dz ? nullptr : dz.raw_data(), db_dtype, need_b ? db.raw_data() : nullptr, n_rows,
              out_features, keep_scale, db_into.defined());
        }
        // An f16 gradient that x or W already has (x's other uses, W's .grad)
        // takes the product's result added in f32 and rounded once (beta 1).
        const Tensor dx_into = need_x ? autograd::accumulation_target(0) : Tensor();
        const Tensor dw_into = need_w ? autograd::accumulation_target(1) : Tensor();
        Tensor dx = gradient_buffer(need_x, dx_into, gc, xc.shape(), DType::f16);
        Tensor dw = gradient_buffer(need_w, dw_into, gc, {out_features, in}, DType::f16);
        // dx [rows, in] = dz [rows, out] W [out, in]
        GemmProduct dx_product{n_rows,
                               in,
                               out_features,
                               input_scale,
                               {nullptr, out_features, false, nullptr, f16_of(dz)},
                               {nullptr, in, false, nullptr, f16_of(w)},
                               dx_into.defined() ? 1.0F : 0.0F,
                               nullptr,
                               in};
        // dW [out, in] = dz^T [out, rows] x [rows, in]
        GemmProduct dw_product{out_features,
                               in,
                               n_rows,
                               input_scale,
                               {nullptr, out_features, true, nullptr, f16_of(dz)},
                               {nullptr, in, false, nullptr, f16_of(xc)},
                               dw_into.defined() ? 1.0F : 0.0F,
                               nullptr,
                               in};
        if (need_x) dx_product.c_f16 = dx.data<std::uint16_t>();
        if (need_w) dw_product.c_f16 = dw.data<std::uint16_t>();
        if (need_x && need_w) {
          be.gemm_pair(dx_product, dw_product, matmul_precision());
        } else if (need_x) {
          be.gemm(dx_product, matmul_precision());
        } else if (need_w) {
          be.gemm(dw_product, matmul_precision());
        }
        const auto as = [](const Tensor& t, DType dtype) { return t.defined() ? t.to(dtype) : t; };
        return autograd::TensorList{dx, as(dw, w_dtype), as(db, b_dtype)};
      });
}

}  // namespace rig::ops::detail
