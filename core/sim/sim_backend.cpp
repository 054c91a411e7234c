#include "sim/sim_backend.hpp"

#include <cstring>
#include <stdexcept>
#include <vector>

#include "backend/caching_allocator.hpp"
#include "rig/error.hpp"
#include "sim/sim_arena.hpp"

namespace rig {

namespace sim {

namespace {

// The read-write twin of a sim address (null stays null).
template <class T>
T* rw(T* p) {
  return p == nullptr ? nullptr : SimArena::instance().open(p);
}

backend::GemmOperand rw(backend::GemmOperand x) {
  x.data = rw(x.data);
  x.bf16 = rw(x.bf16);
  return x;
}

backend::GemmProduct rw(backend::GemmProduct p) {
  p.a = rw(p.a);
  p.b = rw(p.b);
  p.c = rw(p.c);
  return p;
}

backend::MatrixOperand rw(backend::MatrixOperand x) {
  x.data = rw(x.data);
  return x;
}

GradientSource rw(GradientSource g) {
  g.data = rw(g.data);
  return g;
}

PublishedValues rw(PublishedValues p) {
  p.data = rw(p.data);
  return p;
}

backend::ConstBuffer rw(backend::ConstBuffer x) {
  x.data = rw(x.data);
  return x;
}

backend::SelectOperand rw(backend::SelectOperand x) {
  x.data = rw(x.data);
  return x;
}

backend::AttentionShape rw(backend::AttentionShape s) {
  s.mask = rw(s.mask);
  s.keep = rw(s.keep);
  return s;
}

backend::BatchNormPrepare rw(backend::BatchNormPrepare a) {
  a.mean = rw(a.mean);
  a.var = rw(a.var);
  a.running_mean = rw(a.running_mean);
  a.running_var = rw(a.running_var);
  a.gamma = rw(a.gamma);
  a.beta = rw(a.beta);
  a.invstd = rw(a.invstd);
  a.scale = rw(a.scale);
  a.shift = rw(a.shift);
  return a;
}

// The arena as the caching allocator's source of memory. The first
// allocation creates the arena: a bad RIG_SIM_MEMORY_GB is the user's to fix.
class ArenaMemory final : public backend::RawMemory {
 public:
  std::byte* allocate(std::size_t bytes) override {
    try {
      return SimArena::instance().allocate(bytes);
    } catch (const std::invalid_argument& e) {
      throw UserError(e.what());
    }
  }
  void release(std::byte* data) noexcept override { SimArena::instance().release(data); }
};

}  // namespace

backend::MemoryPool& SimBackend::memory(Device /*device*/) {
  // Leaked on purpose, as the CPU's: storages may be freed by static destructors.
  static auto* raw = new ArenaMemory();
  static auto* pool =
      new backend::CachingAllocator(*raw, backend::caching_enabled(), backend::cache_limit());
  return *pool;
}

void SimBackend::to_host(void* host, const void* src, std::size_t bytes) {
  if (bytes > 0) std::memcpy(host, rw(src), bytes);
}

void SimBackend::from_host(void* dst, const void* host, std::size_t bytes) {
  if (bytes > 0) std::memcpy(rw(dst), host, bytes);
}

void SimBackend::copy_strided(const Shape& shape, void* dst, const Strides& dst_strides,
                              DType dst_dtype, const void* src, const Strides& src_strides,
                              DType src_dtype) {
  CpuBackend::copy_strided(shape, rw(dst), dst_strides, dst_dtype, rw(src), src_strides, src_dtype);
}

void SimBackend::fill_strided(const Shape& shape, void* dst, const Strides& dst_strides,
                              DType dst_dtype, float value) {
  CpuBackend::fill_strided(shape, rw(dst), dst_strides, dst_dtype, value);
}

void SimBackend::add_strided(const Shape& shape, void* dst, const Strides& dst_strides,
                             DType dst_dtype, const void* src, const Strides& src_strides,
                             DType src_dtype) {
  CpuBackend::add_strided(shape, rw(dst), dst_strides, dst_dtype, rw(src), src_strides, src_dtype);
}

void SimBackend::zero_bytes(void* dst, std::int64_t bytes) {
  CpuBackend::zero_bytes(rw(dst), bytes);
}

void SimBackend::unary(backend::Unary op, const float* x, float* y, std::int64_t n, float scalar) {
  CpuBackend::unary(op, rw(x), rw(y), n, scalar);
}

void SimBackend::unary_backward(backend::Unary op, const float* g, const float* x, const float* y,
                                float* dx, std::int64_t n, float scalar) {
  CpuBackend::unary_backward(op, rw(g), rw(x), rw(y), rw(dx), n, scalar);
}

void SimBackend::binary(backend::Binary op, const backend::StridedPlan<3>& plan, const float* a,
                        const float* b, float* out) {
  CpuBackend::binary(op, plan, rw(a), rw(b), rw(out));
}

void SimBackend::broadcast_copy(const backend::StridedPlan<2>& plan, const float* x, float* out) {
  CpuBackend::broadcast_copy(plan, rw(x), rw(out));
}

void SimBackend::compare(backend::Compare op, const backend::StridedPlan<3>& plan, DType dtype,
                         const void* a, const void* b, double scalar, std::uint8_t* out) {
  CpuBackend::compare(op, plan, dtype, rw(a), rw(b), scalar, rw(out));
}

void SimBackend::select(const Shape& shape, std::size_t element_bytes,
                        const backend::SelectOperand& cond, const backend::SelectOperand& a,
                        const backend::SelectOperand& b, void* out) {
  CpuBackend::select(shape, element_bytes, rw(cond), rw(a), rw(b), rw(out));
}

void SimBackend::bias_activation(float* y, float* pre, const float* bias, std::int64_t rows,
                                 std::int64_t cols, Activation activation) {
  CpuBackend::bias_activation(rw(y), rw(pre), rw(bias), rows, cols, activation);
}

void SimBackend::activation_backward(Activation activation, const float* g, const float* saved,
                                     float* dz, float* db, std::int64_t rows, std::int64_t cols,
                                     float relu_scale) {
  CpuBackend::activation_backward(activation, rw(g), rw(saved), rw(dz), rw(db), rows, cols,
                                  relu_scale);
}

void SimBackend::activation_backward_bf16(Activation activation, const float* g, const float* saved,
                                          std::uint16_t* dz_bf16, float* db, std::int64_t rows,
                                          std::int64_t cols, float relu_scale) {
  CpuBackend::activation_backward_bf16(activation, rw(g), rw(saved), rw(dz_bf16), rw(db), rows,
                                       cols, relu_scale);
}

void SimBackend::sum_all(const float* x, std::int64_t n, double divisor, float* out) {
  CpuBackend::sum_all(rw(x), n, divisor, rw(out));
}

void SimBackend::sum_squares(const float* x, std::int64_t n, double divisor, float* out) {
  CpuBackend::sum_squares(rw(x), n, divisor, rw(out));
}

void SimBackend::sum_axis(const float* x, float* y, std::int64_t outer, std::int64_t r,
                          std::int64_t inner, float scale) {
  CpuBackend::sum_axis(rw(x), rw(y), outer, r, inner, scale);
}

void SimBackend::max_axis(const float* x, float* y, std::int64_t* index, std::int64_t outer,
                          std::int64_t r, std::int64_t inner) {
  CpuBackend::max_axis(rw(x), rw(y), rw(index), outer, r, inner);
}

void SimBackend::max_axis_backward(const float* g, const std::int64_t* index, float* dx,
                                   std::int64_t outer, std::int64_t r, std::int64_t inner) {
  CpuBackend::max_axis_backward(rw(g), rw(index), rw(dx), outer, r, inner);
}

void SimBackend::softmax_forward(const backend::StridedPlan<2>& plan, const float* x,
                                 const std::uint8_t* mask, float* y, bool log) {
  CpuBackend::softmax_forward(plan, rw(x), rw(mask), rw(y), log);
}

void SimBackend::softmax_backward(const float* y, const float* g, float* dx, std::int64_t rows,
                                  std::int64_t n, bool log) {
  CpuBackend::softmax_backward(rw(y), rw(g), rw(dx), rows, n, log);
}

void SimBackend::layer_norm_forward(const float* x, const float* gamma, const float* beta, float* y,
                                    float* mean, float* rstd, std::int64_t rows, std::int64_t d,
                                    float eps) {
  CpuBackend::layer_norm_forward(rw(x), rw(gamma), rw(beta), rw(y), rw(mean), rw(rstd), rows, d,
                                 eps);
}

void SimBackend::layer_norm_backward(const float* x, const float* gamma, const float* mean,
                                     const float* rstd, const float* g, float* dx, float* dgamma,
                                     float* dbeta, std::int64_t rows, std::int64_t d,
                                     float* scratch) {
  CpuBackend::layer_norm_backward(rw(x), rw(gamma), rw(mean), rw(rstd), rw(g), rw(dx), rw(dgamma),
                                  rw(dbeta), rows, d, rw(scratch));
}

void SimBackend::batch_norm_stats(const backend::BatchNormShape& s, const float* x, float* mean,
                                  float* var) {
  CpuBackend::batch_norm_stats(s, rw(x), rw(mean), rw(var));
}

void SimBackend::batch_norm_prepare(const backend::BatchNormPrepare& args) {
  CpuBackend::batch_norm_prepare(rw(args));
}

void SimBackend::batch_norm_apply(const backend::BatchNormShape& s, const float* x,
                                  const float* scale, const float* shift, float* y) {
  CpuBackend::batch_norm_apply(s, rw(x), rw(scale), rw(shift), rw(y));
}

void SimBackend::batch_norm_backward(const backend::BatchNormShape& s, const float* x,
                                     const float* dy, const float* mean, const float* invstd,
                                     const float* gamma, bool batch_stats, float* dx, float* dgamma,
                                     float* dbeta) {
  CpuBackend::batch_norm_backward(s, rw(x), rw(dy), rw(mean), rw(invstd), rw(gamma), batch_stats,
                                  rw(dx), rw(dgamma), rw(dbeta));
}

void SimBackend::conv2d_forward(const backend::Conv2dShape& s, const float* x, const float* w,
                                const float* b, float* y) {
  CpuBackend::conv2d_forward(s, rw(x), rw(w), rw(b), rw(y));
}

void SimBackend::conv2d_backward(const backend::Conv2dShape& s, const float* x, const float* w,
                                 const float* dy, float* dx, float* dw, float* db) {
  CpuBackend::conv2d_backward(s, rw(x), rw(w), rw(dy), rw(dx), rw(dw), rw(db));
}

void SimBackend::max_pool2d_forward(const backend::Pool2dShape& s, const float* x, float* y,
                                    std::int32_t* index) {
  CpuBackend::max_pool2d_forward(s, rw(x), rw(y), rw(index));
}

void SimBackend::max_pool2d_backward(const backend::Pool2dShape& s, const std::int32_t* index,
                                     const float* dy, float* dx) {
  CpuBackend::max_pool2d_backward(s, rw(index), rw(dy), rw(dx));
}

void SimBackend::avg_pool2d_forward(const backend::Pool2dShape& s, const float* x, float* y) {
  CpuBackend::avg_pool2d_forward(s, rw(x), rw(y));
}

void SimBackend::avg_pool2d_backward(const backend::Pool2dShape& s, const float* dy, float* dx) {
  CpuBackend::avg_pool2d_backward(s, rw(dy), rw(dx));
}

void SimBackend::global_avg_pool_forward(std::int64_t planes, std::int64_t size,
                                         std::int64_t channels, const float* x, float* y) {
  CpuBackend::global_avg_pool_forward(planes, size, channels, rw(x), rw(y));
}

void SimBackend::global_avg_pool_backward(std::int64_t planes, std::int64_t size,
                                          std::int64_t channels, const float* dy, float* dx) {
  CpuBackend::global_avg_pool_backward(planes, size, channels, rw(dy), rw(dx));
}

void SimBackend::attention_forward(const backend::AttentionShape& s, const float* q,
                                   const backend::HeadStrides& qs, const float* k,
                                   const backend::HeadStrides& ks, const float* v,
                                   const backend::HeadStrides& vs, float* out,
                                   const backend::HeadStrides& os, float* probs) {
  CpuBackend::attention_forward(rw(s), rw(q), qs, rw(k), ks, rw(v), vs, rw(out), os, rw(probs));
}

void SimBackend::attention_backward(const backend::AttentionShape& s, const float* q,
                                    const backend::HeadStrides& qs, const float* k,
                                    const backend::HeadStrides& ks, const float* v,
                                    const backend::HeadStrides& vs, const float* probs,
                                    const float* dout, const backend::HeadStrides& dos, float* dq,
                                    const backend::HeadStrides& dqs, float* dk,
                                    const backend::HeadStrides& dks, float* dv,
                                    const backend::HeadStrides& dvs) {
  CpuBackend::attention_backward(rw(s), rw(q), qs, rw(k), ks, rw(v), vs, rw(probs), rw(dout), dos,
                                 rw(dq), dqs, rw(dk), dks, rw(dv), dvs);
}

void SimBackend::cross_entropy_forward(const float* x, const std::int64_t* labels,
                                       std::int64_t rows, std::int64_t c, float on, float off,
                                       float* loss, float* lse) {
  CpuBackend::cross_entropy_forward(rw(x), rw(labels), rows, c, on, off, rw(loss), rw(lse));
}

void SimBackend::cross_entropy_backward(const float* x, const std::int64_t* labels,
                                        const float* lse, const float* row_scale, float scale,
                                        const float* scale_factor, std::int64_t rows,
                                        std::int64_t c, float on, float off, float* dx) {
  CpuBackend::cross_entropy_backward(rw(x), rw(labels), rw(lse), rw(row_scale), scale,
                                     rw(scale_factor), rows, c, on, off, rw(dx));
}

void SimBackend::padded_loss(const float* xent, const float* w, std::int64_t rows, double constant,
                             float* loss) {
  CpuBackend::padded_loss(rw(xent), rw(w), rows, constant, rw(loss));
}

void SimBackend::padded_loss_backward(const float* xent, const float* w, std::int64_t rows,
                                      double constant, const float* upstream, float* row_scale,
                                      float* x_scale, float* dw) {
  CpuBackend::padded_loss_backward(rw(xent), rw(w), rows, constant, rw(upstream), rw(row_scale),
                                   rw(x_scale), rw(dw));
}

std::int64_t SimBackend::first_out_of_range(const void* index, DType dtype, std::int64_t n,
                                            std::int64_t limit) {
  return CpuBackend::first_out_of_range(rw(index), dtype, n, limit);
}

void SimBackend::dropout_forward(const RandomKey& key, float p, float scale, DType dtype,
                                 const void* src, void* dst, std::int64_t n,
                                 std::uint32_t* mask_bits) {
  CpuBackend::dropout_forward(key, p, scale, dtype, rw(src), rw(dst), n, rw(mask_bits));
}

void SimBackend::dropout_backward(const std::uint32_t* mask_bits, float scale, DType dtype,
                                  const void* grad, void* dx, std::int64_t n) {
  CpuBackend::dropout_backward(rw(mask_bits), scale, dtype, rw(grad), rw(dx), n);
}

void SimBackend::dropout_mask(const RandomKey& key, float p, std::uint8_t* mask, std::int64_t n,
                              std::uint64_t first) {
  CpuBackend::dropout_mask(key, p, rw(mask), n, first);
}

void SimBackend::concat_rows(const backend::RowPiece* pieces, std::int64_t count, std::byte* dst,
                             std::int64_t dst_row_bytes, std::int64_t rows) {
  // The pieces are host memory holding device addresses.
  std::vector<backend::RowPiece> opened(pieces, pieces + count);
  for (auto& piece : opened) piece.src = rw(piece.src);
  CpuBackend::concat_rows(opened.data(), count, rw(dst), dst_row_bytes, rows);
}

void SimBackend::extract_rows(const std::byte* src, std::int64_t src_row_bytes, std::int64_t offset,
                              std::byte* dst, std::int64_t bytes, std::int64_t rows) {
  CpuBackend::extract_rows(rw(src), src_row_bytes, offset, rw(dst), bytes, rows);
}

void SimBackend::zero_rows(std::byte* dst, std::int64_t dst_row_bytes, std::int64_t offset,
                           std::int64_t bytes, std::int64_t rows) {
  CpuBackend::zero_rows(rw(dst), dst_row_bytes, offset, bytes, rows);
}

void SimBackend::gather(const backend::ConstBuffer& x, std::int64_t axis,
                        const backend::ConstBuffer& index, void* out) {
  CpuBackend::gather(rw(x), axis, rw(index), rw(out));
}

void SimBackend::gather_backward(const float* grad, std::int64_t axis,
                                 const backend::ConstBuffer& index, float* dx,
                                 const Shape& x_shape) {
  CpuBackend::gather_backward(rw(grad), axis, rw(index), rw(dx), x_shape);
}

void SimBackend::index_select(const void* x, std::size_t element_bytes, std::int64_t outer,
                              std::int64_t n, std::int64_t inner, const backend::ConstBuffer& index,
                              void* out) {
  CpuBackend::index_select(rw(x), element_bytes, outer, n, inner, rw(index), rw(out));
}

void SimBackend::index_add(const float* grad, std::int64_t outer, std::int64_t n,
                           std::int64_t inner, const backend::ConstBuffer& index, float* dx) {
  CpuBackend::index_add(rw(grad), outer, n, inner, rw(index), rw(dx));
}

void SimBackend::argmax(const backend::ConstBuffer& x, std::int64_t outer, std::int64_t n,
                        std::int64_t inner, std::int64_t* out) {
  CpuBackend::argmax(rw(x), outer, n, inner, rw(out));
}

void SimBackend::topk(const backend::ConstBuffer& x, std::int64_t rows, std::int64_t n,
                      std::int64_t k, void* values, std::int64_t* indices) {
  CpuBackend::topk(rw(x), rows, n, k, rw(values), rw(indices));
}

void SimBackend::round_bf16(const backend::GemmOperand& x, std::int64_t rows, std::int64_t cols,
                            std::uint16_t* dst) {
  CpuBackend::round_bf16(rw(x), rows, cols, rw(dst));
}

void SimBackend::gemm(const backend::GemmProduct& p, MatmulPrecision precision) {
  CpuBackend::gemm(rw(p), precision);
}

void SimBackend::gemm_pair(const backend::GemmProduct& first, const backend::GemmProduct& second,
                           MatmulPrecision precision) {
  CpuBackend::gemm_pair(rw(first), rw(second), precision);
}

void SimBackend::matmul(const backend::MatrixOperand& a, const backend::MatrixOperand& b,
                        float* out, const Shape& out_shape, MatmulPrecision precision) {
  CpuBackend::matmul(rw(a), rw(b), rw(out), out_shape, precision);
}

void SimBackend::unscale(std::int64_t n, DType src_dtype, const void* src, float* master,
                         float scale, float* amax) {
  CpuBackend::unscale(n, src_dtype, rw(src), rw(master), scale, rw(amax));
}

GradientStats SimBackend::gradient_stats(const GradientSource& grads, std::int64_t n,
                                         const float* loss) {
  return CpuBackend::gradient_stats(rw(grads), n, loss != nullptr ? rw(loss) : nullptr);
}

void SimBackend::gradient_stats_to(const GradientSource& grads, std::int64_t n, const float* loss,
                                   GradientStats* out) {
  CpuBackend::gradient_stats_to(rw(grads), n, loss != nullptr ? rw(loss) : nullptr, rw(out));
}

void SimBackend::clip_by_norm(float* grads, std::int64_t n, const GradientStats* stats,
                              double max_norm) {
  CpuBackend::clip_by_norm(rw(grads), n, rw(stats), max_norm);
}

void SimBackend::larc(const float* values, float* grads, const FlatSlice* slices,
                      std::int64_t count, const LarcOptions& options) {
  CpuBackend::larc(rw(values), rw(grads), slices, count, options);
}

void SimBackend::adam_update(std::int64_t n, float* p, const GradientSource& grad, float* m,
                             float* v, float* vmax, const AdamUpdate& args,
                             const PublishedValues& publish) {
  CpuBackend::adam_update(n, rw(p), rw(grad), rw(m), rw(v), rw(vmax), args, rw(publish));
}

void SimBackend::sgd_update(std::int64_t n, float* p, const GradientSource& grad, float* buffer,
                            const SgdUpdate& args, const PublishedValues& publish) {
  CpuBackend::sgd_update(n, rw(p), rw(grad), rw(buffer), args, rw(publish));
}

void SimBackend::novograd_update(float* p, const float* grad, float* m, float* ema,
                                 const FlatSlice* slices, std::int64_t count,
                                 const NovogradUpdate& args) {
  CpuBackend::novograd_update(rw(p), rw(grad), rw(m), rw(ema), slices, count, args);
}

}  // namespace sim

backend::Backend& backend::sim_backend() {
  static sim::SimBackend* backend = new sim::SimBackend();  // leaked: used by static destructors
  return *backend;
}

}  // namespace rig
