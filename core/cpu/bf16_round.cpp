#include "cpu/bf16_round.hpp"

#include <algorithm>

#include "cpu/half.hpp"
#include "cpu/kernel_attributes.hpp"
#include "cpu/parallel.hpp"

namespace rig::cpu {

namespace {

// Elements below which a matrix is rounded on the calling thread.
constexpr std::int64_t kParallelElements = std::int64_t{1} << 16;

RIG_CPU_KERNEL void pack_rows(std::int64_t begin, std::int64_t end, std::int64_t cols,
                              const float* src, std::int64_t ld, std::uint16_t* dst) {
  for (std::int64_t i = begin; i < end; ++i) {
    const float* in = src + i * ld;
    std::uint16_t* out = dst + i * cols;
    for (std::int64_t j = 0; j < cols; ++j) out[j] = float_to_bfloat16_bits(in[j]);
  }
}

RIG_CPU_KERNEL void round_rows(std::int64_t begin, std::int64_t end, std::int64_t cols,
                               const float* src, std::int64_t ld, float* dst) {
  for (std::int64_t i = begin; i < end; ++i) {
    const float* in = src + i * ld;
    float* out = dst + i * cols;
    for (std::int64_t j = 0; j < cols; ++j) {
      out[j] = bfloat16_bits_to_float(float_to_bfloat16_bits(in[j]));
    }
  }
}

RIG_CPU_KERNEL void widen_range(std::int64_t begin, std::int64_t end, const std::uint16_t* src,
                                float* dst) {
  for (std::int64_t i = begin; i < end; ++i) dst[i] = bfloat16_bits_to_float(src[i]);
}

template <class Rows>
void over_rows(std::int64_t rows, std::int64_t cols, Rows&& rows_fn) {
  if (rows * cols < kParallelElements) {
    rows_fn(0, rows);
    return;
  }
  const std::int64_t grain = std::max<std::int64_t>(1, kParallelElements / 4 / cols);
  parallel_for(rows, grain, rows_fn);
}

}  // namespace

void pack_bf16(std::int64_t rows, std::int64_t cols, const float* src, std::int64_t ld,
               std::uint16_t* dst) {
  over_rows(rows, cols, [&](std::int64_t begin, std::int64_t end) {
    pack_rows(begin, end, cols, src, ld, dst);
  });
}

void round_bf16(std::int64_t rows, std::int64_t cols, const float* src, std::int64_t ld,
                float* dst) {
  over_rows(rows, cols, [&](std::int64_t begin, std::int64_t end) {
    round_rows(begin, end, cols, src, ld, dst);
  });
}

void widen_bf16(std::int64_t n, const std::uint16_t* src, float* dst) {
  over_rows(n, 1, [&](std::int64_t begin, std::int64_t end) { widen_range(begin, end, src, dst); });
}

}  // namespace rig::cpu
