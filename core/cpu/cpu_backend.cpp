#include "cpu/cpu_backend.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "backend/caching_allocator.hpp"
#include "cpu/attention.hpp"
#include "cpu/batch_norm.hpp"
#include "cpu/compare.hpp"
#include "cpu/conv.hpp"
#include "cpu/cross_entropy.hpp"
#include "cpu/dropout.hpp"
#include "cpu/elementwise.hpp"
#include "cpu/gemm.hpp"
#include "cpu/gemm_dnnl.hpp"
#include "cpu/gradient_stats.hpp"
#include "cpu/indexing.hpp"
#include "cpu/layer_norm.hpp"
#include "cpu/matmul.hpp"
#include "cpu/optimizer_updates.hpp"
#include "cpu/parallel.hpp"
#include "cpu/pool.hpp"
#include "cpu/reduce.hpp"
#include "cpu/scratch.hpp"
#include "cpu/selection.hpp"
#include "cpu/softmax.hpp"
#include "cpu/tensor_copy.hpp"
#include "cpu/unscale.hpp"

namespace rig {

namespace cpu {

backend::MemoryPool& host_pool() {
  // Leaked on purpose: storages may be freed by static destructors after
  // this function's statics would be gone.
  static auto* pool = new backend::CachingAllocator(
      backend::host_memory(), backend::caching_enabled(), backend::cache_limit());
  return *pool;
}

backend::MemoryPool& CpuBackend::memory(Device /*device*/) {
  return host_pool();
}

void CpuBackend::to_host(void* host, const void* src, std::size_t bytes) {
  if (bytes > 0) std::memcpy(host, src, bytes);
}

void CpuBackend::from_host(void* dst, const void* host, std::size_t bytes) {
  if (bytes > 0) std::memcpy(dst, host, bytes);
}

void CpuBackend::copy_strided(const Shape& shape, void* dst, const Strides& dst_strides,
                              DType dst_dtype, const void* src, const Strides& src_strides,
                              DType src_dtype) {
  cpu::copy_strided(shape, dst, dst_strides, dst_dtype, src, src_strides, src_dtype);
}

void CpuBackend::fill_strided(const Shape& shape, void* dst, const Strides& dst_strides,
                              DType dst_dtype, float value) {
  cpu::fill_strided(shape, dst, dst_strides, dst_dtype, value);
}

void CpuBackend::add_strided(const Shape& shape, void* dst, const Strides& dst_strides,
                             DType dst_dtype, const void* src, const Strides& src_strides,
                             DType src_dtype) {
  cpu::add_strided(shape, dst, dst_strides, dst_dtype, src, src_strides, src_dtype);
}

void CpuBackend::zero_bytes(void* dst, std::int64_t bytes) {
  cpu::zero_bytes(static_cast<std::byte*>(dst), bytes);
}

void CpuBackend::unary(backend::Unary op, const float* x, float* y, std::int64_t n, float scalar) {
  cpu::unary(op, x, y, n, scalar);
}

void CpuBackend::unary_backward(backend::Unary op, const float* g, const float* x, const float* y,
                                float* dx, std::int64_t n, float scalar) {
  cpu::unary_backward(op, g, x, y, dx, n, scalar);
}

void CpuBackend::binary(backend::Binary op, const backend::StridedPlan<3>& plan, const float* a,
                        const float* b, float* out) {
  cpu::binary(op, plan, a, b, out);
}

void CpuBackend::broadcast_copy(const backend::StridedPlan<2>& plan, const float* x, float* out) {
  cpu::strided_copy(plan, x, out);
}

void CpuBackend::compare(backend::Compare op, const backend::StridedPlan<3>& plan, DType dtype,
                         const void* a, const void* b, double scalar, std::uint8_t* out) {
  cpu::compare(op, plan, dtype, a, b, scalar, out);
}

void CpuBackend::select(const Shape& shape, std::size_t element_bytes,
                        const backend::SelectOperand& cond, const backend::SelectOperand& a,
                        const backend::SelectOperand& b, void* out) {
  cpu::select(shape, element_bytes, cond, a, b, out);
}

void CpuBackend::bias_activation(float* y, float* pre, const float* bias, std::int64_t rows,
                                 std::int64_t cols, Activation activation) {
  cpu::bias_activation(y, pre, bias, rows, cols, activation);
}

void CpuBackend::activation_backward(Activation activation, const float* g, const float* saved,
                                     float* dz, float* db, std::int64_t rows, std::int64_t cols,
                                     float relu_scale) {
  cpu::activation_backward(activation, g, saved, dz, db, rows, cols, relu_scale);
}

void CpuBackend::activation_backward_bf16(Activation activation, const float* g, const float* saved,
                                          std::uint16_t* dz_bf16, float* db, std::int64_t rows,
                                          std::int64_t cols, float relu_scale) {
  cpu::activation_backward_bf16(activation, g, saved, dz_bf16, db, rows, cols, relu_scale);
}

void CpuBackend::sum_all(const float* x, std::int64_t n, double divisor, float* out) {
  *out = static_cast<float>(cpu::sum_all(x, n) / divisor);
}

void CpuBackend::sum_squares(const float* x, std::int64_t n, double divisor, float* out) {
  *out = static_cast<float>(cpu::sum_squares(x, n) / divisor);
}

void CpuBackend::sum_axis(const float* x, float* y, std::int64_t outer, std::int64_t r,
                          std::int64_t inner, float scale) {
  cpu::sum_axis(x, y, outer, r, inner, scale);
}

void CpuBackend::max_axis(const float* x, float* y, std::int64_t* index, std::int64_t outer,
                          std::int64_t r, std::int64_t inner) {
  cpu::max_axis(x, y, index, outer, r, inner);
}

void CpuBackend::max_axis_backward(const float* g, const std::int64_t* index, float* dx,
                                   std::int64_t outer, std::int64_t r, std::int64_t inner) {
  cpu::max_axis_backward(g, index, dx, outer, r, inner);
}

void CpuBackend::softmax_forward(const backend::StridedPlan<2>& plan, const float* x,
                                 const std::uint8_t* mask, float* y, bool log) {
  cpu::softmax_forward(plan, x, mask, y, log);
}

void CpuBackend::softmax_backward(const float* y, const float* g, float* dx, std::int64_t rows,
                                  std::int64_t n, bool log) {
  cpu::softmax_backward(y, g, dx, rows, n, log);
}

void CpuBackend::layer_norm_forward(const float* x, const float* gamma, const float* beta, float* y,
                                    float* mean, float* rstd, std::int64_t rows, std::int64_t d,
                                    float eps) {
  cpu::layer_norm_forward(x, gamma, beta, y, mean, rstd, rows, d, eps);
}

std::int64_t CpuBackend::layer_norm_scratch_size(std::int64_t rows, std::int64_t d) {
  return cpu::layer_norm_scratch_size(rows, d);
}

void CpuBackend::layer_norm_backward(const float* x, const float* gamma, const float* mean,
                                     const float* rstd, const float* g, float* dx, float* dgamma,
                                     float* dbeta, std::int64_t rows, std::int64_t d,
                                     float* scratch) {
  cpu::layer_norm_backward(x, gamma, mean, rstd, g, dx, dgamma, dbeta, rows, d, scratch);
}

void CpuBackend::batch_norm_stats(const backend::BatchNormShape& s, const float* x, float* mean,
                                  float* var) {
  cpu::batch_norm_stats(s, x, mean, var);
}

void CpuBackend::batch_norm_prepare(const backend::BatchNormPrepare& args) {
  cpu::batch_norm_prepare(args);
}

void CpuBackend::batch_norm_apply(const backend::BatchNormShape& s, const float* x,
                                  const float* scale, const float* shift, float* y) {
  cpu::batch_norm_apply(s, x, scale, shift, y);
}

void CpuBackend::batch_norm_backward(const backend::BatchNormShape& s, const float* x,
                                     const float* dy, const float* mean, const float* invstd,
                                     const float* gamma, bool batch_stats, float* dx, float* dgamma,
                                     float* dbeta) {
  cpu::batch_norm_backward(s, x, dy, mean, invstd, gamma, batch_stats, dx, dgamma, dbeta);
}

void CpuBackend::conv2d_forward(const backend::Conv2dShape& s, const float* x, const float* w,
                                const float* b, float* y) {
  cpu::conv2d_forward(s, x, w, b, y);
}

bool CpuBackend::convolves_16bit(DType type) const {
  return type == DType::bf16 && cpu::conv2d_bf16_supported();
}

void CpuBackend::conv2d_forward_16(const backend::Conv2dShape& s, DType type, const void* x,
                                   const void* w, void* y) {
  if (!convolves_16bit(type)) return Backend::conv2d_forward_16(s, type, x, w, y);  // throws
  cpu::conv2d_forward_bf16(s, static_cast<const std::uint16_t*>(x),
                           static_cast<const std::uint16_t*>(w), static_cast<std::uint16_t*>(y));
}

void CpuBackend::conv2d_backward_16(const backend::Conv2dShape& s, DType type, const void* x,
                                    const void* w, const void* dy, void* dx, void* dw,
                                    const backend::ConvGradAccumulation& accumulate) {
  if (!convolves_16bit(type)) {
    return Backend::conv2d_backward_16(s, type, x, w, dy, dx, dw, accumulate);  // throws
  }
  cpu::conv2d_backward_bf16(s, static_cast<const std::uint16_t*>(x),
                            static_cast<const std::uint16_t*>(w),
                            static_cast<const std::uint16_t*>(dy), static_cast<std::uint16_t*>(dx),
                            static_cast<std::uint16_t*>(dw), accumulate);
}

void CpuBackend::conv2d_backward(const backend::Conv2dShape& s, const float* x, const float* w,
                                 const float* dy, float* dx, float* dw, float* db) {
  cpu::conv2d_backward(s, x, w, dy, dx, dw, db);
}

void CpuBackend::max_pool2d_forward(const backend::Pool2dShape& s, const float* x, float* y,
                                    std::int32_t* index) {
  cpu::max_pool2d_forward(s, x, y, index);
}

void CpuBackend::max_pool2d_backward(const backend::Pool2dShape& s, const std::int32_t* index,
                                     const float* dy, float* dx) {
  cpu::max_pool2d_backward(s, index, dy, dx);
}

void CpuBackend::avg_pool2d_forward(const backend::Pool2dShape& s, const float* x, float* y) {
  cpu::avg_pool2d_forward(s, x, y);
}

void CpuBackend::avg_pool2d_backward(const backend::Pool2dShape& s, const float* dy, float* dx) {
  cpu::avg_pool2d_backward(s, dy, dx);
}

void CpuBackend::global_avg_pool_forward(std::int64_t planes, std::int64_t size,
                                         std::int64_t channels, const float* x, float* y) {
  cpu::global_avg_pool_forward(planes, size, channels, x, y);
}

void CpuBackend::global_avg_pool_backward(std::int64_t planes, std::int64_t size,
                                          std::int64_t channels, const float* dy, float* dx) {
  cpu::global_avg_pool_backward(planes, size, channels, dy, dx);
}

void CpuBackend::attention_forward(const backend::AttentionShape& s, const float* q,
                                   const backend::HeadStrides& qs, const float* k,
                                   const backend::HeadStrides& ks, const float* v,
                                   const backend::HeadStrides& vs, float* out,
                                   const backend::HeadStrides& os, float* probs) {
  cpu::attention_forward(s, q, qs, k, ks, v, vs, out, os, probs);
}

void CpuBackend::attention_backward(const backend::AttentionShape& s, const float* q,
                                    const backend::HeadStrides& qs, const float* k,
                                    const backend::HeadStrides& ks, const float* v,
                                    const backend::HeadStrides& vs, const float* probs,
                                    const float* dout, const backend::HeadStrides& dos, float* dq,
                                    const backend::HeadStrides& dqs, float* dk,
                                    const backend::HeadStrides& dks, float* dv,
                                    const backend::HeadStrides& dvs) {
  cpu::attention_backward(s, q, qs, k, ks, v, vs, probs, dout, dos, dq, dqs, dk, dks, dv, dvs);
}

void CpuBackend::cross_entropy_forward(const float* x, const std::int64_t* labels,
                                       std::int64_t rows, std::int64_t c, float on, float off,
                                       float* loss, float* lse) {
  cpu::cross_entropy_forward(x, labels, rows, c, on, off, loss, lse);
}

void CpuBackend::cross_entropy_backward(const float* x, const std::int64_t* labels,
                                        const float* lse, const float* row_scale, float scale,
                                        const float* scale_factor, std::int64_t rows,
                                        std::int64_t c, float on, float off, float* dx) {
  const float factor = scale_factor != nullptr ? *scale_factor : 1.0F;
  cpu::cross_entropy_backward(x, labels, lse, row_scale, scale * factor, rows, c, on, off, dx);
}

void CpuBackend::padded_loss(const float* xent, const float* w, std::int64_t rows, double constant,
                             float* loss) {
  cpu::padded_loss(xent, w, rows, constant, loss);
}

void CpuBackend::padded_loss_backward(const float* xent, const float* w, std::int64_t rows,
                                      double constant, const float* upstream, float* row_scale,
                                      float* x_scale, float* dw) {
  cpu::padded_loss_backward(xent, w, rows, constant, upstream, row_scale, x_scale, dw);
}

std::int64_t CpuBackend::first_out_of_range(const void* index, DType dtype, std::int64_t n,
                                            std::int64_t limit) {
  return cpu::first_out_of_range(index, dtype, n, limit);
}

void CpuBackend::dropout_forward(const RandomKey& key, float p, float scale, DType dtype,
                                 const void* src, void* dst, std::int64_t n,
                                 std::uint32_t* mask_bits) {
  cpu::dropout_forward(key, p, scale, dtype, src, dst, n, mask_bits);
}

void CpuBackend::dropout_backward(const std::uint32_t* mask_bits, float scale, DType dtype,
                                  const void* grad, void* dx, std::int64_t n) {
  cpu::dropout_backward(mask_bits, scale, dtype, grad, dx, n);
}

void CpuBackend::dropout_mask(const RandomKey& key, float p, std::uint8_t* mask, std::int64_t n,
                              std::uint64_t first) {
  // In chunks across the pool: element i of the mask is stream element first + i either way.
  constexpr std::int64_t kChunk = 1 << 16;
  const std::int64_t chunks = (n + kChunk - 1) / kChunk;
  cpu::parallel_for(chunks, 1, [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t c = begin; c < end; ++c) {
      cpu::dropout_mask(key, p, mask + c * kChunk, std::min(kChunk, n - c * kChunk),
                        first + static_cast<std::uint64_t>(c * kChunk));
    }
  });
}

void CpuBackend::concat_rows(const backend::RowPiece* pieces, std::int64_t count, std::byte* dst,
                             std::int64_t dst_row_bytes, std::int64_t rows) {
  cpu::concat_rows(pieces, count, dst, dst_row_bytes, rows);
}

void CpuBackend::extract_rows(const std::byte* src, std::int64_t src_row_bytes, std::int64_t offset,
                              std::byte* dst, std::int64_t bytes, std::int64_t rows) {
  cpu::extract_rows(src, src_row_bytes, offset, dst, bytes, rows);
}

void CpuBackend::zero_rows(std::byte* dst, std::int64_t dst_row_bytes, std::int64_t offset,
                           std::int64_t bytes, std::int64_t rows) {
  cpu::zero_rows(dst, dst_row_bytes, offset, bytes, rows);
}

void CpuBackend::gather(const backend::ConstBuffer& x, std::int64_t axis,
                        const backend::ConstBuffer& index, void* out) {
  cpu::gather(x, axis, index, out);
}

void CpuBackend::gather_backward(const float* grad, std::int64_t axis,
                                 const backend::ConstBuffer& index, float* dx,
                                 const Shape& x_shape) {
  cpu::gather_backward(grad, axis, index, dx, x_shape);
}

void CpuBackend::index_select(const void* x, std::size_t element_bytes, std::int64_t outer,
                              std::int64_t n, std::int64_t inner, const backend::ConstBuffer& index,
                              void* out) {
  cpu::index_select(x, element_bytes, outer, n, inner, index, out);
}

void CpuBackend::index_add(const float* grad, std::int64_t outer, std::int64_t n,
                           std::int64_t inner, const backend::ConstBuffer& index, float* dx) {
  cpu::index_add(grad, outer, n, inner, index, dx);
}

void CpuBackend::argmax(const backend::ConstBuffer& x, std::int64_t outer, std::int64_t n,
                        std::int64_t inner, std::int64_t* out) {
  cpu::argmax(x, outer, n, inner, out);
}

void CpuBackend::topk(const backend::ConstBuffer& x, std::int64_t rows, std::int64_t n,
                      std::int64_t k, void* values, std::int64_t* indices) {
  cpu::topk(x, rows, n, k, values, indices);
}

bool CpuBackend::fast_bf16_products() const {
  return cpu::gemm_dnnl_bf16_available();
}

void CpuBackend::round_bf16(const backend::GemmOperand& x, std::int64_t rows, std::int64_t cols,
                            std::uint16_t* dst) {
  cpu::round_bf16(x, rows, cols, dst);
}

void CpuBackend::gemm(const backend::GemmProduct& p, MatmulPrecision precision) {
  cpu::gemm(p, precision);
}

void CpuBackend::gemm_pair(const backend::GemmProduct& first, const backend::GemmProduct& second,
                           MatmulPrecision precision) {
  cpu::gemm_pair(first, second, precision);
}

void CpuBackend::matmul(const backend::MatrixOperand& a, const backend::MatrixOperand& b,
                        float* out, const Shape& out_shape, MatmulPrecision precision) {
  cpu::matmul(a, b, out, out_shape, precision);
}

void CpuBackend::unscale(std::int64_t n, DType src_dtype, const void* src, float* master,
                         float scale, float* amax) {
  const float largest = cpu::unscale(n, src_dtype, src, master, scale);
  if (amax != nullptr) *amax = largest;
}

GradientStats CpuBackend::gradient_stats(const GradientSource& grads, std::int64_t n,
                                         const float* loss) {
  GradientStats stats = cpu::gradient_stats(grads, n);
  if (loss != nullptr) {
    stats.loss = *loss;
    stats.loss_finite = std::isfinite(*loss);
  }
  return stats;
}

void CpuBackend::gradient_stats_to(const GradientSource& grads, std::int64_t n, const float* loss,
                                   GradientStats* out) {
  *out = CpuBackend::gradient_stats(grads, n, loss);  // not the sim's: its pointers are translated
}

void CpuBackend::clip_by_norm(float* grads, std::int64_t n, const GradientStats* stats,
                              double max_norm) {
  if (!(stats->norm > max_norm)) return;
  // Not the sim's unary: its pointers are translated.
  CpuBackend::unary(backend::Unary::mul_scalar, grads, grads, n,
                    static_cast<float>(max_norm / (stats->norm + 1e-6)));
}

void CpuBackend::larc(const float* values, float* grads, const FlatSlice* slices,
                      std::int64_t count, const LarcOptions& options) {
  cpu::larc(values, grads, slices, count, options);
}

void CpuBackend::adam_update(std::int64_t n, float* p, const GradientSource& grad, float* m,
                             float* v, float* vmax, const AdamUpdate& args,
                             const PublishedValues& publish) {
  cpu::adam_update(n, p, grad, m, v, vmax, args, publish);
}

void CpuBackend::sgd_update(std::int64_t n, float* p, const GradientSource& grad, float* buffer,
                            const SgdUpdate& args, const PublishedValues& publish) {
  cpu::sgd_update(n, p, grad, buffer, args, publish);
}

void CpuBackend::novograd_update(float* p, const float* grad, float* m, float* ema,
                                 const FlatSlice* slices, std::int64_t count,
                                 const NovogradUpdate& args) {
  cpu::novograd_update(p, grad, m, ema, slices, count, args);
}

}  // namespace cpu

backend::Backend& backend::cpu_backend() {
  static cpu::CpuBackend* backend = new cpu::CpuBackend();  // leaked: used by static destructors
  return *backend;
}

}  // namespace rig
