// KernelBackend: dropout with the Philox streams of rig/math/philox.hpp, the
// CPU's bits.
#include "cuda/backend/kernel_backend.hpp"

namespace rig::cuda {

void KernelBackend::dropout_forward(const RandomKey& key, float p, float scale, DType dtype,
                                    const void* src, void* dst, std::int64_t n,
                                    std::uint32_t* mask_bits) {
  run(kernels::DropoutForward{math::PhiloxStream::of(key.seed, key.step, key.rank, key.purpose),
                              math::dropout_threshold(p), scale, element_type(dtype, "dropout"),
                              src, dst, mask_bits, n});
}

void KernelBackend::relu_mask(const RandomKey* dropout_key, float p, DType dtype, void* h,
                              std::int64_t rows, std::int64_t cols, std::uint8_t* mask,
                              std::int64_t mask_ld) {
  if ((dtype != DType::bf16 && dtype != DType::f16) || cols % 8 != 0 || mask_ld % 128 != 0 ||
      mask_ld < cols) {
    throw std::invalid_argument(
        "KernelBackend::relu_mask: expected bf16 or f16 h, cols a multiple of 8 and mask_ld a "
        "multiple of 128 of at least cols");
  }
  // Without dropout: every element kept, h read and not rewritten.
  const RandomKey key = dropout_key != nullptr ? *dropout_key : RandomKey{};
  kernels::DropoutForward k{math::PhiloxStream::of(key.seed, key.step, key.rank, key.purpose),
                            math::dropout_threshold(dropout_key != nullptr ? p : 0.0F),
                            1.0F,
                            element_type(dtype, "relu_mask"),
                            h,
                            dropout_key != nullptr ? h : nullptr,
                            nullptr,
                            rows * cols};
  k.relu_mask = mask;
  k.relu_cols = cols;
  k.relu_mask_ld = mask_ld;
  run(k);
}

void KernelBackend::dropout_add_forward(const RandomKey& key, float p, float scale, DType dtype,
                                        const void* src, const void* residual, void* dst,
                                        std::int64_t n, std::uint32_t* mask_bits,
                                        const backend::RowScale& rows) {
  kernels::DropoutForward k{math::PhiloxStream::of(key.seed, key.step, key.rank, key.purpose),
                            math::dropout_threshold(p),
                            scale,
                            element_type(dtype, "dropout_add"),
                            src,
                            dst,
                            mask_bits,
                            n};
  k.residual = residual;
  k.rows = {rows.data, rows.row_length};
  run(k);
}

void KernelBackend::dropout_add_backward(const std::uint32_t* mask_bits, float scale, DType dtype,
                                         const void* grad, void* dx, std::int64_t n,
                                         const backend::RowScale& rows) {
  kernels::DropoutBackward k{mask_bits, scale, element_type(dtype, "dropout_add backward"),
                             grad,      dx,    n};
  k.rows = {rows.data, rows.row_length};
  run(k);
}

void KernelBackend::dropout_backward(const std::uint32_t* mask_bits, float scale, DType dtype,
                                     const void* grad, void* dx, std::int64_t n) {
  run(kernels::DropoutBackward{mask_bits, scale, element_type(dtype, "dropout backward"), grad, dx,
                               n});
}

void KernelBackend::dropout_mask(const RandomKey& key, float p, std::uint8_t* mask, std::int64_t n,
                                 std::uint64_t first) {
  run(kernels::DropoutMask{math::PhiloxStream::of(key.seed, key.step, key.rank, key.purpose),
                           math::dropout_threshold(p), mask, n, first});
}

}  // namespace rig::cuda
