// ops::linear on f16 x and W where the back end multiplies f16 as it is
// (Backend::f16_products: the GPU's tensor cores), as PyTorch's autocast runs
// a float16 model's layers: see linear_f16.cpp.
#pragma once

#include "rig/ops.hpp"

namespace rig::ops::detail {

// The inputs as linear_impl has checked them; keep_scale as it computed it.
Tensor linear_f16_products(const Tensor& x, const Tensor& weight, const Tensor& bias,
                           Activation activation, const OutputDropout& dropout, float keep_scale,
                           float input_scale);

}  // namespace rig::ops::detail
