// dropout with a counter-based (Philox) mask, kept as bits for backward.
#include <stdexcept>

#include <fmt/format.h>

#include "cpu/dropout.hpp"
#include "ops/op_util.hpp"
#include "rig/autograd.hpp"
#include "rig/ops.hpp"

namespace rig::ops {

Tensor dropout(const Tensor& x, float p, const RandomKey& key) {
  detail::require_floating("dropout", x, "x");
  detail::require_cpu("dropout", {&x});
  if (!(p >= 0.0F && p <= 1.0F)) {
    throw std::invalid_argument(
        fmt::format("dropout: p = {} is not in [0, 1] (x {})", p, to_string(x.shape())));
  }
  if (p == 0.0F) return x;
  // p = 1 drops everything (as torch): zeros, and a zero gradient.
  const float scale = p < 1.0F ? 1.0F / (1.0F - p) : 0.0F;
  Tensor out = Tensor::empty(x.shape(), x.dtype());
  const bool record = grad_mode_enabled() && x.requires_grad();
  // The mask as bits (i32 words), only when a backward pass may need it.
  Tensor mask = record ? Tensor::empty({cpu::dropout_mask_words(x.numel())}, DType::i32) : Tensor();
  auto* bits = record ? reinterpret_cast<std::uint32_t*>(mask.data<std::int32_t>()) : nullptr;
  cpu::dropout_forward(key, p, scale, x.detach().contiguous(), out, bits);
  if (!record) return out;
  return autograd::record(
      std::move(out), "dropout", {x}, [mask, scale](const Tensor& g) -> autograd::TensorList {
        const Tensor gc = g.contiguous();
        Tensor dx = Tensor::empty(gc.shape(), gc.dtype());
        cpu::dropout_backward(reinterpret_cast<const std::uint32_t*>(mask.data<std::int32_t>()),
                              scale, gc, dx);
        return {dx};
      });
}

}  // namespace rig::ops
