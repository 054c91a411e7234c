// Elementwise ops: broadcasting arithmetic, scalar ops and activations.
// f16/bf16 inputs are computed in f32 (a differentiable cast) and the result
// is cast back to the input's dtype.
#include <stdexcept>
#include <string>

#include <fmt/format.h>

#include "cpu/elementwise.hpp"
#include "ops/op_util.hpp"
#include "rig/autograd.hpp"
#include "rig/ops.hpp"

namespace rig::ops {

namespace {

using detail::require_cpu;
using detail::require_floating;
using detail::require_same_cpu;

// Which of x (input) and y (output) the derivative of `op` reads. relu reads
// its output, as PyTorch does: the next op (conv, linear) usually keeps that
// tensor anyway, so the input can be freed.
bool reads_input(cpu::Unary op) {
  switch (op) {
    case cpu::Unary::log:
    case cpu::Unary::gelu:
    case cpu::Unary::gelu_tanh:
    case cpu::Unary::pow_scalar:
      return true;
    default:
      return false;
  }
}
bool reads_output(cpu::Unary op) {
  switch (op) {
    case cpu::Unary::relu:
    case cpu::Unary::exp:
    case cpu::Unary::sqrt:
    case cpu::Unary::rsqrt:
    case cpu::Unary::tanh:
    case cpu::Unary::sigmoid:
      return true;
    default:
      return false;
  }
}

Tensor unary_op(const char* name, const Tensor& a, cpu::Unary op, float scalar = 0.0F) {
  require_floating(name, a, "x");
  require_cpu(name, {&a});
  if (a.dtype() != DType::f32) return unary_op(name, a.to(DType::f32), op, scalar).to(a.dtype());
  const Tensor x = a.contiguous();
  Tensor out = Tensor::empty(x.shape());
  cpu::unary(op, x.data<float>(), out.data<float>(), x.numel(), scalar);
  if (!grad_mode_enabled() || !a.requires_grad()) return out;
  Tensor saved_x = reads_input(op) ? x.detach() : Tensor();
  Tensor saved_y = reads_output(op) ? out.detach() : Tensor();
  return autograd::record(std::move(out), name, {a},
                          [saved_x, saved_y, op, scalar](const Tensor& g) {
                            const Tensor gc = g.contiguous();
                            Tensor dx = Tensor::empty(gc.shape());
                            cpu::unary_backward(op, gc.data<float>(),
                                                saved_x.defined() ? saved_x.data<float>() : nullptr,
                                                saved_y.defined() ? saved_y.data<float>() : nullptr,
                                                dx.data<float>(), dx.numel(), scalar);
                            return autograd::TensorList{dx};
                          });
}

// a op b into a new contiguous f32 tensor of the broadcast shape (no history).
Tensor binary_kernel(cpu::Binary op, const Tensor& a, const Tensor& b, const Shape& shape) {
  Tensor out = Tensor::empty(shape);
  if (out.numel() == 0) return out;
  const Strides so = contiguous_strides(shape);
  const Strides sa = cpu::broadcast_strides(a.shape(), a.strides(), shape);
  const Strides sb = cpu::broadcast_strides(b.shape(), b.strides(), shape);
  const auto plan = cpu::make_strided_plan<3>(shape, {&so, &sa, &sb});
  cpu::binary(op, plan, a.data<float>(), b.data<float>(), out.data<float>());
  return out;
}

Tensor negated(const Tensor& t) {
  const Tensor c = t.contiguous();
  Tensor out = Tensor::empty(c.shape());
  cpu::unary(cpu::Unary::neg, c.data<float>(), out.data<float>(), c.numel());
  return out;
}

Tensor binary_op(const char* name, cpu::Binary op, const Tensor& a, const Tensor& b) {
  require_floating(name, a, "a");
  require_floating(name, b, "b");
  require_same_cpu(name, {&a, &b});
  const Shape shape = broadcast_shapes(a.shape(), b.shape(), name);
  if (a.dtype() != DType::f32 || b.dtype() != DType::f32) {
    // Same low-precision dtype: compute in f32 and round back; mixed: f32.
    const DType result = a.dtype() == b.dtype() ? a.dtype() : DType::f32;
    return binary_op(name, op, detail::as_f32(a), detail::as_f32(b)).to(result);
  }
  Tensor out = binary_kernel(op, a, b, shape);
  if (!grad_mode_enabled() || !(a.requires_grad() || b.requires_grad())) return out;
  const bool need_a = a.requires_grad();
  const bool need_b = b.requires_grad();
  // Saved operands, only where the derivative reads them.
  const bool keep_a = op == cpu::Binary::mul && need_b;
  const bool keep_b = (op == cpu::Binary::mul && need_a) || op == cpu::Binary::div;
  Tensor saved_a = keep_a ? a.detach() : Tensor();
  Tensor saved_b = keep_b ? b.detach() : Tensor();
  Tensor saved_out = op == cpu::Binary::div && need_b ? out.detach() : Tensor();
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
          case cpu::Binary::add:
            if (need_a) da = detail::sum_to(g, shape_a);
            if (need_b) db = detail::sum_to(g, shape_b);
            break;
          case cpu::Binary::sub:
            if (need_a) da = detail::sum_to(g, shape_a);
            if (need_b) db = negated(detail::sum_to(g, shape_b));
            break;
          case cpu::Binary::mul:
            if (need_a)
              da = detail::sum_to(binary_kernel(cpu::Binary::mul, g, saved_b, gs), shape_a);
            if (need_b)
              db = detail::sum_to(binary_kernel(cpu::Binary::mul, g, saved_a, gs), shape_b);
            break;
          case cpu::Binary::div:
            // d(a/b)/da = 1/b; d(a/b)/db = -(a/b)/b.
            if (need_a)
              da = detail::sum_to(binary_kernel(cpu::Binary::div, g, saved_b, gs), shape_a);
            if (need_b) {
              const Tensor t = binary_kernel(cpu::Binary::mul, g, saved_out, gs);
              db =
                  negated(detail::sum_to(binary_kernel(cpu::Binary::div, t, saved_b, gs), shape_b));
            }
            break;
        }
        // sum_to may hand back g itself: gradients must be contiguous f32 of the input's shape.
        if (da.defined()) da = da.contiguous();
        if (db.defined()) db = db.contiguous();
        return autograd::TensorList{da, db};
      });
}

}  // namespace

Tensor add(const Tensor& a, const Tensor& b) {
  return binary_op("add", cpu::Binary::add, a, b);
}
Tensor sub(const Tensor& a, const Tensor& b) {
  return binary_op("sub", cpu::Binary::sub, a, b);
}
Tensor mul(const Tensor& a, const Tensor& b) {
  return binary_op("mul", cpu::Binary::mul, a, b);
}
Tensor div(const Tensor& a, const Tensor& b) {
  return binary_op("div", cpu::Binary::div, a, b);
}

Tensor add_scalar(const Tensor& a, float scalar) {
  return unary_op("add_scalar", a, cpu::Unary::add_scalar, scalar);
}
Tensor mul_scalar(const Tensor& a, float scalar) {
  return unary_op("mul_scalar", a, cpu::Unary::mul_scalar, scalar);
}
Tensor pow_scalar(const Tensor& a, float exponent) {
  return unary_op("pow_scalar", a, cpu::Unary::pow_scalar, exponent);
}
Tensor neg(const Tensor& a) {
  return unary_op("neg", a, cpu::Unary::neg);
}
Tensor exp(const Tensor& a) {
  return unary_op("exp", a, cpu::Unary::exp);
}
Tensor log(const Tensor& a) {
  return unary_op("log", a, cpu::Unary::log);
}
Tensor sqrt(const Tensor& a) {
  return unary_op("sqrt", a, cpu::Unary::sqrt);
}
Tensor rsqrt(const Tensor& a) {
  return unary_op("rsqrt", a, cpu::Unary::rsqrt);
}
Tensor relu(const Tensor& a) {
  return unary_op("relu", a, cpu::Unary::relu);
}
Tensor gelu(const Tensor& a, bool tanh_approximation) {
  return unary_op("gelu", a, tanh_approximation ? cpu::Unary::gelu_tanh : cpu::Unary::gelu);
}
Tensor tanh(const Tensor& a) {
  return unary_op("tanh", a, cpu::Unary::tanh);
}
Tensor sigmoid(const Tensor& a) {
  return unary_op("sigmoid", a, cpu::Unary::sigmoid);
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
