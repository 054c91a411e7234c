// Elementwise ops: broadcasting arithmetic, scalar ops and activations.
// f16/bf16 inputs are computed in f32 (a differentiable cast; for the unary
// ops one node that keeps the 16-bit input) and the result is cast back to
// the input's dtype; add and mul of one 16-bit dtype, and the unary ops whose
// derivative does not read a rounded output, run on it directly where the
// back end reads 16-bit storage (the same bits).
#include <stdexcept>
#include <string>

#include <fmt/format.h>

#include "ops/op_util.hpp"
#include "rig/autograd.hpp"
#include "rig/ops.hpp"

namespace rig::ops {

namespace {

using backend::Binary;
using backend::Unary;
using detail::backend_of;
using detail::empty_on;
using detail::require_floating;
using detail::require_same_device;

// Which of x (input) and y (output) the derivative of `op` reads. relu reads
// its output, as PyTorch does: the next op (conv, linear) usually keeps that
// tensor anyway, so the input can be freed.
bool reads_input(Unary op) {
  switch (op) {
    case Unary::log:
    case Unary::gelu:
    case Unary::gelu_tanh:
    case Unary::pow_scalar:
      return true;
    default:
      return false;
  }
}
bool reads_output(Unary op) {
  switch (op) {
    case Unary::relu:
    case Unary::exp:
    case Unary::sqrt:
    case Unary::rsqrt:
    case Unary::tanh:
    case Unary::sigmoid:
      return true;
    default:
      return false;
  }
}

// Whether op runs on a's 16-bit storage as it is: where the back end reads
// it and the derivative does not read the (rounded) output, or the output
// is exact (relu of a 16-bit value is one): the f32 path's bits.
bool unary_on_16bit(const Tensor& a, Unary op) {
  return a.dtype() != DType::f32 && (!reads_output(op) || op == Unary::relu) &&
         backend_of(a).reads_16bit_storage();
}

// op of contiguous x into a new tensor of x's dtype (f32, or 16-bit where
// the back end reads it), no history.
Tensor unary_kernel(Unary op, const Tensor& x, float scalar) {
  Tensor out = empty_on(x, x.shape(), x.dtype());
  if (x.dtype() == DType::f32) {
    backend_of(x).unary(op, x.data<float>(), out.data<float>(), x.numel(), scalar);
  } else {
    backend_of(x).unary_16(op, x.dtype(), x.raw_data(), out.raw_data(), x.numel(), scalar);
  }
  return out;
}

// op's dx from contiguous g and the x and y its derivative reads (the others
// undefined), all of g's dtype, no history.
Tensor unary_backward_kernel(Unary op, const Tensor& g, const Tensor& x, const Tensor& y,
                             float scalar) {
  Tensor dx = empty_on(g, g.shape(), g.dtype());
  const auto data = [](const Tensor& t) -> const void* {
    return t.defined() ? t.raw_data() : nullptr;
  };
  if (g.dtype() == DType::f32) {
    backend_of(g).unary_backward(op, g.data<float>(), static_cast<const float*>(data(x)),
                                 static_cast<const float*>(data(y)), dx.data<float>(), dx.numel(),
                                 scalar);
  } else {
    backend_of(g).unary_backward_16(op, g.dtype(), g.raw_data(), data(x), data(y), dx.raw_data(),
                                    dx.numel(), scalar);
  }
  return dx;
}

// op of f16 / bf16 a computed in f32 (a back end that computes f32 only, or
// a derivative that would read a rounded output): the f32 op of a copy of a,
// rounded to a's dtype, the numbers of op(a.to(f32)).to(a's dtype). The
// backward keeps a's 16-bit storage rather than an f32 input or output and
// makes them again (a's values are exact in f32): half the saved bytes.
Tensor unary_on_f32_copy(const char* name, const Tensor& a, Unary op, float scalar) {
  const DType type = a.dtype();
  Tensor out = unary_kernel(op, a.detach().to(DType::f32).contiguous(), scalar).to(type);
  if (!grad_mode_enabled() || !a.requires_grad()) return out;
  Tensor saved = a.detach();
  return autograd::record(
      std::move(out), name, {a}, [saved = std::move(saved), op, scalar, type](const Tensor& g) {
        const Tensor x = saved.to(DType::f32).contiguous();
        const Tensor y = reads_output(op) ? unary_kernel(op, x, scalar) : Tensor();
        const Tensor dx = unary_backward_kernel(op, g.to(DType::f32).contiguous(),
                                                reads_input(op) ? x : Tensor(), y, scalar);
        return autograd::TensorList{dx.to(type)};
      });
}

Tensor unary_op(const char* name, const Tensor& a, Unary op, float scalar = 0.0F) {
  require_floating(name, a, "x");
  if (a.dtype() != DType::f32 && !unary_on_16bit(a, op)) {
    return unary_on_f32_copy(name, a, op, scalar);
  }
  const Tensor x = a.contiguous();
  Tensor out = unary_kernel(op, x, scalar);
  if (!grad_mode_enabled() || !a.requires_grad()) return out;
  Tensor saved_x = reads_input(op) ? x.detach() : Tensor();
  Tensor saved_y = reads_output(op) ? out.detach() : Tensor();
  return autograd::record(
      std::move(out), name, {a}, [saved_x, saved_y, op, scalar](const Tensor& g) {
        // g comes in the output's dtype (autograd converts it).
        return autograd::TensorList{
            unary_backward_kernel(op, g.contiguous(), saved_x, saved_y, scalar)};
      });
}

// Whether a op b runs on a's and b's 16-bit storage as it is.
bool binary_on_16bit(const Tensor& a, const Tensor& b) {
  return a.dtype() != DType::f32 && a.dtype() == b.dtype() && backend_of(a).reads_16bit_storage();
}

// a op b into a new contiguous tensor of the broadcast shape (no history):
// f32, or a's 16-bit dtype where binary_on_16bit(a, b).
Tensor binary_kernel(Binary op, const Tensor& a, const Tensor& b, const Shape& shape) {
  if (a.dtype() != DType::f32 || b.dtype() != DType::f32) {
    if (!binary_on_16bit(a, b)) {
      return binary_kernel(op, detail::as_f32(a), detail::as_f32(b), shape);
    }
  }
  Tensor out = empty_on(a, shape, a.dtype());
  if (out.numel() == 0) return out;
  const Strides so = contiguous_strides(shape);
  const Strides sa = backend::broadcast_strides(a.shape(), a.strides(), shape);
  const Strides sb = backend::broadcast_strides(b.shape(), b.strides(), shape);
  const auto plan = backend::make_strided_plan<3>(shape, {&so, &sa, &sb});
  if (a.dtype() == DType::f32) {
    backend_of(a).binary(op, plan, a.data<float>(), b.data<float>(), out.data<float>());
  } else {
    backend_of(a).binary_16(op, plan, a.dtype(), a.raw_data(), b.raw_data(), out.raw_data());
  }
  return out;
}

Tensor negated(const Tensor& t) {
  const Tensor c = t.contiguous();
  Tensor out = empty_on(c, c.shape());
  backend_of(c).unary(Unary::neg, c.data<float>(), out.data<float>(), c.numel(), 0.0F);
  return out;
}

Tensor binary_op(const char* name, Binary op, const Tensor& a, const Tensor& b) {
  require_floating(name, a, "a");
  require_floating(name, b, "b");
  require_same_device(name, {&a, &b});
  const Shape shape = broadcast_shapes(a.shape(), b.shape(), name);
  // add and mul of one 16-bit dtype on a back end that reads it: no f32
  // copies (their gradients are g itself or products of 16-bit tensors).
  const bool on_16bit = binary_on_16bit(a, b) && (op == Binary::add || op == Binary::mul);
  if (!on_16bit && (a.dtype() != DType::f32 || b.dtype() != DType::f32)) {
    // Same low-precision dtype: compute in f32 and round back; mixed: f32.
    const DType result = a.dtype() == b.dtype() ? a.dtype() : DType::f32;
    return binary_op(name, op, detail::as_f32(a), detail::as_f32(b)).to(result);
  }
  Tensor out = binary_kernel(op, a, b, shape);
  if (!grad_mode_enabled() || !(a.requires_grad() || b.requires_grad())) return out;
  const bool need_a = a.requires_grad();
  const bool need_b = b.requires_grad();
  // Saved operands, only where the derivative reads them.
  const bool keep_a = op == Binary::mul && need_b;
  const bool keep_b = (op == Binary::mul && need_a) || op == Binary::div;
  Tensor saved_a = keep_a ? a.detach() : Tensor();
  Tensor saved_b = keep_b ? b.detach() : Tensor();
  Tensor saved_out = op == Binary::div && need_b ? out.detach() : Tensor();
  return autograd::record(
      std::move(out), name, {a, b},
      // Init-captures: a captured const local would be copied, not moved, and
      // a closure that cannot move without throwing is stored on the heap.
      [op, need_a, need_b, shape_a = a.shape(), shape_b = b.shape(), saved_a, saved_b,
       saved_out](const Tensor& g) {
        Tensor da;
        Tensor db;
        const Shape& gs = g.shape();
        switch (op) {
          case Binary::add:
            if (need_a) da = detail::sum_to(g, shape_a);
            if (need_b) db = detail::sum_to(g, shape_b);
            break;
          case Binary::sub:
            if (need_a) da = detail::sum_to(g, shape_a);
            if (need_b) db = negated(detail::sum_to(g, shape_b));
            break;
          case Binary::mul: {
            // A product summed over broadcast axes is summed in f32 before
            // any rounding (as the f32 path does), not stored in 16 bits first.
            const auto product_to = [&](const Tensor& other, const Shape& target) {
              const bool summed = target != gs && g.dtype() != DType::f32;
              return detail::sum_to(
                  summed ? binary_kernel(Binary::mul, detail::as_f32(g), detail::as_f32(other), gs)
                         : binary_kernel(Binary::mul, g, other, gs),
                  target);
            };
            if (need_a) da = product_to(saved_b, shape_a);
            if (need_b) db = product_to(saved_a, shape_b);
            break;
          }
          case Binary::div:
            // d(a/b)/da = 1/b; d(a/b)/db = -(a/b)/b.
            if (need_a) da = detail::sum_to(binary_kernel(Binary::div, g, saved_b, gs), shape_a);
            if (need_b) {
              const Tensor t = binary_kernel(Binary::mul, g, saved_out, gs);
              db = negated(detail::sum_to(binary_kernel(Binary::div, t, saved_b, gs), shape_b));
            }
            break;
        }
        // sum_to may hand back g itself: gradients must be contiguous, of the
        // input's shape (autograd converts them to its dtype).
        if (da.defined()) da = da.contiguous();
        if (db.defined()) db = db.contiguous();
        return autograd::TensorList{da, db};
      });
}

}  // namespace

Tensor add(const Tensor& a, const Tensor& b) {
  return binary_op("add", Binary::add, a, b);
}

Tensor add_relu(const Tensor& a, const Tensor& b) {
  require_floating("add_relu", a, "a");
  require_floating("add_relu", b, "b");
  require_same_device("add_relu", {&a, &b});
  const Shape shape = broadcast_shapes(a.shape(), b.shape(), "add_relu");
  backend::Backend& be = backend_of(a);
  const DType type = a.dtype();
  const bool fused =
      be.fuses_relu() && type == b.dtype() && (type == DType::f32 || binary_on_16bit(a, b));
  if (!fused) return relu(add(a, b));
  Tensor out = empty_on(a, shape, type);
  if (out.numel() != 0) {
    const Strides so = contiguous_strides(shape);
    const Strides sa = backend::broadcast_strides(a.shape(), a.strides(), shape);
    const Strides sb = backend::broadcast_strides(b.shape(), b.strides(), shape);
    be.add_relu(backend::make_strided_plan<3>(shape, {&so, &sa, &sb}), type, a.raw_data(),
                b.raw_data(), out.raw_data());
  }
  if (!grad_mode_enabled() || !(a.requires_grad() || b.requires_grad())) return out;
  // Detached before the call: its arguments are evaluated in no fixed order,
  // and Clang moves `out` into the first one before the capture reads it.
  Tensor y = out.detach();
  return autograd::record(
      std::move(out), "add_relu", {a, b},
      [y = std::move(y), type, need_a = a.requires_grad(), need_b = b.requires_grad(),
       shape_a = a.shape(), shape_b = b.shape()](const Tensor& g) {
        // relu's backward from the output, then add's (the gradient to both).
        const Tensor gc = g.contiguous();
        Tensor dz = empty_on(gc, gc.shape(), type);
        if (type == DType::f32) {
          backend_of(gc).unary_backward(Unary::relu, gc.data<float>(), nullptr, y.data<float>(),
                                        dz.data<float>(), dz.numel(), 0.0F);
        } else {
          backend_of(gc).unary_backward_16(Unary::relu, type, gc.raw_data(), nullptr, y.raw_data(),
                                           dz.raw_data(), dz.numel(), 0.0F);
        }
        Tensor da = need_a ? detail::sum_to(dz, shape_a).contiguous() : Tensor();
        Tensor db = need_b ? detail::sum_to(dz, shape_b).contiguous() : Tensor();
        return autograd::TensorList{da, db};
      });
}
Tensor sub(const Tensor& a, const Tensor& b) {
  return binary_op("sub", Binary::sub, a, b);
}
Tensor mul(const Tensor& a, const Tensor& b) {
  return binary_op("mul", Binary::mul, a, b);
}
Tensor div(const Tensor& a, const Tensor& b) {
  return binary_op("div", Binary::div, a, b);
}

Tensor add_scalar(const Tensor& a, float scalar) {
  return unary_op("add_scalar", a, Unary::add_scalar, scalar);
}
Tensor mul_scalar(const Tensor& a, float scalar) {
  return unary_op("mul_scalar", a, Unary::mul_scalar, scalar);
}
Tensor pow_scalar(const Tensor& a, float exponent) {
  return unary_op("pow_scalar", a, Unary::pow_scalar, exponent);
}
Tensor neg(const Tensor& a) {
  return unary_op("neg", a, Unary::neg);
}
Tensor exp(const Tensor& a) {
  return unary_op("exp", a, Unary::exp);
}
Tensor log(const Tensor& a) {
  return unary_op("log", a, Unary::log);
}
Tensor sqrt(const Tensor& a) {
  return unary_op("sqrt", a, Unary::sqrt);
}
Tensor rsqrt(const Tensor& a) {
  return unary_op("rsqrt", a, Unary::rsqrt);
}
Tensor relu(const Tensor& a) {
  return unary_op("relu", a, Unary::relu);
}
Tensor gelu(const Tensor& a, bool tanh_approximation) {
  return unary_op("gelu", a, tanh_approximation ? Unary::gelu_tanh : Unary::gelu);
}
Tensor tanh(const Tensor& a) {
  return unary_op("tanh", a, Unary::tanh);
}
Tensor sigmoid(const Tensor& a) {
  return unary_op("sigmoid", a, Unary::sigmoid);
}

Tensor activate(const Tensor& a, Activation activation) {
  switch (activation) {
    case Activation::none:
      require_floating("activate", a, "x");
      return a;
    case Activation::relu:
      return relu(a);
    case Activation::gelu:
      return gelu(a);
    case Activation::tanh:
      return tanh(a);
    case Activation::sigmoid:
      return sigmoid(a);
  }
  throw std::invalid_argument("activate: unknown activation");
}

}  // namespace rig::ops
