// embedding: rows of a [V, D] weight picked by integer ids.
#include <stdexcept>

#include <fmt/format.h>

#include "ops/op_util.hpp"
#include "rig/autograd.hpp"
#include "rig/ops.hpp"

namespace rig::ops {

namespace {

Tensor as_f32(const Tensor& g) {
  return g.dtype() == DType::f32 ? g.contiguous() : g.to(DType::f32).contiguous();
}

}  // namespace

Tensor embedding(const Tensor& weight, const Tensor& ids) {
  detail::require_defined("embedding", weight, "weight");
  detail::require_dtype("embedding", ids, "ids", {DType::i64, DType::i32});
  detail::require_same_device("embedding", {&weight, &ids});
  if (weight.dim() != 2) {
    throw std::invalid_argument(fmt::format("embedding: weight {} must be 2-D [vocabulary, dim]",
                                            to_string(weight.shape())));
  }
  const std::int64_t vocab = weight.size(0);
  const std::int64_t dim = weight.size(1);
  const Tensor flat = ids.detach().contiguous();
  const backend::ConstBuffer index{flat.raw_data(), flat.dtype(), flat.shape()};
  detail::check_index_range(
      flat, vocab,
      [](std::int64_t position, std::int64_t value, const Shape& ids_shape, std::int64_t size,
         const Shape& weight_shape) {
        return fmt::format(
            "embedding: id {} (position {} of ids {}) is out of range for vocabulary size {} "
            "(weight {})",
            value, position, to_string(ids_shape), size, to_string(weight_shape));
      },
      ids.shape(), vocab, weight.shape());
  Shape shape = ids.shape();
  shape.push_back(dim);
  const Tensor w = weight.detach().contiguous();
  Tensor out = detail::empty_on(w, shape, weight.dtype());
  detail::backend_of(w).index_select(w.raw_data(), dtype_size(w.dtype()), 1, vocab, dim, index,
                                     out.raw_data());
  return autograd::record(
      std::move(out), "embedding", {weight, ids},
      [flat, index, vocab, dim, weight](const Tensor& g) -> autograd::TensorList {
        // A parameter (a leaf whose gradient buffer exists, e.g. a view of
        // the flat gradient buffer): add the rows straight into it, as the
        // engine would, instead of building and adding a dense [V, D] gradient.
        const TensorImpl* w = weight.impl();
        if (!w->grad_fn && w->requires_grad && w->grad) {
          Tensor grad(w->grad);
          backend::Backend& be = detail::backend_of(grad);
          if (grad.is_contiguous() && grad.shape() == weight.shape()) {
            if (grad.dtype() == DType::f32) {
              const Tensor gc = as_f32(g);
              be.index_add(gc.data<float>(), 1, vocab, dim, index, grad.data<float>());
              return {Tensor(), Tensor()};
            }
            // A 16-bit model's gradient buffer (mixed precision), where the
            // back end adds into 16-bit storage: the rows' f32 sums rounded
            // and added, the dense path's values without its [V, D] passes.
            if ((grad.dtype() == DType::bf16 || grad.dtype() == DType::f16) &&
                be.reads_16bit_storage()) {
              const Tensor gc = g.dtype() == grad.dtype() ? g.contiguous() : as_f32(g);
              be.index_add_16(gc.dtype(), gc.raw_data(), 1, vocab, dim, index, grad.dtype(),
                              grad.raw_data());
              return {Tensor(), Tensor()};
            }
          }
        }
        const Tensor gc = as_f32(g);
        // Otherwise a dense gradient. Rows are summed in id order, in parallel
        // over slices of D, so the result does not depend on the thread count.
        Tensor dw = detail::zeros_on(gc, {vocab, dim});
        detail::backend_of(gc).index_add(gc.data<float>(), 1, vocab, dim, index, dw.data<float>());
        return {dw, Tensor()};
      });
}

}  // namespace rig::ops
