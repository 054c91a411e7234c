// Backend's 16-bit storage entry points' defaults: a back end that computes
// only f32 says so (reads_16bit_storage() is false) and the ops give it f32
// copies; a call anyway is a bug in the caller.
#include <stdexcept>
#include <string>

#include "backend/backend.hpp"

namespace rig::backend {

namespace {

[[noreturn]] void f32_only(const char* entry) {
  throw std::logic_error(std::string("Backend::") + entry +
                         " called on a back end that computes f32 storage only");
}

[[noreturn]] void not_fused(const char* entry) {
  throw std::logic_error(std::string("Backend::") + entry +
                         " called on a back end that does not fuse relu (fuses_relu() is false)");
}

}  // namespace

void Backend::binary_16(Binary, const StridedPlan<3>&, DType, const void*, const void*, void*) {
  f32_only("binary_16");
}

void Backend::unary_16(Unary, DType, const void*, void*, std::int64_t, float) {
  f32_only("unary_16");
}

void Backend::unary_backward_16(Unary, DType, const void*, const void*, const void*, void*,
                                std::int64_t, float) {
  f32_only("unary_backward_16");
}

void Backend::activation_backward_16(Activation, DType, const void*, DType, const void*, DType,
                                     void*, DType, void*, std::int64_t, std::int64_t, float, bool) {
  f32_only("activation_backward_16");
}

void Backend::bias_activation_16(DType, const float*, DType, const void*, std::int64_t,
                                 std::int64_t, Activation, const RandomKey*, float, float, void*) {
  f32_only("bias_activation_16");
}

void Backend::batch_norm_stats_16(const BatchNormShape&, DType, const void*, float*, float*) {
  f32_only("batch_norm_stats_16");
}

void Backend::batch_norm_apply_16(const BatchNormShape&, DType, const void*, const float*,
                                  const float*, void*) {
  f32_only("batch_norm_apply_16");
}

void Backend::global_avg_pool_forward_16(std::int64_t, std::int64_t, std::int64_t, DType,
                                         const void*, void*) {
  f32_only("global_avg_pool_forward_16");
}

void Backend::global_avg_pool_backward_16(std::int64_t, std::int64_t, std::int64_t, DType,
                                          const void*, void*) {
  f32_only("global_avg_pool_backward_16");
}

void Backend::batch_norm_backward_16(const BatchNormShape&, DType, const void*, const void*,
                                     const float*, const float*, DType, const void*, bool, void*,
                                     void*, void*, const NormGradAccumulation&) {
  f32_only("batch_norm_backward_16");
}

void Backend::index_add_16(DType, const void*, std::int64_t, std::int64_t, std::int64_t,
                           const ConstBuffer&, DType, void*) {
  f32_only("index_add_16");
}

void Backend::conv2d_forward_16(const Conv2dShape&, DType, const void*, const void*, void*) {
  f32_only("conv2d_forward_16");
}

void Backend::conv2d_backward_16(const Conv2dShape&, DType, const void*, const void*, const void*,
                                 void*, void*, const ConvGradAccumulation&) {
  f32_only("conv2d_backward_16");
}

void Backend::layer_norm_forward_16(DType, const void*, DType, const void*, const void*, void*,
                                    float*, float*, std::int64_t, std::int64_t, float) {
  f32_only("layer_norm_forward_16");
}

void Backend::layer_norm_backward_16(DType, const void*, DType, const void*, const float*,
                                     const float*, const void*, void*, void*, void*, std::int64_t,
                                     std::int64_t, float*, const NormGradAccumulation&) {
  f32_only("layer_norm_backward_16");
}

void Backend::max_pool2d_forward_16(const Pool2dShape&, DType, const void*, void*, std::int32_t*) {
  f32_only("max_pool2d_forward_16");
}

void Backend::max_pool2d_backward_16(const Pool2dShape&, DType, const std::int32_t*, const void*,
                                     void*) {
  f32_only("max_pool2d_backward_16");
}

void Backend::batch_norm_apply_relu(const BatchNormShape&, DType, const void*, const float*,
                                    const float*, void*) {
  not_fused("batch_norm_apply_relu");
}

bool Backend::batch_norm_apply_add_relu(const BatchNormShape&, DType, const void*, const float*,
                                        const float*, const void*, const float*, const float*,
                                        void*, std::uint8_t*) {
  not_fused("batch_norm_apply_add_relu");
}

void Backend::batch_norm_backward_relu(const BatchNormShape&, DType, const void*,
                                       const BatchNormReluMask&, const void*, const float*,
                                       const float*, DType, const void*, bool, void*, void*, void*,
                                       void*, const NormGradAccumulation&) {
  not_fused("batch_norm_backward_relu");
}

void Backend::add_relu(const StridedPlan<3>&, DType, const void*, const void*, void*) {
  not_fused("add_relu");
}

void Backend::dropout_add_forward(const RandomKey&, float, float, DType, const void*, const void*,
                                  void*, std::int64_t, std::uint32_t*, const RowScale&) {
  not_fused("dropout_add_forward");
}

void Backend::dropout_add_backward(const std::uint32_t*, float, DType, const void*, void*,
                                   std::int64_t, const RowScale&) {
  not_fused("dropout_add_backward");
}

}  // namespace rig::backend
