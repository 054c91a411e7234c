// The CUDA back end's entry points: every backend::Backend call as a short
// sequence of core/cuda/kernels runs, cuBLASLt plans and convolutions on a
// KernelDevice. Plain C++ compiled once per library: librig_cuda runs it on
// the GPU, librig on the SIMT emulator (RIG_CUDA_EMULATOR=1), so the mapping
// from entry points to kernels is tested on machines without a GPU. The
// entry points are grouped by family in kernel_backend_*.cpp.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "backend/backend.hpp"
#include "cuda/backend/kernel_device.hpp"

namespace rig::cuda {

// Device memory for the duration of one entry point, back to the pool when
// destroyed. Kernels queued on the device's one stream before the free run
// before any later user of the block, so no wait is needed.
class DeviceScratch {
 public:
  DeviceScratch() = default;
  DeviceScratch(backend::MemoryPool& pool, std::size_t bytes);
  ~DeviceScratch();
  DeviceScratch(DeviceScratch&& other) noexcept;
  DeviceScratch& operator=(DeviceScratch&& other) noexcept;
  DeviceScratch(const DeviceScratch&) = delete;
  DeviceScratch& operator=(const DeviceScratch&) = delete;
  template <class T>
  T* as() const {
    return reinterpret_cast<T*>(block_.data);
  }

 private:
  backend::MemoryPool* pool_ = nullptr;
  backend::Block block_;
};

// One attention product on 16-bit operands (KernelBackend::gemm_heads_16):
// C[m, n] = alpha op(A)[m, k] op(B)[k, n], row-major as backend::GemmProduct,
// A and B of the 16-bit `type` read with their leading dimensions as they
// are, accumulated in f32, C written in `c_type` (f32, or `type` rounded
// once).
struct HeadProduct16 {
  std::int64_t m = 0, n = 0, k = 0;
  float alpha = 1.0F;
  const void* a = nullptr;
  std::int64_t lda = 0;
  bool trans_a = false;
  const void* b = nullptr;
  std::int64_t ldb = 0;
  bool trans_b = false;
  void* c = nullptr;
  std::int64_t ldc = 0;
  DType type = DType::bf16;
  DType c_type = DType::f32;
};

class KernelBackend final : public backend::Backend {
 public:
  explicit KernelBackend(std::unique_ptr<KernelDevice> device, int index);
  ~KernelBackend() override;

  KernelDevice& device() { return *device_; }

  Device::Type type() const override { return Device::Type::cuda; }
  backend::MemoryPool& memory(Device device) override;
  std::optional<double> device_utilisation(Device) override { return device_->utilisation(); }
  bool set_convolution_autotuning(Device, bool on) override {
    return device_->set_convolution_autotuning(on);
  }
  // f32 products and convolutions are then planned with TF32 allowed (the
  // census says so on any device); the device says whether it has TF32.
  bool set_tf32(Device, bool on) override {
    tf32_ = on;
    return on && device_->has_tf32();
  }
  void to_host(void* host, const void* src, std::size_t bytes) override;
  // The device's own (on a GPU, not waiting for later work); raises no
  // queued index check: it is not a read of everything queued.
  std::unique_ptr<backend::PendingRead> to_host_later(const void* src, std::size_t bytes) override;
  void begin_uploads() override { device_->begin_uploads(); }
  std::uint64_t end_uploads() override { return device_->end_uploads(); }
  void use_uploads(std::uint64_t ticket) override { device_->use_uploads(ticket); }
  void from_host(void* dst, const void* host, std::size_t bytes) override;
  void synchronize() override;

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
  bool reads_16bit_storage() const override { return true; }
  void unary_16(backend::Unary op, DType type, const void* x, void* y, std::int64_t n,
                float scalar) override;
  void unary_backward_16(backend::Unary op, DType type, const void* g, const void* x, const void* y,
                         void* dx, std::int64_t n, float scalar) override;
  void binary_16(backend::Binary op, const backend::StridedPlan<3>& plan, DType type, const void* a,
                 const void* b, void* out) override;
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
  void activation_backward_16(Activation activation, DType g_type, const void* g, DType saved_type,
                              const void* saved, DType dz_type, void* dz, DType db_type, void* db,
                              std::int64_t rows, std::int64_t cols, float relu_scale,
                              bool accumulate_db) override;
  void bias_activation_16(DType type, const float* y, DType bias_type, const void* bias,
                          std::int64_t rows, std::int64_t cols, Activation activation,
                          const RandomKey* dropout_key, float p, float scale, void* out) override;

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
  void layer_norm_forward_16(DType type, const void* x, DType param_type, const void* gamma,
                             const void* beta, void* y, float* mean, float* rstd, std::int64_t rows,
                             std::int64_t d, float eps) override;
  void layer_norm_backward_16(DType type, const void* x, DType param_type, const void* gamma,
                              const float* mean, const float* rstd, const void* g, void* dx,
                              void* dgamma, void* dbeta, std::int64_t rows, std::int64_t d,
                              float* scratch,
                              const backend::NormGradAccumulation& accumulate) override;
  void batch_norm_stats(const backend::BatchNormShape& s, const float* x, float* mean,
                        float* var) override;
  void batch_norm_prepare(const backend::BatchNormPrepare& args) override;
  void batch_norm_apply(const backend::BatchNormShape& s, const float* x, const float* scale,
                        const float* shift, float* y) override;
  void batch_norm_backward(const backend::BatchNormShape& s, const float* x, const float* dy,
                           const float* mean, const float* invstd, const float* gamma,
                           bool batch_stats, float* dx, float* dgamma, float* dbeta) override;
  void batch_norm_stats_16(const backend::BatchNormShape& s, DType type, const void* x, float* mean,
                           float* var) override;
  void batch_norm_stats_prepare(const backend::BatchNormShape& s, DType type, const void* x,
                                float* var, const backend::BatchNormPrepare& args) override;
  void batch_norm_apply_16(const backend::BatchNormShape& s, DType type, const void* x,
                           const float* scale, const float* shift, void* y) override;
  void batch_norm_backward_16(const backend::BatchNormShape& s, DType type, const void* x,
                              const void* dy, const float* mean, const float* invstd,
                              DType param_type, const void* gamma, bool batch_stats, void* dx,
                              void* dgamma, void* dbeta,
                              const backend::NormGradAccumulation& accumulate) override;
  bool fuses_relu() const override { return true; }
  bool fuses_dropout_add() const override { return true; }
  void dropout_add_forward(const RandomKey& key, float p, float scale, DType dtype, const void* src,
                           const void* residual, void* dst, std::int64_t n,
                           std::uint32_t* mask_bits, const backend::RowScale& rows) override;
  void dropout_add_backward(const std::uint32_t* mask_bits, float scale, DType dtype,
                            const void* grad, void* dx, std::int64_t n,
                            const backend::RowScale& rows) override;
  void add_relu(const backend::StridedPlan<3>& plan, DType type, const void* a, const void* b,
                void* out) override;
  void batch_norm_apply_relu(const backend::BatchNormShape& s, DType type, const void* x,
                             const float* scale, const float* shift, void* y) override;
  bool batch_norm_apply_add_relu(const backend::BatchNormShape& s, DType type, const void* x,
                                 const float* scale, const float* shift, const void* residual,
                                 const float* residual_scale, const float* residual_shift, void* y,
                                 std::uint8_t* relu_bits) override;
  void batch_norm_backward_relu(const backend::BatchNormShape& s, DType type, const void* x,
                                const backend::BatchNormReluMask& relu, const void* dy,
                                const float* mean, const float* invstd, DType param_type,
                                const void* gamma, bool batch_stats, void* dx, void* dgamma,
                                void* dbeta, void* masked_dy,
                                const backend::NormGradAccumulation& accumulate) override;

  void conv2d_forward(const backend::Conv2dShape& s, const float* x, const float* w, const float* b,
                      float* y) override;
  void conv2d_backward(const backend::Conv2dShape& s, const float* x, const float* w,
                       const float* dy, float* dx, float* dw, float* db) override;
  void conv2d_forward_16(const backend::Conv2dShape& s, DType type, const void* x, const void* w,
                         void* y) override;
  void conv2d_backward_16(const backend::Conv2dShape& s, DType type, const void* x, const void* w,
                          const void* dy, void* dx, void* dw,
                          const backend::ConvGradAccumulation& accumulate) override;
  void max_pool2d_forward(const backend::Pool2dShape& s, const float* x, float* y,
                          std::int32_t* index) override;
  void max_pool2d_backward(const backend::Pool2dShape& s, const std::int32_t* index,
                           const float* dy, float* dx) override;
  void max_pool2d_forward_16(const backend::Pool2dShape& s, DType type, const void* x, void* y,
                             std::int32_t* index) override;
  void max_pool2d_backward_16(const backend::Pool2dShape& s, DType type, const std::int32_t* index,
                              const void* dy, void* dx) override;
  void avg_pool2d_forward(const backend::Pool2dShape& s, const float* x, float* y) override;
  void avg_pool2d_backward(const backend::Pool2dShape& s, const float* dy, float* dx) override;
  void global_avg_pool_forward(std::int64_t planes, std::int64_t size, std::int64_t channels,
                               const float* x, float* y) override;
  void global_avg_pool_backward(std::int64_t planes, std::int64_t size, std::int64_t channels,
                                const float* dy, float* dx) override;
  void global_avg_pool_forward_16(std::int64_t planes, std::int64_t size, std::int64_t channels,
                                  DType type, const void* x, void* y) override;
  void global_avg_pool_backward_16(std::int64_t planes, std::int64_t size, std::int64_t channels,
                                   DType type, const void* dy, void* dx) override;

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

  bool composes_attention_16(DType type) const override {
    return type == DType::bf16 || type == DType::f16;
  }
  void attention_forward_16(const backend::AttentionShape& s, DType type, const void* q,
                            const backend::HeadStrides& qs, const void* k,
                            const backend::HeadStrides& ks, const void* v,
                            const backend::HeadStrides& vs, void* out,
                            const backend::HeadStrides& os, float* probs) override;
  void attention_backward_16(const backend::AttentionShape& s, DType type, const void* q,
                             const backend::HeadStrides& qs, const void* k,
                             const backend::HeadStrides& ks, const void* v,
                             const backend::HeadStrides& vs, const float* probs, const void* dout,
                             const backend::HeadStrides& dos, void* dq,
                             const backend::HeadStrides& dqs, void* dk,
                             const backend::HeadStrides& dks, void* dv,
                             const backend::HeadStrides& dvs) override;

  void cross_entropy_forward(const float* x, const std::int64_t* labels, std::int64_t rows,
                             std::int64_t c, float on, float off, float* loss, float* lse) override;
  void cross_entropy_backward(const float* x, const std::int64_t* labels, const float* lse,
                              const float* row_scale, float scale, const float* scale_factor,
                              std::int64_t rows, std::int64_t c, float on, float off,
                              float* dx) override;
  bool fused_attention_supported(const backend::FusedAttention& a) override {
    return device_->fused_attention_supported(a);
  }
  void fused_attention_forward(const backend::FusedAttention& a) override {
    device_->fused_attention_forward(a);
  }
  void fused_attention_backward(const backend::FusedAttention& a) override {
    device_->fused_attention_backward(a);
  }
  bool cross_entropy_reads_16bit() const override { return true; }
  void cross_entropy_forward_16(DType type, const void* x, const std::int64_t* labels,
                                std::int64_t rows, std::int64_t c, float on, float off, float* loss,
                                float* lse) override;
  void cross_entropy_backward_16(DType type, const void* x, const std::int64_t* labels,
                                 const float* lse, const float* row_scale, float scale,
                                 const float* scale_factor, std::int64_t rows, std::int64_t c,
                                 float on, float off, void* dx) override;
  void padded_loss(const float* xent, const float* w, std::int64_t rows, double constant,
                   float* loss) override;
  void padded_loss_backward(const float* xent, const float* w, std::int64_t rows, double constant,
                            const float* upstream, float* row_scale, float* x_scale,
                            float* dw) override;
  std::int64_t first_out_of_range(const void* index, DType dtype, std::int64_t n,
                                  std::int64_t limit) override;
  // Queued: raised at the next read of the device (to_host, synchronize,
  // first_out_of_range, gradient_stats, read_gradient_stats), so a step's
  // index checks do not stall it. See kernel_backend_checks.cpp.
  void check_index(const void* index, DType dtype, std::int64_t n, std::int64_t limit,
                   const IndexMessage& message) override;
  bool defers_index_checks() const override { return true; }

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
  void index_add_16(DType grad_type, const void* grad, std::int64_t outer, std::int64_t n,
                    std::int64_t inner, const backend::ConstBuffer& index, DType type,
                    void* dx) override;
  void argmax(const backend::ConstBuffer& x, std::int64_t outer, std::int64_t n, std::int64_t inner,
              std::int64_t* out) override;
  void topk(const backend::ConstBuffer& x, std::int64_t rows, std::int64_t n, std::int64_t k,
            void* values, std::int64_t* indices) override;
  std::int64_t topk_max_k() const override;

  bool rounds_bf16_operands() const override { return true; }
  bool gemm_writes_bf16() const override { return true; }
  // cuBLASLt's bias epilogue needs a 16-byte aligned bias (Marian's and
  // PyTorch's experience; parameters in the flat buffers usually are).
  bool gemm_adds_bias(const void* bias) const override {
    return reinterpret_cast<std::uintptr_t>(bias) % 16 == 0;
  }
  bool fast_bf16_products() const override { return true; }
  bool f16_products() const override { return true; }
  // cuBLASLt's DRELU and BGRADA epilogues, where one small product of each
  // (asked once per type) finds an algorithm: an older GPU's cuBLASLt may
  // lack them. RIG_CUDA_RELU_MASKS=0 turns them off. Without them the ops
  // keep the relu layer's output, as the CPU's do.
  bool gemm_relu_masks(DType type) override;
  void relu_mask(const RandomKey* dropout_key, float p, DType dtype, void* h, std::int64_t rows,
                 std::int64_t cols, std::uint8_t* mask, std::int64_t mask_ld) override;
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
  void read_gradient_stats(const GradientStats* records, std::int64_t count,
                           GradientStats* host) override;
  void larc(const float* values, float* grads, const FlatSlice* slices, std::int64_t count,
            const LarcOptions& options) override;

  void adam_update(std::int64_t n, float* p, const GradientSource& grad, float* m, float* v,
                   float* vmax, const AdamUpdate& args, const PublishedValues& publish) override;
  void sgd_update(std::int64_t n, float* p, const GradientSource& grad, float* buffer,
                  const SgdUpdate& args, const PublishedValues& publish) override;
  void novograd_update(float* p, const float* grad, float* m, float* ema, const FlatSlice* slices,
                       std::int64_t count, const NovogradUpdate& args) override;

 private:
  DeviceScratch scratch(std::size_t bytes) { return {device_->memory(), bytes}; }
  // n elements of `type` at src copied to f32 scratch (null src: an empty scratch).
  DeviceScratch f32_copy(DType type, const void* src, std::int64_t n);
  // A device copy of `bytes` host bytes (argument arrays: row pieces, slices).
  DeviceScratch upload(const void* host, std::size_t bytes);
  // Whether index_add sorts k positions into n rows (else the column walk).
  static bool index_add_sorts(std::int64_t k, std::int64_t n);
  // The sort-by-row index_add (kernels/index_add.hpp) into dx of dx_type.
  void index_add_sorted(kernels::ElementType grad_type, const void* grad, std::int64_t outer,
                        std::int64_t n, std::int64_t inner, const backend::ConstBuffer& index,
                        kernels::ElementType dx_type, void* dx);
  // Queues `kernel` on the device (which skips an empty launch).
  template <class Kernel>
  void run(const Kernel& kernel) {
    device_->run(kernel);
  }
  void scale_c(std::int64_t m, std::int64_t n, void* c, std::int64_t ldc, DType type, float beta);
  // `count` products like `first`, product i reading A and B and writing C
  // i * stride_a, i * stride_b, i * stride_c floats past first's (0 for A or
  // B: the same matrix for every product; C's must not overlap): one strided
  // batched cuBLASLt product (bf16 precision rounds the operands into dense
  // scratch first, as gemm() does). first's operands carry no bf16 copies.
  void gemm_f16(const backend::GemmProduct& p);
  void gemm_batched(const backend::GemmProduct& first, std::int64_t count, std::int64_t stride_a,
                    std::int64_t stride_b, std::int64_t stride_c, MatmulPrecision precision);
  // One attention product per (batch, head), `first` being (0, 0)'s and the
  // strides saying where the others are (time unused): one strided batch
  // where each operand's heads are equally spaced across batches, else one
  // batch of heads per batch element, else a product at a time.
  void gemm_heads(std::int64_t batches, std::int64_t heads, const backend::GemmProduct& first,
                  const backend::HeadStrides& a, const backend::HeadStrides& b,
                  const backend::HeadStrides& c, MatmulPrecision precision);
  // The same on 16-bit operands read as they are (HeadProduct16).
  void gemm_heads_16(std::int64_t batches, std::int64_t heads, const HeadProduct16& first,
                     const backend::HeadStrides& a, const backend::HeadStrides& b,
                     const backend::HeadStrides& c);
  // The softmax of attention's scores (AttentionSoftmaxForward) into probs
  // and weights of `type` (each may be null).
  void attention_softmax(const backend::AttentionShape& s, const float* scores, float* probs,
                         void* weights, DType type);
  // s with TF32 allowed where set_tf32 asked for it (kernel_backend_conv.cpp).
  backend::Conv2dShape tf32_allowed(const backend::Conv2dShape& s) const;
  // Batch norm's apply and backward, with the relu (and before it a
  // residual's add) fused where asked (relu, residual non-null; a relu
  // mask): see kernel_backend_batch_norm.cpp. The apply says whether it
  // wrote relu_bits (where the kernel is packed).
  struct ApplyResidual {
    const void* data = nullptr;    // null: none
    const float* scale = nullptr;  // with shift: normalised first
    const float* shift = nullptr;
  };
  bool batch_norm_apply_kernel(const backend::BatchNormShape& s, DType type, const void* x,
                               const float* scale, const float* shift, void* y, bool relu,
                               const ApplyResidual& residual, std::uint8_t* relu_bits);
  void batch_norm_stats_kernels(const backend::BatchNormShape& s, DType type, const void* x,
                                float* mean, float* var, const backend::BatchNormPrepare* prepare);
  void batch_norm_backward_kernels(const backend::BatchNormShape& s, DType type, const void* x,
                                   const backend::BatchNormReluMask& relu, const void* dy,
                                   const float* mean, const float* invstd, DType param_type,
                                   const void* gamma, bool batch_stats, void* dx, void* dgamma,
                                   void* dbeta, void* masked_dy,
                                   const backend::NormGradAccumulation& accumulate);

  // Throws the first failed queued index check's message (after a read of
  // the device, whose wait covers the checks' kernels); clears the queue.
  void raise_index_errors();
  // The same from `results`, the checks' (position, value) pairs as read.
  void raise_index_errors_of(const std::int64_t* results);
  // The device buffer of the queued checks' results (allocated on first use),
  // with room behind them for one GradientStats.
  std::int64_t* check_slots();

  std::unique_ptr<KernelDevice> device_;
  int index_ = 0;
  bool relu_masks_ = true;                                // RIG_CUDA_RELU_MASKS
  bool tf32_ = false;                                     // set_tf32
  std::optional<bool> relu_masks_bf16_, relu_masks_f16_;  // gemm_relu_masks' answers
  // Queued index checks: (position, value) pairs on the device, in issue
  // order. A full queue is read at once: room for a few hundred steps of a
  // Transformer's checks, read between logging steps (16 KiB).
  static constexpr std::size_t kQueuedChecks = 1024;
  DeviceScratch check_results_;
  std::vector<IndexMessage> check_messages_;
};

// Plans `request` (gemm/gemm_plan.hpp) and runs it on rig's operands a and
// b, C read and written at c; at `bias` the bias its epilogue adds (C's type)
// or the bias gradient it writes, at `aux` the relu mask it writes or reads.
void run_request(KernelDevice& device, const GemmRequest& request, const void* a, const void* b,
                 void* c, const void* bias = nullptr, void* aux = nullptr);

// A leading dimension cuBLASLt accepts for a stored [rows, cols] matrix: a
// one-row matrix may come with any ld (it is never stepped over).
std::int64_t usable_ld(std::int64_t ld, std::int64_t stored_rows, std::int64_t stored_cols);

// The element type of the kernels for a floating dtype (f32, f16, bf16);
// throws std::invalid_argument naming `what` for any other.
kernels::ElementType element_type(DType dtype, const char* what);
// element_type of an operand that may be f32 or the op's 16-bit `sixteen`
// only (a 16-bit model's parameters, a gradient): `what` names it in the
// std::invalid_argument otherwise.
kernels::ElementType f32_or(DType dtype, DType sixteen, const char* op, const char* what);

}  // namespace rig::cuda
