// CPU kernels for where / masked_fill (a broadcasting select), argmax and topk.
#pragma once

#include <cstdint>

#include "backend/kernel_args.hpp"

namespace rig::cpu {

using backend::ConstBuffer;
using backend::SelectOperand;

// out (contiguous, `shape`) = cond != 0 ? a : b. cond is u8; a, b and out
// share one dtype of `element_bytes` bytes (the values are copied, not converted).
// Throws std::invalid_argument past 16 axes that do not merge.
void select(const Shape& shape, std::size_t element_bytes, const SelectOperand& cond,
            const SelectOperand& a, const SelectOperand& b, void* out);

// x [outer, n, inner] (contiguous) -> out [outer, inner] (i64): the index of
// the largest element along n; the first on ties; NaN counts as largest.
void argmax(const ConstBuffer& x, std::int64_t outer, std::int64_t n, std::int64_t inner,
            std::int64_t* out);

// x [rows, n] (contiguous) -> values [rows, k] (x's dtype) and indices
// [rows, k] (i64), sorted descending, ties by lower index; NaN counts as
// largest. x is f32, i32, i64 or u8.
void topk(const ConstBuffer& x, std::int64_t rows, std::int64_t n, std::int64_t k, void* values,
          std::int64_t* indices);

}  // namespace rig::cpu
