// conv2d: shape checks, autograd, dispatch to the CPU kernels (cpu/conv.hpp).
#include <stdexcept>
#include <string>

#include <fmt/format.h>

#include "ops/op_util.hpp"
#include "rig/autograd.hpp"
#include "rig/ops.hpp"

namespace rig::ops {

namespace {

constexpr const char* kOp = "conv2d";

std::string operands(const Tensor& x, const Tensor& weight) {
  return fmt::format("x {}, weight {}", to_string(x.shape()), to_string(weight.shape()));
}

backend::Conv2dShape checked_shape(const Tensor& x, const Tensor& weight, const Tensor& bias,
                                   const Conv2dOptions& o) {
  if (x.dim() != 4 || weight.dim() != 4) {
    throw std::invalid_argument(fmt::format(
        "conv2d: {}: x must be {} and weight [Cout, Cin / groups, kH, kW]", operands(x, weight),
        o.channels_last ? "[N, H, W, C] (channels_last)" : "[N, C, H, W]"));
  }
  if (o.stride_h < 1 || o.stride_w < 1 || o.dilation_h < 1 || o.dilation_w < 1 || o.pad_h < 0 ||
      o.pad_w < 0 || o.groups < 1) {
    throw std::invalid_argument(fmt::format(
        "conv2d: {}: stride {}x{} and dilation {}x{} must be >= 1, padding {}x{} >= 0, groups {} "
        ">= 1",
        operands(x, weight), o.stride_h, o.stride_w, o.dilation_h, o.dilation_w, o.pad_h, o.pad_w,
        o.groups));
  }
  backend::Conv2dShape s;
  s.n = x.size(0);
  s.channels_last = o.channels_last;
  s.c_in = x.size(o.channels_last ? 3 : 1);
  s.h = x.size(o.channels_last ? 1 : 2);
  s.w = x.size(o.channels_last ? 2 : 3);
  s.c_out = weight.size(0);
  s.kernel_h = weight.size(2);
  s.kernel_w = weight.size(3);
  s.stride_h = o.stride_h;
  s.stride_w = o.stride_w;
  s.pad_h = o.pad_h;
  s.pad_w = o.pad_w;
  s.dilation_h = o.dilation_h;
  s.dilation_w = o.dilation_w;
  s.groups = o.groups;
  if (s.c_in % s.groups != 0 || s.c_out % s.groups != 0) {
    throw std::invalid_argument(
        fmt::format("conv2d: {}: groups {} must divide the input channels {} and the output "
                    "channels {}",
                    operands(x, weight), s.groups, s.c_in, s.c_out));
  }
  if (weight.size(1) * s.groups != s.c_in) {
    throw std::invalid_argument(fmt::format(
        "conv2d: {}: weight expects {} input channels ({} per group x {} groups), x has {}",
        operands(x, weight), weight.size(1) * s.groups, weight.size(1), s.groups, s.c_in));
  }
  if (s.kernel_h < 1 || s.kernel_w < 1 || s.c_out < 1) {
    throw std::invalid_argument(fmt::format("conv2d: {}: empty weight", operands(x, weight)));
  }
  const std::int64_t span_h = s.dilation_h * (s.kernel_h - 1) + 1;
  const std::int64_t span_w = s.dilation_w * (s.kernel_w - 1) + 1;
  if (s.h + 2 * s.pad_h < span_h || s.w + 2 * s.pad_w < span_w) {
    throw std::invalid_argument(
        fmt::format("conv2d: {}: the padded input {}x{} is smaller than the (dilated) kernel {}x{}",
                    operands(x, weight), s.h + 2 * s.pad_h, s.w + 2 * s.pad_w, span_h, span_w));
  }
  s.out_h = (s.h + 2 * s.pad_h - span_h) / s.stride_h + 1;
  s.out_w = (s.w + 2 * s.pad_w - span_w) / s.stride_w + 1;
  if (bias.defined()) {
    if (bias.dim() != 1 || bias.size(0) != s.c_out) {
      throw std::invalid_argument(fmt::format("conv2d: {}: bias {} must be [{}]",
                                              operands(x, weight), to_string(bias.shape()),
                                              s.c_out));
    }
    s.bias = true;
  }
  return s;
}

Shape y_shape(const backend::Conv2dShape& s) {
  if (s.channels_last) return {s.n, s.out_h, s.out_w, s.c_out};
  return {s.n, s.c_out, s.out_h, s.out_w};
}

// The weight as the back end reads it: PyTorch's [Cout, Cin / groups, kH, kW],
// or for channels_last [Cout, kH, kW, Cin / groups] (a differentiable copy;
// the same memory when the kernel is 1 x 1).
Tensor backend_weight(const Tensor& weight, const backend::Conv2dShape& s) {
  if (!s.channels_last || s.kernel_h * s.kernel_w == 1) return weight;
  return weight.permute({0, 2, 3, 1}).contiguous();
}

Tensor conv2d_in_storage_type(const Tensor& x, const Tensor& weight,
                              const backend::Conv2dShape& s) {
  const DType type = x.dtype();
  const Tensor xc = x.detach().contiguous();
  const Tensor wc = weight.detach().contiguous();
  Tensor out = detail::empty_on(xc, y_shape(s), type);
  detail::backend_of(xc).conv2d_forward_16(s, type, xc.raw_data(), wc.raw_data(), out.raw_data());
  if (!grad_mode_enabled() || !(x.requires_grad() || weight.requires_grad())) return out;
  return autograd::record(
      std::move(out), kOp, {x, weight},
      [s, xc, wc, type, need_x = x.requires_grad(),
       need_w = weight.requires_grad()](const Tensor& g) {
        // g comes in the output's dtype (autograd converts it).
        const Tensor gc = g.contiguous();
        // dx added into a gradient x already has (a residual block's input:
        // its shortcut's), dW into the weight's .grad (a parameter's, in the
        // flat gradient buffer; not a channels-last weight's permuted copy).
        const Tensor dx_into = need_x ? autograd::accumulation_target(0) : Tensor();
        const Tensor dw_into = need_w ? autograd::accumulation_target(1) : Tensor();
        Tensor dx = detail::gradient_buffer(need_x, dx_into, gc, xc.shape(), type);
        Tensor dw = detail::gradient_buffer(need_w, dw_into, gc, wc.shape(), type);
        detail::backend_of(gc).conv2d_backward_16(
            s, type, xc.raw_data(), wc.raw_data(), gc.raw_data(), need_x ? dx.raw_data() : nullptr,
            need_w ? dw.raw_data() : nullptr, {dx_into.defined(), dw_into.defined()});
        return autograd::TensorList{dx, dw};
      });
}

// conv2d after its checks: weight is the back end's (backend_weight).
Tensor conv2d_checked(const Tensor& x, const Tensor& weight, const Tensor& bias,
                      const backend::Conv2dShape& s) {
  // x and weight of one dtype and no bias, on a back end that reads 16-bit
  // storage (or convolves that dtype: the CPU's bf16): y, dx and dW in that
  // dtype (16-bit: no f32 copies), dx and dW added into the gradients
  // autograd offers.
  const backend::Backend& device = detail::backend_of(x);
  if (x.dtype() == weight.dtype() && !bias.defined() &&
      (device.reads_16bit_storage() || device.convolves_16bit(x.dtype()))) {
    return conv2d_in_storage_type(x, weight, s);
  }
  if (x.dtype() != DType::f32 || weight.dtype() != DType::f32 ||
      (bias.defined() && bias.dtype() != DType::f32)) {
    // f16 / bf16 storage: compute in f32, round the result to x's dtype.
    const Tensor b = bias.defined() ? detail::as_f32(bias) : bias;
    return conv2d_checked(detail::as_f32(x), detail::as_f32(weight), b, s).to(x.dtype());
  }

  const Tensor xc = x.detach().contiguous();
  const Tensor wc = weight.detach().contiguous();
  const Tensor bc = bias.defined() ? bias.detach().contiguous() : Tensor();
  Tensor out = detail::empty_on(xc, y_shape(s));
  detail::backend_of(xc).conv2d_forward(s, xc.data<float>(), wc.data<float>(),
                                        s.bias ? bc.data<float>() : nullptr, out.data<float>());
  return autograd::record(std::move(out), kOp, {x, weight, bias},
                          [s, xc, wc, need_x = x.requires_grad(), need_w = weight.requires_grad(),
                           need_b = bias.defined() && bias.requires_grad()](const Tensor& g) {
                            const Tensor gc = g.contiguous();
                            Tensor dx = need_x ? detail::empty_on(gc, xc.shape()) : Tensor();
                            Tensor dw = need_w ? detail::empty_on(gc, wc.shape()) : Tensor();
                            Tensor db = need_b ? detail::empty_on(gc, {s.c_out}) : Tensor();
                            detail::backend_of(gc).conv2d_backward(
                                s, xc.data<float>(), wc.data<float>(), gc.data<float>(),
                                need_x ? dx.data<float>() : nullptr,
                                need_w ? dw.data<float>() : nullptr,
                                need_b ? db.data<float>() : nullptr);
                            return autograd::TensorList{dx, dw, db};
                          });
}

}  // namespace

Tensor conv2d(const Tensor& x, const Tensor& weight, const Tensor& bias,
              const Conv2dOptions& options) {
  detail::require_floating(kOp, x, "x");
  detail::require_floating(kOp, weight, "weight");
  if (bias.defined()) detail::require_floating(kOp, bias, "bias");
  detail::require_same_device(kOp, {&x, &weight, &bias});
  backend::Conv2dShape s = checked_shape(x, weight, bias, options);
  s.allow_tf32 = matmul_precision() == MatmulPrecision::bf16;
  return conv2d_checked(x, backend_weight(weight, s), bias, s);
}

}  // namespace rig::ops
