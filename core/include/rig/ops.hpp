// Differentiable tensor ops (CPU). Shapes are checked; a mismatch throws
// std::invalid_argument naming the op and both shapes.
#pragma once

#include "rig/tensor.hpp"

namespace rig::ops {

// [M,K] x [K,N] -> [M,N]; the flags use the transposed operand.
Tensor matmul(const Tensor& a, const Tensor& b, bool transpose_a = false, bool transpose_b = false);
// Elementwise, same shape; add also takes b of shape [N] against a of [..., N] (a bias).
Tensor add(const Tensor& a, const Tensor& b);
Tensor sub(const Tensor& a, const Tensor& b);
Tensor mul(const Tensor& a, const Tensor& b);
Tensor mul_scalar(const Tensor& a, float scalar);
Tensor relu(const Tensor& a);
Tensor tanh(const Tensor& a);
Tensor sigmoid(const Tensor& a);
Tensor sum(const Tensor& a);   // all elements -> scalar
Tensor mean(const Tensor& a);  // all elements -> scalar

// Mean squared error over all elements -> scalar.
Tensor mse_loss(const Tensor& prediction, const Tensor& target);
// Mean softmax cross-entropy of logits [N,C] against i64 labels [N] -> scalar.
Tensor cross_entropy(const Tensor& logits, const Tensor& labels);
// Index of the largest value along the last axis of [N,C] -> i64 [N]. Not differentiable.
Tensor argmax(const Tensor& a);

}  // namespace rig::ops
