// Batched matrix products over strided operands with broadcast batch axes:
// the layout planning that lets BLAS read each operand in place (row- or
// column-major matrices with any leading dimension), copies of the operands
// it cannot read, and the folding of batches into one product.
#pragma once

#include "backend/kernel_args.hpp"
#include "rig/op_types.hpp"

namespace rig::cpu {

// out [..., m, n] (contiguous; the broadcast batch of a and b) = op(a) op(b).
// Throws std::invalid_argument past 8 batch axes that do not merge.
void matmul(const backend::MatrixOperand& a, const backend::MatrixOperand& b, float* out,
            const Shape& out_shape, MatmulPrecision precision);

}  // namespace rig::cpu
