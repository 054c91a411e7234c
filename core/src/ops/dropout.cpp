// dropout with a counter-based mask: recomputed from the key in backward,
// never stored.
#include <cmath>
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
  cpu::dropout_apply(key, p, scale, x.detach().contiguous(), out);
  return autograd::record(std::move(out), "dropout", {x},
                          [key, p, scale](const Tensor& g) -> std::vector<Tensor> {
                            const Tensor gc = g.contiguous();
                            Tensor dx = Tensor::empty(gc.shape(), gc.dtype());
                            cpu::dropout_apply(key, p, scale, gc, dx);
                            return {dx};
                          });
}

}  // namespace rig::ops
