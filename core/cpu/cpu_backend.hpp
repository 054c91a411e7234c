// The CPU backend: the kernels of core/cpu behind the Backend interface, on
// host memory from the CPU's caching pool. The sim backend (core/sim) runs the
// same kernels on its guarded memory by deriving from it.
#pragma once

#include "backend/backend.hpp"

namespace rig::cpu {

class CpuBackend : public backend::Backend {
 public:
  Device::Type type() const override { return Device::Type::cpu; }

  backend::MemoryPool& memory(Device device) override;
  void to_host(void* host, const void* src, std::size_t bytes) override;
  void from_host(void* dst, const void* host, std::size_t bytes) override;
  void synchronize() override {}

  void copy_strided(const Shape& shape, void* dst, const Strides& dst_strides, DType dst_dtype,
                    const void* src, const Strides& src_strides, DType src_dtype) override;
  void fill_strided(const Shape& shape, void* dst, const Strides& dst_strides, DType dst_dtype,
                    float value) override;
  void add_strided(const Shape& shape, void* dst, const Strides& dst_strides, DType dst_dtype,
                   const void* src, const Strides& src_strides, DType src_dtype) override;
  void zero_bytes(void* dst, std::int64_t bytes) override;

  void unary(backend::Unary op, const float* x, float* y, std::int64_t n, float scalar) override;
  void unary_backward(backend::Unary op, const float* g, const float* x, const float* y, float* dx,
                      std::int64_t n, float scalar) override;
  void binary(backend::Binary op, const backend::StridedPlan<3>& plan, const float* a,
              const float* b, float* out) override;
  void broadcast_copy(const backend::StridedPlan<2>& plan, const float* x, float* out) override;
  void compare(backend::Compare op, const backend::StridedPlan<3>& plan, DType dtype, const void* a,
               const void* b, double scalar, std::uint8_t* out) override;
  void select(const Shape& shape, std::size_t element_bytes, const backend::SelectOperand& cond,
              const backend::SelectOperand& a, const backend::SelectOperand& b, void* out) override;
  void bias_activation(float* y, float* pre, const float* bias, std::int64_t rows,
                       std::int64_t cols, Activation activation) override;
  void activation_backward(Activation activation, const float* g, const float* saved, float* dz,
                           float* db, std::int64_t rows, std::int64_t cols,
                           float relu_scale) override;
  void activation_backward_bf16(Activation activation, const float* g, const float* saved,
                                std::uint16_t* dz_bf16, float* db, std::int64_t rows,
                                std::int64_t cols, float relu_scale) override;

  void sum_all(const float* x, std::int64_t n, double divisor, float* out) override;
  void sum_squares(const float* x, std::int64_t n, double divisor, float* out) override;
  void sum_axis(const float* x, float* y, std::int64_t outer, std::int64_t r, std::int64_t inner,
                float scale) override;
  void max_axis(const float* x, float* y, std::int64_t* index, std::int64_t outer, std::int64_t r,
                std::int64_t inner) override;
  void max_axis_backward(const float* g, const std::int64_t* index, float* dx, std::int64_t outer,
                         std::int64_t r, std::int64_t inner) override;

  void softmax_forward(const backend::StridedPlan<2>& plan, const float* x,
                       const std::uint8_t* mask, float* y, bool log) override;
  void softmax_backward(const float* y, const float* g, float* dx, std::int64_t rows,
                        std::int64_t n, bool log) override;
  void layer_norm_forward(const float* x, const float* gamma, const float* beta, float* y,
                          float* mean, float* rstd, std::int64_t rows, std::int64_t d,
                          float eps) override;
  std::int64_t layer_norm_scratch_size(std::int64_t rows, std::int64_t d) override;
  void layer_norm_backward(const float* x, const float* gamma, const float* mean, const float* rstd,
                           const float* g, float* dx, float* dgamma, float* dbeta,
                           std::int64_t rows, std::int64_t d, float* scratch) override;
  void batch_norm_stats(const backend::BatchNormShape& s, const float* x, float* mean,
                        float* var) override;
  void batch_norm_prepare(const backend::BatchNormPrepare& args) override;
  void batch_norm_apply(const backend::BatchNormShape& s, const float* x, const float* scale,
                        const float* shift, float* y) override;
  void batch_norm_backward(const backend::BatchNormShape& s, const float* x, const float* dy,
                           const float* mean, const float* invstd, const float* gamma,
                           bool batch_stats, float* dx, float* dgamma, float* dbeta) override;

  void conv2d_forward(const backend::Conv2dShape& s, const float* x, const float* w, const float* b,
                      float* y) override;
  void conv2d_backward(const backend::Conv2dShape& s, const float* x, const float* w,
                       const float* dy, float* dx, float* dw, float* db) override;
  bool convolves_16bit(DType type) const override;
  void conv2d_forward_16(const backend::Conv2dShape& s, DType type, const void* x, const void* w,
                         void* y) override;
  void conv2d_backward_16(const backend::Conv2dShape& s, DType type, const void* x, const void* w,
                          const void* dy, void* dx, void* dw,
                          const backend::ConvGradAccumulation& accumulate) override;
  void max_pool2d_forward(const backend::Pool2dShape& s, const float* x, float* y,
                          std::int32_t* index) override;
  void max_pool2d_backward(const backend::Pool2dShape& s, const std::int32_t* index,
                           const float* dy, float* dx) override;
  void avg_pool2d_forward(const backend::Pool2dShape& s, const float* x, float* y) override;
  void avg_pool2d_backward(const backend::Pool2dShape& s, const float* dy, float* dx) override;
  void global_avg_pool_forward(std::int64_t planes, std::int64_t size, std::int64_t channels,
                               const float* x, float* y) override;
  void global_avg_pool_backward(std::int64_t planes, std::int64_t size, std::int64_t channels,
                                const float* dy, float* dx) override;

  void attention_forward(const backend::AttentionShape& s, const float* q,
                         const backend::HeadStrides& qs, const float* k,
                         const backend::HeadStrides& ks, const float* v,
                         const backend::HeadStrides& vs, float* out, const backend::HeadStrides& os,
                         float* probs) override;
  void attention_backward(const backend::AttentionShape& s, const float* q,
                          const backend::HeadStrides& qs, const float* k,
                          const backend::HeadStrides& ks, const float* v,
                          const backend::HeadStrides& vs, const float* probs, const float* dout,
                          const backend::HeadStrides& dos, float* dq,
                          const backend::HeadStrides& dqs, float* dk,
                          const backend::HeadStrides& dks, float* dv,
                          const backend::HeadStrides& dvs) override;

  void cross_entropy_forward(const float* x, const std::int64_t* labels, std::int64_t rows,
                             std::int64_t c, float on, float off, float* loss, float* lse) override;
  void cross_entropy_backward(const float* x, const std::int64_t* labels, const float* lse,
                              const float* row_scale, float scale, const float* scale_factor,
                              std::int64_t rows, std::int64_t c, float on, float off,
                              float* dx) override;
  void padded_loss(const float* xent, const float* w, std::int64_t rows, double constant,
                   float* loss) override;
  void padded_loss_backward(const float* xent, const float* w, std::int64_t rows, double constant,
                            const float* upstream, float* row_scale, float* x_scale,
                            float* dw) override;
  std::int64_t first_out_of_range(const void* index, DType dtype, std::int64_t n,
                                  std::int64_t limit) override;

  void dropout_forward(const RandomKey& key, float p, float scale, DType dtype, const void* src,
                       void* dst, std::int64_t n, std::uint32_t* mask_bits) override;
  void dropout_backward(const std::uint32_t* mask_bits, float scale, DType dtype, const void* grad,
                        void* dx, std::int64_t n) override;
  void dropout_mask(const RandomKey& key, float p, std::uint8_t* mask, std::int64_t n,
                    std::uint64_t first) override;

  void concat_rows(const backend::RowPiece* pieces, std::int64_t count, std::byte* dst,
                   std::int64_t dst_row_bytes, std::int64_t rows) override;
  void extract_rows(const std::byte* src, std::int64_t src_row_bytes, std::int64_t offset,
                    std::byte* dst, std::int64_t bytes, std::int64_t rows) override;
  void zero_rows(std::byte* dst, std::int64_t dst_row_bytes, std::int64_t offset,
                 std::int64_t bytes, std::int64_t rows) override;
  void gather(const backend::ConstBuffer& x, std::int64_t axis, const backend::ConstBuffer& index,
              void* out) override;
  void gather_backward(const float* grad, std::int64_t axis, const backend::ConstBuffer& index,
                       float* dx, const Shape& x_shape) override;
  void index_select(const void* x, std::size_t element_bytes, std::int64_t outer, std::int64_t n,
                    std::int64_t inner, const backend::ConstBuffer& index, void* out) override;
  void index_add(const float* grad, std::int64_t outer, std::int64_t n, std::int64_t inner,
                 const backend::ConstBuffer& index, float* dx) override;
  void argmax(const backend::ConstBuffer& x, std::int64_t outer, std::int64_t n, std::int64_t inner,
              std::int64_t* out) override;
  void topk(const backend::ConstBuffer& x, std::int64_t rows, std::int64_t n, std::int64_t k,
            void* values, std::int64_t* indices) override;

  bool rounds_bf16_operands() const override { return true; }
  bool fast_bf16_products() const override;
  void round_bf16(const backend::GemmOperand& x, std::int64_t rows, std::int64_t cols,
                  std::uint16_t* dst) override;
  void gemm(const backend::GemmProduct& p, MatmulPrecision precision) override;
  void gemm_pair(const backend::GemmProduct& first, const backend::GemmProduct& second,
                 MatmulPrecision precision) override;
  void matmul(const backend::MatrixOperand& a, const backend::MatrixOperand& b, float* out,
              const Shape& out_shape, MatmulPrecision precision) override;

  void unscale(std::int64_t n, DType src_dtype, const void* src, float* master, float scale,
               float* amax) override;
  GradientStats gradient_stats(const GradientSource& grads, std::int64_t n,
                               const float* loss) override;
  void gradient_stats_to(const GradientSource& grads, std::int64_t n, const float* loss,
                         GradientStats* out) override;
  void clip_by_norm(float* grads, std::int64_t n, const GradientStats* stats,
                    double max_norm) override;
  void larc(const float* values, float* grads, const FlatSlice* slices, std::int64_t count,
            const LarcOptions& options) override;
  void adam_update(std::int64_t n, float* p, const GradientSource& grad, float* m, float* v,
                   float* vmax, const AdamUpdate& args, const PublishedValues& publish) override;
  void sgd_update(std::int64_t n, float* p, const GradientSource& grad, float* buffer,
                  const SgdUpdate& args, const PublishedValues& publish) override;
  void novograd_update(float* p, const float* grad, float* m, float* ema, const FlatSlice* slices,
                       std::int64_t count, const NovogradUpdate& args) override;
};

}  // namespace rig::cpu
