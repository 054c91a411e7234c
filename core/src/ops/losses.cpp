// Losses: mse_loss, cross_entropy (torch semantics, label smoothing) and
// padded_cross_entropy (OpenSeq2Seq's PaddedCrossEntropyLossWithSmoothing),
// the last two fused (log-softmax + NLL, forward and backward) in one
// backend kernel each. Logits in f16/bf16 are read as they are where the
// back end can (CUDA: the gradient comes back in their dtype), else through
// an f32 copy; the math is f32 either way. Losses are f32 scalars on the
// logits' device, and backward never reads the device. The logits' gradient
// is written over them when nothing else holds them.
#include <cmath>
#include <stdexcept>

#include <fmt/format.h>

#include "ops/op_util.hpp"
#include "rig/autograd.hpp"
#include "rig/math/cross_entropy.hpp"
#include "rig/ops.hpp"

namespace rig::ops {

namespace {

// Labels as contiguous i64, each checked to be in [0, classes).
Tensor checked_labels(const char* op, const Tensor& labels, std::int64_t classes) {
  const Tensor l = labels.dtype() == DType::i64 ? labels.contiguous() : labels.to(DType::i64);
  detail::check_index_range(
      l, classes,
      [](std::int64_t position, std::int64_t value, const char* name, const Shape& shape,
         std::int64_t size) {
        return fmt::format("{}: label {} at position {} of labels {} is out of range [0,{})", name,
                           value, position, to_string(shape), size);
      },
      op, labels.shape(), classes);
  return l;
}

void check_smoothing(const char* op, float s) {
  if (!(s >= 0.0F && s <= 1.0F)) {
    throw std::invalid_argument(fmt::format("{}: label_smoothing {} must be in [0,1]", op, s));
  }
}

// Fused forward + recorded backward for sum_r scale_r * (xent_r - constant)
// over logits [rows, classes] (already f32, contiguous). `row_scale` (may be
// undefined: every row scaled by `scale`) multiplies row r's term.
struct XentResult {
  Tensor loss_rows;  // [rows] xent_r
  Tensor lse;        // [rows]
};

XentResult xent_forward(const Tensor& logits, const Tensor& labels, float on, float off) {
  const std::int64_t rows = logits.size(0);
  const std::int64_t classes = logits.size(1);
  XentResult r{detail::empty_on(logits, {rows}), detail::empty_on(logits, {rows})};
  backend::Backend& be = detail::backend_of(logits);
  if (logits.dtype() == DType::f32) {
    be.cross_entropy_forward(logits.data<float>(), labels.data<std::int64_t>(), rows, classes, on,
                             off, r.loss_rows.data<float>(), r.lse.data<float>());
  } else {
    be.cross_entropy_forward_16(logits.dtype(), logits.data<std::uint16_t>(),
                                labels.data<std::int64_t>(), rows, classes, on, off,
                                r.loss_rows.data<float>(), r.lse.data<float>());
  }
  return r;
}

// dx (x's dtype and shape) of the loss over logits x [rows, classes]: every
// element written. Written over x itself where nothing else reaches x's
// memory (the loss's backward, which runs once, holds the logits' last
// handle): the logits' gradient then takes no memory of its own, as llm.c's
// fused classifier (each element is read before it is written, by the one
// thread that writes it).
Tensor xent_backward(const Tensor& x, const Shape& shape, const Tensor& labels, const Tensor& lse,
                     const float* row_scale, const float* scale_factor, float on, float off) {
  const std::int64_t rows = x.size(0);
  const std::int64_t classes = x.size(1);
  if (rows == 0) return detail::zeros_on(x, shape, x.dtype());
  Tensor dx = x.sole_owner() ? x.reshape(shape) : detail::empty_on(x, shape, x.dtype());
  backend::Backend& be = detail::backend_of(x);
  if (x.dtype() == DType::f32) {
    be.cross_entropy_backward(x.data<float>(), labels.data<std::int64_t>(), lse.data<float>(),
                              row_scale, 1.0F, scale_factor, rows, classes, on, off,
                              dx.data<float>());
  } else {
    be.cross_entropy_backward_16(x.dtype(), x.data<std::uint16_t>(), labels.data<std::int64_t>(),
                                 lse.data<float>(), row_scale, 1.0F, scale_factor, rows, classes,
                                 on, off, dx.data<std::uint16_t>());
  }
  return dx;
}

// Whether the loss reads LOGITS as they are: f32, or 16-bit on a back end
// that reads them (else the ops compute on an f32 copy).
bool reads_as_is(const Tensor& logits) {
  return logits.dtype() == DType::f32 ||
         ((logits.dtype() == DType::bf16 || logits.dtype() == DType::f16) &&
          detail::backend_of(logits).cross_entropy_reads_16bit());
}

}  // namespace

Tensor mse_loss(const Tensor& prediction, const Tensor& target) {
  detail::require_floating("mse_loss", prediction, "prediction");
  detail::require_floating("mse_loss", target, "target");
  detail::require_same_device("mse_loss", {&prediction, &target});
  if (prediction.shape() != target.shape()) {
    throw std::invalid_argument(fmt::format("mse_loss: prediction {} vs target {}: shapes differ",
                                            to_string(prediction.shape()),
                                            to_string(target.shape())));
  }
  const std::int64_t n = prediction.numel();
  if (n == 0) {
    throw std::invalid_argument(
        fmt::format("mse_loss: empty prediction {}", to_string(prediction.shape())));
  }
  if (prediction.dtype() != DType::f32 || target.dtype() != DType::f32) {
    return mse_loss(detail::as_f32(prediction), detail::as_f32(target));
  }
  const Shape& shape = prediction.shape();
  backend::Backend& be = detail::backend_of(prediction);
  Tensor diff = detail::empty_on(prediction, shape);
  const Strides so = contiguous_strides(shape);
  const auto plan =
      backend::make_strided_plan<3>(shape, {&so, &prediction.strides(), &target.strides()});
  be.binary(backend::Binary::sub, plan, prediction.data<float>(), target.data<float>(),
            diff.data<float>());
  Tensor loss = detail::empty_on(prediction, {});
  be.sum_squares(diff.data<float>(), n, static_cast<double>(n), loss.data<float>());
  return autograd::record(std::move(loss), "mse_loss", {prediction, target},
                          [diff, n, need_p = prediction.requires_grad(),
                           need_t = target.requires_grad()](const Tensor& g) {
                            // 2 g / n, on the device, times diff.
                            const Tensor scale = div(
                                mul_scalar(g, 2.0F),
                                Tensor::full({}, static_cast<float>(n), DType::f32, g.device()));
                            const Tensor dp = need_p ? mul(diff, scale) : Tensor();
                            const Tensor dt = need_t ? mul(diff, neg(scale)) : Tensor();
                            return autograd::TensorList{dp, dt};
                          });
}

Tensor cross_entropy(const Tensor& logits, const Tensor& labels, float label_smoothing) {
  detail::require_floating("cross_entropy", logits, "logits");
  detail::require_dtype("cross_entropy", labels, "labels", {DType::i64, DType::i32});
  detail::require_same_device("cross_entropy", {&logits, &labels});
  if (logits.dim() != 2 || labels.dim() != 1 || labels.size(0) != logits.size(0)) {
    throw std::invalid_argument(
        fmt::format("cross_entropy: logits {} and labels {}: expected [N,C] logits and [N] labels",
                    to_string(logits.shape()), to_string(labels.shape())));
  }
  check_smoothing("cross_entropy", label_smoothing);
  const std::int64_t rows = logits.size(0);
  const std::int64_t classes = logits.size(1);
  if (rows == 0 || classes == 0) {
    throw std::invalid_argument(
        fmt::format("cross_entropy: empty logits {}", to_string(logits.shape())));
  }
  if (!reads_as_is(logits)) return cross_entropy(logits.to(DType::f32), labels, label_smoothing);
  const Tensor y = checked_labels("cross_entropy", labels, classes);
  // torch: target = (1 - s) one_hot + s / C.
  const math::SmoothedTargets targets = math::torch_smoothing(label_smoothing, classes);
  const float on = targets.on;
  const float off = targets.off;
  const Tensor x = logits.detach().contiguous();
  const XentResult r = xent_forward(x, y, on, off);
  Tensor loss = detail::empty_on(x, {});
  detail::backend_of(x).sum_all(r.loss_rows.data<float>(), rows, static_cast<double>(rows),
                                loss.data<float>());
  return autograd::record(
      std::move(loss), "cross_entropy", {logits, labels},
      [x, y, lse = r.lse, rows, on, off](const Tensor& g) {
        // g / rows, on the device: the factor of every row's gradient.
        const Tensor scale = div(
            g.to(DType::f32), Tensor::full({}, static_cast<float>(rows), DType::f32, g.device()));
        return autograd::TensorList{
            xent_backward(x, x.shape(), y, lse, nullptr, scale.data<float>(), on, off), Tensor()};
      });
}

// OpenSeq2Seq, open_seq2seq/losses/sequence_loss.py, PaddedCrossEntropyLossWithSmoothing:
//   confidence = 1 - s
//   low_confidence = (1 - confidence) / (V - 1)
//   soft_targets = one_hot(labels, V, on_value=confidence, off_value=low_confidence)
//   xentropy = softmax_cross_entropy_with_logits_v2(logits, soft_targets)
//   normalizing_constant = -(confidence log(confidence)
//                            + (V - 1) low_confidence log(low_confidence + 1e-20))
//   xentropy -= normalizing_constant
//   weights = not_equal(labels, 0)            (here: the caller's `weights`)
//   xentropy = xentropy * weights
//   loss = sum(xentropy * weights) / sum(weights)
// so the weights enter the numerator squared (the same for 0/1 weights). One
// deviation: when sum(weights) is 0 (all padding) the loss is 0 with zero
// gradients instead of TensorFlow's NaN.
Tensor padded_cross_entropy(const Tensor& logits, const Tensor& labels, const Tensor& weights,
                            float label_smoothing) {
  constexpr const char* kOp = "padded_cross_entropy";
  detail::require_floating(kOp, logits, "logits");
  detail::require_dtype(kOp, labels, "labels", {DType::i64, DType::i32});
  detail::require_defined(kOp, weights, "weights");
  detail::require_same_device(kOp, {&logits, &labels, &weights});
  if (logits.dim() != 3 || labels.shape() != Shape{logits.size(0), logits.size(1)} ||
      weights.shape() != labels.shape()) {
    throw std::invalid_argument(fmt::format(
        "{}: logits {}, labels {} and weights {}: expected [B,T,V] logits and [B,T] labels and "
        "weights",
        kOp, to_string(logits.shape()), to_string(labels.shape()), to_string(weights.shape())));
  }
  check_smoothing(kOp, label_smoothing);
  const std::int64_t vocab = logits.size(2);
  const std::int64_t rows = labels.numel();
  if (vocab == 0) {
    throw std::invalid_argument(
        fmt::format("{}: empty vocabulary in logits {}", kOp, to_string(logits.shape())));
  }
  if (!reads_as_is(logits)) {
    return padded_cross_entropy(logits.to(DType::f32), labels, weights, label_smoothing);
  }
  const Tensor w = weights.dtype() == DType::f32 ? weights : weights.to(DType::f32);
  const Tensor y = checked_labels(kOp, labels, vocab).reshape({rows});

  // In double, then rounded, as TF mixes Python floats into f32 tensors.
  const double confidence = 1.0 - static_cast<double>(label_smoothing);
  const double low = vocab > 1 ? (1.0 - confidence) / static_cast<double>(vocab - 1) : 0.0;
  const double constant = -((confidence > 0.0 ? confidence * std::log(confidence) : 0.0) +
                            static_cast<double>(vocab - 1) * low * std::log(low + 1e-20));
  const math::SmoothedTargets targets = math::openseq2seq_smoothing(label_smoothing, vocab);
  const float on = targets.on;
  const float off = targets.off;

  const Tensor x = logits.detach().contiguous().reshape({rows, vocab});
  const Tensor wc = w.detach().contiguous();
  XentResult r{detail::empty_on(x, {rows}), detail::empty_on(x, {rows})};
  if (rows > 0) r = xent_forward(x, y, on, off);
  Tensor loss = detail::empty_on(x, {});
  detail::backend_of(x).padded_loss(r.loss_rows.data<float>(), wc.data<float>(), rows, constant,
                                    loss.data<float>());
  return autograd::record(
      std::move(loss), kOp, {logits, labels, weights},
      [x, y, wc, r, rows, on, off, constant, shape = logits.shape(),
       need_x = logits.requires_grad(), need_w = weights.requires_grad()](const Tensor& g) {
        backend::Backend& be = detail::backend_of(x);
        const Tensor upstream = g.to(DType::f32).contiguous();
        Tensor row_scale = detail::empty_on(x, {rows});
        Tensor x_scale = detail::empty_on(x, {});
        Tensor dw = need_w ? detail::empty_on(x, wc.shape()) : Tensor();
        be.padded_loss_backward(r.loss_rows.data<float>(), wc.data<float>(), rows, constant,
                                upstream.data<float>(), row_scale.data<float>(),
                                x_scale.data<float>(), need_w ? dw.data<float>() : nullptr);
        const Tensor dx = need_x ? xent_backward(x, shape, y, r.lse, row_scale.data<float>(),
                                                 x_scale.data<float>(), on, off)
                                 : Tensor();
        return autograd::TensorList{dx, Tensor(), dw};
      });
}

}  // namespace rig::ops
