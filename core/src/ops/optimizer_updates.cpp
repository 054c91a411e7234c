// In-place optimizer updates over flat buffers (no autograd): shape, dtype
// and layout checks, then the device's fused kernel.
#include <stdexcept>

#include <fmt/format.h>

#include "cpu/optimizer_updates.hpp"
#include "ops/op_util.hpp"
#include "rig/ops.hpp"

namespace rig::ops {

namespace {

void require_flat_f32(std::string_view op, const Tensor& t, std::string_view role,
                      std::int64_t numel) {
  detail::require_dtype(op, t, role, {DType::f32});
  if (!t.is_contiguous() || t.numel() != numel) {
    throw std::invalid_argument(fmt::format("{}: {} must be contiguous with {} elements, got {}{}",
                                            op, role, numel, detail::shape_str(t),
                                            t.is_contiguous() ? "" : " (strided)"));
  }
}

}  // namespace

void adam_update(Tensor& values, const Tensor& grads, Tensor& exp_avg, Tensor& exp_avg_sq,
                 Tensor& max_exp_avg_sq, const AdamUpdate& update) {
  constexpr std::string_view kOp = "adam_update";
  detail::require_defined(kOp, values, "values");
  const std::int64_t n = values.numel();
  require_flat_f32(kOp, values, "values", n);
  require_flat_f32(kOp, grads, "grads", n);
  require_flat_f32(kOp, exp_avg, "exp_avg", n);
  require_flat_f32(kOp, exp_avg_sq, "exp_avg_sq", n);
  const bool amsgrad = max_exp_avg_sq.defined();
  if (amsgrad) require_flat_f32(kOp, max_exp_avg_sq, "max_exp_avg_sq", n);
  detail::require_same_cpu(kOp, {&values, &grads, &exp_avg, &exp_avg_sq, &max_exp_avg_sq});
  cpu::adam_update(n, values.data<float>(), grads.data<float>(), exp_avg.data<float>(),
                   exp_avg_sq.data<float>(), amsgrad ? max_exp_avg_sq.data<float>() : nullptr,
                   update);
}

}  // namespace rig::ops
