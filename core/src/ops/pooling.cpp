// max_pool2d, avg_pool2d, global_avg_pool2d: checks, autograd, dispatch (cpu/pool.hpp),
// on NCHW or (channels_last) NHWC tensors.
#include <cstdint>
#include <limits>
#include <stdexcept>

#include <fmt/format.h>

#include "ops/op_util.hpp"
#include "rig/autograd.hpp"
#include "rig/ops.hpp"

namespace rig::ops {

namespace {

// x's image axes: NCHW, or NHWC when channels_last.
struct Layout {
  std::int64_t n, c, h, w;
};

Layout require_image(const char* op, const Tensor& x, bool channels_last) {
  detail::require_floating(op, x, "x");
  detail::require_same_device(op, {&x});
  if (x.dim() != 4) {
    throw std::invalid_argument(
        fmt::format("{}: x {} must be {}", op, to_string(x.shape()),
                    channels_last ? "[N, H, W, C] (channels last)" : "[N, C, H, W]"));
  }
  if (channels_last) return {x.size(0), x.size(3), x.size(1), x.size(2)};
  return {x.size(0), x.size(1), x.size(2), x.size(3)};
}

// y's shape: [N, C, out_h, out_w], or [N, out_h, out_w, C] channels last.
Shape pooled_shape(const Tensor& x, const backend::Pool2dShape& s) {
  if (s.channels_last) return {x.size(0), s.out_h, s.out_w, x.size(3)};
  return {x.size(0), x.size(1), s.out_h, s.out_w};
}

backend::Pool2dShape checked_shape(const char* op, const Tensor& x, const Pool2dOptions& o) {
  const Layout l = require_image(op, x, o.channels_last);
  // The message prefix, built only on failure.
  const auto what = [&] {
    return fmt::format("{}: x {}{} with kernel {}x{}, stride {}x{}, padding {}x{}", op,
                       to_string(x.shape()), o.channels_last ? " (channels last)" : "", o.kernel_h,
                       o.kernel_w, o.stride_h, o.stride_w, o.pad_h, o.pad_w);
  };
  if (o.kernel_h < 1 || o.kernel_w < 1 || o.stride_h < 1 || o.stride_w < 1) {
    throw std::invalid_argument(what() + ": kernel and stride must be >= 1");
  }
  // As PyTorch: a window must overlap the image.
  if (o.pad_h < 0 || o.pad_w < 0 || 2 * o.pad_h > o.kernel_h || 2 * o.pad_w > o.kernel_w) {
    throw std::invalid_argument(what() + ": padding must be >= 0 and at most half the kernel");
  }
  backend::Pool2dShape s;
  s.planes = l.n * l.c;
  s.h = l.h;
  s.w = l.w;
  s.channels_last = o.channels_last;
  s.channels = o.channels_last ? l.c : 1;
  s.kernel_h = o.kernel_h;
  s.kernel_w = o.kernel_w;
  s.stride_h = o.stride_h;
  s.stride_w = o.stride_w;
  s.pad_h = o.pad_h;
  s.pad_w = o.pad_w;
  if (s.h * s.w > std::numeric_limits<std::int32_t>::max()) {
    throw std::invalid_argument(what() + ": a plane of more than 2^31 pixels is not supported");
  }
  if (s.h + 2 * s.pad_h < s.kernel_h || s.w + 2 * s.pad_w < s.kernel_w) {
    throw std::invalid_argument(what() + ": the padded input is smaller than the kernel");
  }
  s.out_h = (s.h + 2 * s.pad_h - s.kernel_h) / s.stride_h + 1;
  s.out_w = (s.w + 2 * s.pad_w - s.kernel_w) / s.stride_w + 1;
  return s;
}

// The op in f32: f16 / bf16 inputs are computed in f32 and rounded back.
template <class F>
Tensor in_f32(const Tensor& x, F f) {
  if (x.dtype() == DType::f32) return f(x);
  return f(detail::as_f32(x)).to(x.dtype());
}

// max_pool2d on 16-bit x as it is, on a back end that reads 16-bit storage:
// the f32 path's bits without its f32 copies of x, y, dy and dx.
Tensor max_pool2d_16bit(const Tensor& x, const backend::Pool2dShape& s) {
  const Tensor xc = x.detach().contiguous();
  const DType type = x.dtype();
  const Shape out_shape = pooled_shape(x, s);
  Tensor out = detail::empty_on(xc, out_shape, type);
  const bool need_grad = grad_mode_enabled() && x.requires_grad();
  Tensor index = need_grad ? detail::empty_on(xc, out_shape, DType::i32) : Tensor();
  detail::backend_of(xc).max_pool2d_forward_16(s, type, xc.raw_data(), out.raw_data(),
                                               need_grad ? index.data<std::int32_t>() : nullptr);
  if (!need_grad) return out;
  return autograd::record(std::move(out), "max_pool2d", {x},
                          [s, type, index, shape = xc.shape()](const Tensor& g) {
                            const Tensor gc = g.to(type).contiguous();
                            Tensor dx = detail::empty_on(gc, shape, type);
                            detail::backend_of(gc).max_pool2d_backward_16(
                                s, type, index.data<std::int32_t>(), gc.raw_data(), dx.raw_data());
                            return autograd::TensorList{dx};
                          });
}

}  // namespace

Tensor max_pool2d(const Tensor& x, const Pool2dOptions& options) {
  const backend::Pool2dShape s = checked_shape("max_pool2d", x, options);
  if (x.dtype() != DType::f32 && detail::backend_of(x).reads_16bit_storage()) {
    return max_pool2d_16bit(x, s);
  }
  return in_f32(x, [&](const Tensor& xf) {
    const Tensor xc = xf.detach().contiguous();
    const Shape out_shape = pooled_shape(x, s);
    Tensor out = detail::empty_on(xc, out_shape);
    // The argmax of every window (i32, 4 bytes an output) when backward will need it.
    const bool need_grad = grad_mode_enabled() && xf.requires_grad();
    Tensor index = need_grad ? detail::empty_on(xc, out_shape, DType::i32) : Tensor();
    detail::backend_of(xc).max_pool2d_forward(s, xc.data<float>(), out.data<float>(),
                                              need_grad ? index.data<std::int32_t>() : nullptr);
    if (!need_grad) return out;
    return autograd::record(
        std::move(out), "max_pool2d", {xf}, [s, index, shape = xc.shape()](const Tensor& g) {
          const Tensor gc = g.contiguous();
          Tensor dx = detail::empty_on(gc, shape);
          detail::backend_of(gc).max_pool2d_backward(s, index.data<std::int32_t>(),
                                                     gc.data<float>(), dx.data<float>());
          return autograd::TensorList{dx};
        });
  });
}

Tensor avg_pool2d(const Tensor& x, const Pool2dOptions& options) {
  const backend::Pool2dShape s = checked_shape("avg_pool2d", x, options);
  return in_f32(x, [&](const Tensor& xf) {
    const Tensor xc = xf.detach().contiguous();
    Tensor out = detail::empty_on(xc, pooled_shape(x, s));
    detail::backend_of(xc).avg_pool2d_forward(s, xc.data<float>(), out.data<float>());
    return autograd::record(
        std::move(out), "avg_pool2d", {xf}, [s, shape = xc.shape()](const Tensor& g) {
          const Tensor gc = g.contiguous();
          Tensor dx = detail::empty_on(gc, shape);
          detail::backend_of(gc).avg_pool2d_backward(s, gc.data<float>(), dx.data<float>());
          return autograd::TensorList{dx};
        });
  });
}

Tensor global_avg_pool2d(const Tensor& x, bool channels_last) {
  const Layout l = require_image("global_avg_pool2d", x, channels_last);
  const std::int64_t planes = l.n * l.c;
  const std::int64_t size = l.h * l.w;
  // Planes interleaved element by element (Backend::global_avg_pool_forward).
  const std::int64_t channels = channels_last ? l.c : 1;
  if (size == 0) {
    throw std::invalid_argument(fmt::format("global_avg_pool2d: x {}{} has no pixels to average",
                                            to_string(x.shape()),
                                            channels_last ? " (channels last)" : ""));
  }
  if (x.dtype() != DType::f32 && detail::backend_of(x).reads_16bit_storage()) {
    // 16-bit x as it is: the f32 path's bits, rounded once (no f32 copies).
    const DType type = x.dtype();
    const Tensor xc = x.detach().contiguous();
    Tensor out = detail::empty_on(xc, {l.n, l.c}, type);
    detail::backend_of(xc).global_avg_pool_forward_16(planes, size, channels, type, xc.raw_data(),
                                                      out.raw_data());
    if (!grad_mode_enabled() || !x.requires_grad()) return out;
    return autograd::record(std::move(out), "global_avg_pool2d", {x},
                            [planes, size, channels, type, shape = xc.shape()](const Tensor& g) {
                              const Tensor gc = g.to(type).contiguous();
                              Tensor dx = detail::empty_on(gc, shape, type);
                              detail::backend_of(gc).global_avg_pool_backward_16(
                                  planes, size, channels, type, gc.raw_data(), dx.raw_data());
                              return autograd::TensorList{dx};
                            });
  }
  return in_f32(x, [&](const Tensor& xf) {
    const Tensor xc = xf.detach().contiguous();
    Tensor out = detail::empty_on(xc, {l.n, l.c});
    detail::backend_of(xc).global_avg_pool_forward(planes, size, channels, xc.data<float>(),
                                                   out.data<float>());
    return autograd::record(std::move(out), "global_avg_pool2d", {xf},
                            [planes, size, channels, shape = xc.shape()](const Tensor& g) {
                              const Tensor gc = g.contiguous();
                              Tensor dx = detail::empty_on(gc, shape);
                              detail::backend_of(gc).global_avg_pool_backward(
                                  planes, size, channels, gc.data<float>(), dx.data<float>());
                              return autograd::TensorList{dx};
                            });
  });
}

}  // namespace rig::ops
