// KernelBackend: elementwise ops, bias + activation and its backward.
#include "cuda/backend/kernel_backend.hpp"

#include <stdexcept>
#include <string>

namespace rig::cuda {

void KernelBackend::unary(backend::Unary op, const float* x, float* y, std::int64_t n,
                          float scalar) {
  run(kernels::UnaryForward{static_cast<kernels::UnaryOp>(op), x, y, n, scalar});
}

void KernelBackend::unary_backward(backend::Unary op, const float* g, const float* x,
                                   const float* y, float* dx, std::int64_t n, float scalar) {
  run(kernels::UnaryBackward{static_cast<kernels::UnaryOp>(op), g, x, y, dx, n, scalar});
}

// The kernels' float* operands hold 16-bit values here (their `type`).
void KernelBackend::unary_16(backend::Unary op, DType type, const void* x, void* y, std::int64_t n,
                             float scalar) {
  kernels::UnaryForward k{static_cast<kernels::UnaryOp>(op), static_cast<const float*>(x),
                          static_cast<float*>(y), n, scalar};
  k.type = element_type(type, "unary_16");
  run(k);
}

void KernelBackend::unary_backward_16(backend::Unary op, DType type, const void* g, const void* x,
                                      const void* y, void* dx, std::int64_t n, float scalar) {
  kernels::UnaryBackward k{static_cast<kernels::UnaryOp>(op),
                           static_cast<const float*>(g),
                           static_cast<const float*>(x),
                           static_cast<const float*>(y),
                           static_cast<float*>(dx),
                           n,
                           scalar};
  k.type = element_type(type, "unary_backward_16");
  run(k);
}

namespace {

kernels::BinaryKernel binary_kernel(backend::Binary op, const backend::StridedPlan<3>& plan) {
  kernels::BinaryKernel k;
  k.op = static_cast<kernels::BinaryOp>(op);
  k.ndim = plan.ndim;
  for (int d = 0; d < plan.ndim; ++d) {
    const auto u = static_cast<std::size_t>(d);
    k.shape[d] = plan.shape[u];
    for (std::size_t o = 0; o < 3; ++o) k.strides[o][d] = plan.strides[o][u];
  }
  return k;
}

}  // namespace

void KernelBackend::binary(backend::Binary op, const backend::StridedPlan<3>& plan, const float* a,
                           const float* b, float* out) {
  kernels::BinaryKernel k = binary_kernel(op, plan);
  k.a = a;
  k.b = b;
  k.out = out;
  run(k);
}

// The kernel's float* operands hold 16-bit values here (BinaryKernel::type).
void KernelBackend::binary_16(backend::Binary op, const backend::StridedPlan<3>& plan, DType type,
                              const void* a, const void* b, void* out) {
  kernels::BinaryKernel k = binary_kernel(op, plan);
  k.a = static_cast<const float*>(a);
  k.b = static_cast<const float*>(b);
  k.out = static_cast<float*>(out);
  k.type = element_type(type, "binary_16");
  run(k);
}

void KernelBackend::add_relu(const backend::StridedPlan<3>& plan, DType type, const void* a,
                             const void* b, void* out) {
  kernels::BinaryKernel k = binary_kernel(backend::Binary::add, plan);
  k.a = static_cast<const float*>(a);
  k.b = static_cast<const float*>(b);
  k.out = static_cast<float*>(out);
  k.type = element_type(type, "add_relu");
  k.relu = true;
  run(k);
}

void KernelBackend::compare(backend::Compare op, const backend::StridedPlan<3>& plan, DType dtype,
                            const void* a, const void* b, double scalar, std::uint8_t* out) {
  kernels::CompareKernel k;
  k.op = static_cast<kernels::CompareOp>(op);
  k.dtype = dtype;
  k.ndim = plan.ndim;
  for (int d = 0; d < plan.ndim; ++d) {
    const auto u = static_cast<std::size_t>(d);
    k.shape[d] = plan.shape[u];
    for (std::size_t o = 0; o < 3; ++o) k.strides[o][d] = plan.strides[o][u];
  }
  k.a = a;
  k.b = b;
  k.scalar = scalar;
  k.out = out;
  run(k);
}

void KernelBackend::select(const Shape& shape, std::size_t element_bytes,
                           const backend::SelectOperand& cond, const backend::SelectOperand& a,
                           const backend::SelectOperand& b, void* out) {
  if (shape_numel(shape) == 0) return;
  const auto plan = backend::make_strided_plan<3>(shape, {&cond.strides, &a.strides, &b.strides});
  kernels::Select k;
  k.ndim = plan.ndim;
  for (int d = 0; d < plan.ndim; ++d) {
    const auto u = static_cast<std::size_t>(d);
    k.shape[d] = plan.shape[u];
    for (std::size_t o = 0; o < 3; ++o) k.strides[o][d] = plan.strides[o][u];
  }
  k.cond = static_cast<const std::uint8_t*>(cond.data);
  k.a = a.data;
  k.b = b.data;
  k.out = out;
  k.element_bytes = static_cast<int>(element_bytes);
  run(k);
}

void KernelBackend::bias_activation(float* y, float* pre, const float* bias, std::int64_t rows,
                                    std::int64_t cols, Activation activation) {
  run(kernels::BiasActivation{y, pre, bias, rows, cols, activation});
}

namespace {

// ActivationBackward, with db's per-row-block partials summed by ColumnTotals
// where there is more than one block of rows, or where db is 16-bit (stored
// rounded by ColumnTotals).
template <class Run, class Scratch>
void activation_backward_with(Run&& run, Scratch&& scratch, kernels::ActivationBackward k, void* db,
                              kernels::ElementType db_type = kernels::ElementType::f32,
                              bool accumulate_db = false) {
  const std::int64_t blocks = kernels::activation_row_blocks(k.rows);
  const bool totals =
      db != nullptr && (blocks > 1 || db_type != kernels::ElementType::f32 || accumulate_db);
  DeviceScratch partial;
  k.db_partial = static_cast<float*>(db);
  if (totals) {
    partial = scratch(static_cast<std::size_t>(blocks * k.cols) * sizeof(float));
    k.db_partial = partial.template as<float>();
  }
  run(k);
  if (totals) {
    kernels::ColumnTotals t{k.db_partial, db, blocks, k.cols};
    t.out_type = db_type;
    t.accumulate = accumulate_db;
    run(t);
  }
}

}  // namespace

void KernelBackend::activation_backward(Activation activation, const float* g, const float* saved,
                                        float* dz, float* db, std::int64_t rows, std::int64_t cols,
                                        float relu_scale) {
  // As the CPU: no activation writes no dz (the caller's g is the gradient).
  if (activation == Activation::none) {
    if (db == nullptr) return;
    dz = nullptr;
  }
  activation_backward_with(
      [this](const auto& k) { run(k); }, [this](std::size_t bytes) { return scratch(bytes); },
      {activation, g, saved, dz, nullptr, nullptr, rows, cols, relu_scale}, db);
}

void KernelBackend::activation_backward_bf16(Activation activation, const float* g,
                                             const float* saved, std::uint16_t* dz_bf16, float* db,
                                             std::int64_t rows, std::int64_t cols,
                                             float relu_scale) {
  activation_backward_with(
      [this](const auto& k) { run(k); }, [this](std::size_t bytes) { return scratch(bytes); },
      {activation, g, saved, nullptr, dz_bf16, nullptr, rows, cols, relu_scale}, db);
}

void KernelBackend::activation_backward_16(Activation activation, DType g_type, const void* g,
                                           DType saved_type, const void* saved, DType dz_type,
                                           void* dz, DType db_type, void* db, std::int64_t rows,
                                           std::int64_t cols, float relu_scale,
                                           bool accumulate_db) {
  // g, saved and db each f32 or dz's 16-bit type.
  const auto sixteen = [&](DType type, const char* what) {
    return f32_or(type, dz_type, "activation_backward_16", what) != kernels::ElementType::f32;
  };
  const kernels::ElementType half = element_type(dz_type, "activation_backward_16");
  if (dz_type == DType::f32) {
    throw std::invalid_argument("activation_backward_16: dz must be f16 or bf16");
  }
  const bool g16 = sixteen(g_type, "g");
  const bool saved16 = sixteen(saved_type, "saved");
  const kernels::ElementType db_element = f32_or(db_type, dz_type, "activation_backward_16", "db");
  kernels::ActivationBackward k{activation,
                                g16 ? nullptr : static_cast<const float*>(g),
                                saved16 ? nullptr : static_cast<const float*>(saved),
                                nullptr,
                                static_cast<std::uint16_t*>(dz),
                                nullptr,
                                rows,
                                cols,
                                relu_scale};
  if (g16) k.g16 = static_cast<const std::uint16_t*>(g);
  if (saved16) k.saved16 = static_cast<const std::uint16_t*>(saved);
  k.half = half;
  activation_backward_with([this](const auto& run_k) { run(run_k); },
                           [this](std::size_t bytes) { return scratch(bytes); }, k, db, db_element,
                           accumulate_db);
}

void KernelBackend::bias_activation_16(DType type, const float* y, DType bias_type,
                                       const void* bias, std::int64_t rows, std::int64_t cols,
                                       Activation activation, const RandomKey* dropout_key, float p,
                                       float scale, void* out) {
  if (activation != Activation::none && activation != Activation::relu) {
    throw std::invalid_argument(
        "bias_activation_16: the activation must be none or relu (the others keep an f32 y)");
  }
  kernels::BiasReluDropoutStore k;
  k.y = y;
  k.bias = bias;
  k.bias_type = f32_or(bias_type, type, "bias_activation_16", "the bias");
  k.out = out;
  k.type = element_type(type, "bias_activation_16");
  k.rows = rows;
  k.cols = cols;
  k.relu = activation == Activation::relu;
  if (dropout_key != nullptr) {
    k.dropped = true;
    k.stream = math::PhiloxStream::of(dropout_key->seed, dropout_key->step, dropout_key->rank,
                                      dropout_key->purpose);
    k.threshold = math::dropout_threshold(p);
    k.scale = scale;
  }
  run(k);
}

}  // namespace rig::cuda
