// KernelBackend: memory, host copies, strided copies and fills.
#include <cstring>
#include <stdexcept>
#include <utility>

#include <fmt/format.h>

#include "cuda/backend/kernel_backend.hpp"
#include "cuda/backend/kernel_census.hpp"
#include "rig/environment_switch.hpp"

namespace rig::cuda {

DeviceScratch::DeviceScratch(backend::MemoryPool& pool, std::size_t bytes)
    : pool_(&pool), block_(pool.allocate(bytes == 0 ? 1 : bytes)) {}

DeviceScratch::~DeviceScratch() {
  if (pool_ != nullptr) pool_->deallocate(block_);
}

DeviceScratch::DeviceScratch(DeviceScratch&& other) noexcept
    : pool_(std::exchange(other.pool_, nullptr)), block_(other.block_) {}

DeviceScratch& DeviceScratch::operator=(DeviceScratch&& other) noexcept {
  if (this != &other) {
    if (pool_ != nullptr) pool_->deallocate(block_);
    pool_ = std::exchange(other.pool_, nullptr);
    block_ = other.block_;
  }
  return *this;
}

kernels::ElementType element_type(DType dtype, const char* what) {
  switch (dtype) {
    case DType::f32:
      return kernels::ElementType::f32;
    case DType::f16:
      return kernels::ElementType::f16;
    case DType::bf16:
      return kernels::ElementType::bf16;
    default:
      break;
  }
  throw std::invalid_argument(
      fmt::format("{} on cuda: dtype {} (expected f32, f16 or bf16)", what, dtype_name(dtype)));
}

kernels::ElementType f32_or(DType dtype, DType sixteen, const char* op, const char* what) {
  if (dtype != DType::f32 && dtype != sixteen) {
    throw std::invalid_argument(fmt::format("{}: {} is {}, not f32 or {}", op, what,
                                            dtype_name(dtype), dtype_name(sixteen)));
  }
  return element_type(dtype, op);
}

KernelBackend::KernelBackend(std::unique_ptr<KernelDevice> device, int index)
    : device_(std::move(device)), index_(index), relu_masks_(rig::relu_masks_enabled()) {
  if (std::string file = census_file_requested(); !file.empty()) {
    device_ = with_census(std::move(device_), std::move(file), rig::census_shapes_requested());
  }
}

KernelBackend::~KernelBackend() = default;

backend::MemoryPool& KernelBackend::memory(Device device) {
  if (device.type != Device::Type::cuda || device.index != index_) {
    throw std::invalid_argument(fmt::format("the back end of cuda:{} asked for the memory of {}",
                                            index_, to_string(device)));
  }
  return device_->memory();
}

void KernelBackend::to_host(void* host, const void* src, std::size_t bytes) {
  if (bytes != 0) device_->to_host(host, src, bytes);
  raise_index_errors();
}

std::unique_ptr<backend::PendingRead> KernelBackend::to_host_later(const void* src,
                                                                   std::size_t bytes) {
  return device_->to_host_later(src, bytes);
}

void KernelBackend::from_host(void* dst, const void* host, std::size_t bytes) {
  if (bytes != 0) device_->from_host(dst, host, bytes);
}

void KernelBackend::synchronize() {
  device_->synchronize();
  raise_index_errors();
}

DeviceScratch KernelBackend::upload(const void* host, std::size_t bytes) {
  DeviceScratch buffer = scratch(bytes);
  if (bytes != 0) device_->from_host(buffer.as<void>(), host, bytes);
  return buffer;
}

namespace {

bool dense(const backend::StridedPlan<2>& plan, int operand) {
  return plan.ndim == 1 && plan.strides[static_cast<std::size_t>(operand)][0] == 1;
}

void check_copy_rank(int ndim, const char* what) {
  if (ndim > kernels::kCopyMaxDims) {
    throw std::invalid_argument(fmt::format("{} on cuda: {} axes that do not merge (at most {})",
                                            what, ndim, kernels::kCopyMaxDims));
  }
}

// The CopyStrided of a plan's operands 0 (dst) and 1 (src).
kernels::CopyStrided copy_kernel(const backend::StridedPlan<2>& plan, void* dst, DType dst_dtype,
                                 const void* src, DType src_dtype, const char* what) {
  check_copy_rank(plan.ndim, what);
  kernels::CopyStrided k;
  k.ndim = plan.ndim;
  for (int d = 0; d < plan.ndim; ++d) {
    const auto u = static_cast<std::size_t>(d);
    k.shape[d] = plan.shape[u];
    k.strides[0][d] = plan.strides[0][u];
    k.strides[1][d] = plan.strides[1][u];
  }
  k.dst = dst;
  k.dst_type = dst_dtype;
  k.src = src;
  k.src_type = src_dtype;
  return k;
}

}  // namespace

void KernelBackend::copy_strided(const Shape& shape, void* dst, const Strides& dst_strides,
                                 DType dst_dtype, const void* src, const Strides& src_strides,
                                 DType src_dtype) {
  if (shape_numel(shape) == 0) return;
  const auto plan = backend::make_strided_plan<2>(shape, {&dst_strides, &src_strides});
  if (dst_dtype == src_dtype && dense(plan, 0) && dense(plan, 1)) {
    run(kernels::CopyContiguous{dst, src,
                                plan.shape[0] * static_cast<std::int64_t>(dtype_size(dst_dtype))});
    return;
  }
  run(copy_kernel(plan, dst, dst_dtype, src, src_dtype, "copy"));
}

void KernelBackend::fill_strided(const Shape& shape, void* dst, const Strides& dst_strides,
                                 DType dst_dtype, float value) {
  if (shape_numel(shape) == 0) return;
  const auto plan = backend::make_strided_plan<1>(shape, {&dst_strides});
  check_copy_rank(plan.ndim, "fill");
  kernels::FillStrided k;
  k.ndim = plan.ndim;
  for (int d = 0; d < plan.ndim; ++d) {
    k.shape[d] = plan.shape[static_cast<std::size_t>(d)];
    k.strides[0][d] = plan.strides[0][static_cast<std::size_t>(d)];
  }
  k.dst = dst;
  k.dst_type = dst_dtype;
  k.value = value;
  run(k);
}

void KernelBackend::add_strided(const Shape& shape, void* dst, const Strides& dst_strides,
                                DType dst_dtype, const void* src, const Strides& src_strides,
                                DType src_dtype) {
  if (shape_numel(shape) == 0) return;
  run(kernels::plan_add_strided(static_cast<int>(shape.size()), shape.data(), dst,
                                dst_strides.data(), dst_dtype, src, src_strides.data(), src_dtype));
}

void KernelBackend::zero_bytes(void* dst, std::int64_t bytes) {
  if (bytes > 0) device_->zero(dst, static_cast<std::size_t>(bytes));
}

void KernelBackend::broadcast_copy(const backend::StridedPlan<2>& plan, const float* x,
                                   float* out) {
  run(copy_kernel(plan, out, DType::f32, x, DType::f32, "broadcast copy"));
}

}  // namespace rig::cuda
