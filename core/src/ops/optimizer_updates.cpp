// In-place updates and statistics over flat buffers (no autograd): the
// optimizer updates, the gradient norm, clipping, LARC. Shape, dtype and
// layout checks, then the device's fused kernel.
#include <initializer_list>
#include <stdexcept>
#include <vector>

#include <fmt/format.h>

#include "ops/op_util.hpp"
#include "rig/ops.hpp"

namespace rig::ops {

namespace {

// A flat buffer of numel elements of one of `allowed`, contiguous.
void require_flat(std::string_view op, const Tensor& t, std::string_view role, std::int64_t numel,
                  std::initializer_list<DType> allowed) {
  detail::require_dtype(op, t, role, allowed);
  if (!t.is_contiguous() || t.numel() != numel) {
    throw std::invalid_argument(fmt::format("{}: {} must be contiguous with {} elements, got {}{}",
                                            op, role, numel, detail::shape_str(t),
                                            t.is_contiguous() ? "" : " (strided)"));
  }
}

void require_flat_f32(std::string_view op, const Tensor& t, std::string_view role,
                      std::int64_t numel) {
  require_flat(op, t, role, numel, {DType::f32});
}

void require_slices_inside(std::string_view op, const std::vector<FlatSlice>& slices,
                           std::int64_t numel) {
  for (const FlatSlice& slice : slices) {
    if (slice.offset < 0 || slice.size < 0 || slice.offset + slice.size > numel) {
      throw std::invalid_argument(fmt::format("{}: slice [{}, {}) outside the {} elements", op,
                                              slice.offset, slice.offset + slice.size, numel));
    }
  }
}

// Where an update reads its gradients: mixed.grads16 (checked) unscaled as
// read, else the f32 grads.
GradientSource gradient_source(std::string_view op, const Tensor& grads,
                               const MixedPrecisionStep& mixed, std::int64_t n) {
  if (!mixed.grads16.defined()) {
    require_flat_f32(op, grads, "grads", n);
    return {grads.raw_data(), DType::f32, 1.0F};
  }
  require_flat(op, mixed.grads16, "mixed.grads16", n, {DType::f16, DType::bf16});
  return {mixed.grads16.raw_data(), mixed.grads16.dtype(), mixed.unscale};
}

// Where an update publishes its new values: mixed.publish (checked), or nowhere.
PublishedValues published_values(std::string_view op, const MixedPrecisionStep& mixed,
                                 std::int64_t n) {
  if (!mixed.publish.defined()) return {};
  require_flat(op, mixed.publish, "mixed.publish", n, {DType::f16, DType::bf16});
  Tensor out = mixed.publish;  // a handle: its data is written
  return {out.raw_data(), out.dtype()};
}

}  // namespace

void adam_update(Tensor& values, const Tensor& grads, Tensor& exp_avg, Tensor& exp_avg_sq,
                 Tensor& max_exp_avg_sq, const AdamUpdate& update,
                 const MixedPrecisionStep& mixed) {
  constexpr std::string_view kOp = "adam_update";
  detail::require_defined(kOp, values, "values");
  const std::int64_t n = values.numel();
  require_flat_f32(kOp, values, "values", n);
  const GradientSource source = gradient_source(kOp, grads, mixed, n);
  require_flat_f32(kOp, exp_avg, "exp_avg", n);
  require_flat_f32(kOp, exp_avg_sq, "exp_avg_sq", n);
  const bool amsgrad = max_exp_avg_sq.defined();
  if (amsgrad) require_flat_f32(kOp, max_exp_avg_sq, "max_exp_avg_sq", n);
  const PublishedValues publish = published_values(kOp, mixed, n);
  detail::require_same_device(kOp, {&values, &grads, &exp_avg, &exp_avg_sq, &max_exp_avg_sq,
                                    &mixed.grads16, &mixed.publish});
  detail::backend_of(values).adam_update(
      n, values.data<float>(), source, exp_avg.data<float>(), exp_avg_sq.data<float>(),
      amsgrad ? max_exp_avg_sq.data<float>() : nullptr, update, publish);
}

void sgd_update(Tensor& values, const Tensor& grads, Tensor& momentum_buffer,
                const SgdUpdate& update, const MixedPrecisionStep& mixed) {
  constexpr std::string_view kOp = "sgd_update";
  detail::require_defined(kOp, values, "values");
  const std::int64_t n = values.numel();
  require_flat_f32(kOp, values, "values", n);
  const GradientSource source = gradient_source(kOp, grads, mixed, n);
  if (momentum_buffer.defined()) require_flat_f32(kOp, momentum_buffer, "momentum_buffer", n);
  const PublishedValues publish = published_values(kOp, mixed, n);
  detail::require_same_device(kOp,
                              {&values, &grads, &momentum_buffer, &mixed.grads16, &mixed.publish});
  detail::backend_of(values).sgd_update(
      n, values.data<float>(), source,
      momentum_buffer.defined() ? momentum_buffer.data<float>() : nullptr, update, publish);
}

void novograd_update(Tensor& values, const Tensor& grads, Tensor& momentum, Tensor& grads_ema,
                     const std::vector<FlatSlice>& slices, const NovogradUpdate& update) {
  constexpr std::string_view kOp = "novograd_update";
  detail::require_defined(kOp, values, "values");
  const std::int64_t n = values.numel();
  require_flat_f32(kOp, values, "values", n);
  require_flat_f32(kOp, grads, "grads", n);
  require_flat_f32(kOp, momentum, "momentum", n);
  require_flat_f32(kOp, grads_ema, "grads_ema", static_cast<std::int64_t>(slices.size()));
  detail::require_same_device(kOp, {&values, &grads, &momentum, &grads_ema});
  require_slices_inside(kOp, slices, n);
  detail::backend_of(values).novograd_update(
      values.data<float>(), grads.data<float>(), momentum.data<float>(), grads_ema.data<float>(),
      slices.data(), static_cast<std::int64_t>(slices.size()), update);
}

GradientStats gradient_stats(const Tensor& grads, const Tensor& loss, float scale) {
  constexpr std::string_view kOp = "gradient_stats";
  detail::require_defined(kOp, grads, "grads");
  require_flat(kOp, grads, "grads", grads.numel(), {DType::f32, DType::f16, DType::bf16});
  if (loss.defined()) require_flat_f32(kOp, loss, "loss", 1);
  detail::require_same_device(kOp, {&grads, &loss});
  return detail::backend_of(grads).gradient_stats({grads.raw_data(), grads.dtype(), scale},
                                                  grads.numel(),
                                                  loss.defined() ? loss.data<float>() : nullptr);
}

namespace {

void require_records(std::string_view op, const Tensor& records, std::int64_t slots_needed) {
  detail::require_dtype(op, records, "records", {DType::i64});
  if (records.dim() != 1 || !records.is_contiguous() ||
      records.numel() < slots_needed * kGradientStatsWords) {
    throw std::invalid_argument(
        fmt::format("{}: records must be one contiguous axis of at least {} x {} elements, got {}",
                    op, slots_needed, kGradientStatsWords, detail::shape_str(records)));
  }
}

// Record `slot` of `records`, checked (gradient_stats_into and clipping share it).
GradientStats* record_at(std::string_view op, const Tensor& records, std::int64_t slot) {
  detail::require_defined(op, records, "records");
  if (slot < 0) throw std::invalid_argument(fmt::format("{}: slot {} < 0", op, slot));
  require_records(op, records, slot + 1);
  return reinterpret_cast<GradientStats*>(const_cast<std::byte*>(records.raw_data())) + slot;
}

}  // namespace

void gradient_stats_into(const Tensor& grads, const Tensor& loss, Tensor& records,
                         std::int64_t slot, float scale) {
  constexpr std::string_view kOp = "gradient_stats_into";
  detail::require_defined(kOp, grads, "grads");
  require_flat(kOp, grads, "grads", grads.numel(), {DType::f32, DType::f16, DType::bf16});
  if (loss.defined()) require_flat_f32(kOp, loss, "loss", 1);
  GradientStats* out = record_at(kOp, records, slot);
  detail::require_same_device(kOp, {&grads, &loss, &records});
  detail::backend_of(grads).gradient_stats_to({grads.raw_data(), grads.dtype(), scale},
                                              grads.numel(),
                                              loss.defined() ? loss.data<float>() : nullptr, out);
}

void clip_by_recorded_norm_(Tensor& grads, const Tensor& records, std::int64_t slot,
                            double max_norm) {
  constexpr std::string_view kOp = "clip_by_recorded_norm_";
  detail::require_defined(kOp, grads, "grads");
  require_flat_f32(kOp, grads, "grads", grads.numel());
  const GradientStats* stats = record_at(kOp, records, slot);
  detail::require_same_device(kOp, {&grads, &records});
  detail::backend_of(grads).clip_by_norm(grads.data<float>(), grads.numel(), stats, max_norm);
}

std::vector<GradientStats> read_gradient_stats(const Tensor& records, std::int64_t count) {
  constexpr std::string_view kOp = "read_gradient_stats";
  detail::require_defined(kOp, records, "records");
  require_records(kOp, records, count);
  std::vector<GradientStats> stats(static_cast<std::size_t>(count));
  if (count == 0) return stats;
  detail::backend_of(records).read_gradient_stats(
      reinterpret_cast<const GradientStats*>(records.data<std::int64_t>()), count, stats.data());
  return stats;
}

void scale_(Tensor& t, float factor) {
  constexpr std::string_view kOp = "scale_";
  detail::require_defined(kOp, t, "t");
  require_flat_f32(kOp, t, "t", t.numel());
  detail::backend_of(t).unary(backend::Unary::mul_scalar, t.data<float>(), t.data<float>(),
                              t.numel(), factor);
}

void add_(Tensor& t, const Tensor& other) {
  constexpr std::string_view kOp = "add_";
  detail::require_defined(kOp, t, "t");
  detail::require_defined(kOp, other, "other");
  require_flat_f32(kOp, t, "t", t.numel());
  require_flat_f32(kOp, other, "other", t.numel());
  detail::require_same_device(kOp, {&t, &other});
  const Shape shape{t.numel()};
  const Strides dense = contiguous_strides(shape);
  const auto plan = backend::make_strided_plan<3>(shape, {&dense, &dense, &dense});
  detail::backend_of(t).binary(backend::Binary::add, plan, t.data<float>(), other.data<float>(),
                               t.data<float>());
}

void larc_(Tensor& grads, const Tensor& values, const std::vector<FlatSlice>& slices,
           const LarcOptions& options) {
  constexpr std::string_view kOp = "larc_";
  detail::require_defined(kOp, grads, "grads");
  const std::int64_t n = grads.numel();
  require_flat_f32(kOp, grads, "grads", n);
  require_flat_f32(kOp, values, "values", n);
  detail::require_same_device(kOp, {&grads, &values});
  require_slices_inside(kOp, slices, n);
  detail::backend_of(grads).larc(values.data<float>(), grads.data<float>(), slices.data(),
                                 static_cast<std::int64_t>(slices.size()), options);
}

}  // namespace rig::ops
