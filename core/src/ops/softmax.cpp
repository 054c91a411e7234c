// softmax and log_softmax along any axis with an optional u8 keep-mask,
// fused per row (cpu/softmax). Another axis than the last is moved last by a
// transposed copy. f16/bf16 inputs are computed in f32 and cast back.
#include <stdexcept>

#include <fmt/format.h>

#include "ops/op_util.hpp"
#include "rig/autograd.hpp"
#include "rig/ops.hpp"

namespace rig::ops {

namespace {

Tensor softmax_impl(const char* name, const Tensor& x, std::int64_t axis, const Tensor& mask,
                    bool log) {
  detail::require_floating(name, x, "x");
  if (mask.defined()) detail::require_dtype(name, mask, "mask", {DType::u8});
  detail::require_same_device(name, {&x, &mask});
  const std::int64_t ax = detail::normalize_axis(axis, x.dim(), name, x.shape());
  if (mask.defined()) {
    bool ok = mask.dim() <= x.dim();
    for (std::int64_t d = 1; ok && d <= mask.dim(); ++d) {
      ok = mask.size(-d) == 1 || mask.size(-d) == x.size(-d);
    }
    if (!ok) {
      throw std::invalid_argument(fmt::format("{}: mask {} does not broadcast to x {}", name,
                                              to_string(mask.shape()), to_string(x.shape())));
    }
  }
  if (x.dtype() != DType::f32) {
    return softmax_impl(name, x.to(DType::f32), axis, mask, log).to(x.dtype());
  }
  if (ax != x.dim() - 1) {
    const Tensor m = mask.defined() ? mask.expand(x.shape()).transpose(ax, -1) : mask;
    return softmax_impl(name, x.transpose(ax, -1), -1, m, log).transpose(ax, -1).contiguous();
  }

  const Tensor xc = x.detach().contiguous();
  Tensor y = detail::empty_on(xc, xc.shape());
  const std::int64_t n = x.size(-1);
  if (y.numel() > 0) {
    const Shape lead(xc.shape().begin(), xc.shape().end() - 1);
    Strides x_lead = contiguous_strides(xc.shape());  // in elements of x
    x_lead.pop_back();
    Strides m_lead(lead.size(), 0);
    std::int64_t m_inner = 0;
    if (mask.defined()) {
      const Strides full = backend::broadcast_strides(mask.shape(), mask.strides(), xc.shape());
      m_lead.assign(full.begin(), full.end() - 1);
      m_inner = full.back();
    }
    const auto plan = backend::make_row_plan<2>(lead, {&x_lead, &m_lead}, n, {1, m_inner});
    detail::backend_of(xc).softmax_forward(plan, xc.data<float>(),
                                           mask.defined() ? mask.data<std::uint8_t>() : nullptr,
                                           y.data<float>(), log);
  }
  if (!grad_mode_enabled() || !x.requires_grad()) return y;
  const Tensor saved = y.detach();
  return autograd::record(std::move(y), name, {x}, [saved, n, log](const Tensor& g) {
    const Tensor gc = g.contiguous();
    Tensor dx = detail::empty_on(gc, gc.shape());
    if (dx.numel() > 0) {
      detail::backend_of(gc).softmax_backward(saved.data<float>(), gc.data<float>(),
                                              dx.data<float>(), dx.numel() / n, n, log);
    }
    return autograd::TensorList{dx};
  });
}

}  // namespace

Tensor softmax(const Tensor& x, std::int64_t axis, const Tensor& mask) {
  return softmax_impl("softmax", x, axis, mask, false);
}

Tensor log_softmax(const Tensor& x, std::int64_t axis, const Tensor& mask) {
  return softmax_impl("log_softmax", x, axis, mask, true);
}

}  // namespace rig::ops
