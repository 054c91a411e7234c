// KernelBackend: the entry points that read results back to the host (index
// range checks, gradient statistics) and OpenSeq2Seq's padded loss.
#include <algorithm>
#include <cstring>
#include <stdexcept>
#include <vector>

#include "cuda/backend/kernel_backend.hpp"

namespace rig::cuda {

namespace {

// GradientStats in whole i64 slots: it follows the checks' results.
constexpr std::size_t kStatsSlots = (sizeof(GradientStats) + 7) / 8;

}  // namespace

std::int64_t* KernelBackend::check_slots() {
  if (check_results_.as<void>() == nullptr) {
    check_results_ = scratch((2 * kQueuedChecks + kStatsSlots) * sizeof(std::int64_t));
  }
  return check_results_.as<std::int64_t>();
}

void KernelBackend::check_index(const void* index, DType dtype, std::int64_t n, std::int64_t limit,
                                const IndexMessage& message) {
  if (n == 0) return;
  if (check_messages_.size() == kQueuedChecks) raise_index_errors();  // a read: rare
  std::int64_t* result = check_slots() + 2 * check_messages_.size();
  const std::int64_t chunks = kernels::check_chunks(n);
  DeviceScratch buffer = scratch(kernels::index_check_scratch_bytes(n));
  auto* partial = buffer.as<std::int64_t>();
  run(kernels::IndexCheckPartials{index, dtype, n, limit, partial});
  device_->run(kernels::IndexCheckFinish{partial, chunks, result});
  device_->run(kernels::IndexValueAt{index, dtype, result});
  check_messages_.push_back(message);
}

void KernelBackend::raise_index_errors() {
  if (check_messages_.empty()) return;
  std::vector<std::int64_t> results(2 * check_messages_.size());
  device_->to_host(results.data(), check_results_.as<std::int64_t>(),
                   results.size() * sizeof(std::int64_t));
  raise_index_errors_of(results.data());
}

void KernelBackend::raise_index_errors_of(const std::int64_t* results) {
  std::vector<IndexMessage> messages;
  messages.swap(check_messages_);
  if (!device_->computes()) return;  // the read gave zeros
  for (std::size_t i = 0; i < messages.size(); ++i) {
    if (results[2 * i] >= 0) {
      throw std::invalid_argument(messages[i](results[2 * i], results[2 * i + 1]));
    }
  }
}

std::int64_t KernelBackend::first_out_of_range(const void* index, DType dtype, std::int64_t n,
                                               std::int64_t limit) {
  if (n == 0) return -1;
  const std::int64_t chunks = kernels::check_chunks(n);
  DeviceScratch buffer = scratch(kernels::index_check_scratch_bytes(n));
  auto* partial = buffer.as<std::int64_t>();
  run(kernels::IndexCheckPartials{index, dtype, n, limit, partial});
  device_->run(kernels::IndexCheckFinish{partial, chunks, partial + chunks});
  std::int64_t result = -1;
  device_->to_host(&result, partial + chunks, sizeof(result));
  if (!device_->computes()) result = -1;  // the read gave zeros
  raise_index_errors();
  return result;
}

void KernelBackend::gradient_stats_to(const GradientSource& grads, std::int64_t n,
                                      const float* loss, GradientStats* out) {
  const std::int64_t chunks = kernels::check_chunks(n);
  DeviceScratch buffer = scratch(kernels::grad_stats_scratch_bytes(n));
  auto* squares = buffer.as<double>();
  auto* amax_bits = reinterpret_cast<std::uint32_t*>(squares + chunks);
  run(kernels::GradStatsPartials{grads.data, n, squares, amax_bits,
                                 element_type(grads.type, "gradient_stats"), grads.scale});
  device_->run(kernels::GradStatsFinish{squares, amax_bits, chunks, loss, out});
}

void KernelBackend::clip_by_norm(float* grads, std::int64_t n, const GradientStats* stats,
                                 double max_norm) {
  run(kernels::ClipByNorm{grads, n, stats, max_norm});
}

void KernelBackend::read_gradient_stats(const GradientStats* records, std::int64_t count,
                                        GradientStats* host) {
  to_host(host, records, static_cast<std::size_t>(count) * sizeof(GradientStats));
  // Finite gradients of norm 0 where the read gave zeros (host-only mode).
  if (!device_->computes()) std::fill(host, host + count, GradientStats{});
}

GradientStats KernelBackend::gradient_stats(const GradientSource& grads, std::int64_t n,
                                            const float* loss) {
  // The statistics land right behind the queued index checks' results: one
  // read of the device brings back both.
  std::int64_t* slots = check_slots();
  const std::size_t checks = 2 * check_messages_.size();
  gradient_stats_to(grads, n, loss, reinterpret_cast<GradientStats*>(slots + checks));
  std::vector<std::int64_t> host(checks + kStatsSlots);
  device_->to_host(host.data(), slots, host.size() * sizeof(std::int64_t));
  GradientStats stats;
  std::memcpy(static_cast<void*>(&stats), host.data() + checks, sizeof(stats));
  if (!device_->computes()) stats = GradientStats{};  // finite gradients of norm 0
  raise_index_errors_of(host.data());
  return stats;
}

void KernelBackend::padded_loss(const float* xent, const float* w, std::int64_t rows,
                                double constant, float* loss) {
  const std::int64_t chunks = kernels::padded_loss_chunks(rows);
  DeviceScratch buffer = scratch(kernels::padded_loss_scratch_bytes(rows));
  auto* partial = buffer.as<double>();
  run(kernels::PaddedLossPartials{xent, w, rows, constant, partial});
  device_->run(kernels::PaddedLossFinish{partial, chunks, loss, nullptr});
}

void KernelBackend::padded_loss_backward(const float* xent, const float* w, std::int64_t rows,
                                         double constant, const float* upstream, float* row_scale,
                                         float* x_scale, float* dw) {
  const std::int64_t chunks = kernels::padded_loss_chunks(rows);
  DeviceScratch buffer = scratch(kernels::padded_loss_scratch_bytes(rows));
  auto* partial = buffer.as<double>();
  double* sums = partial + 2 * chunks;
  run(kernels::PaddedLossPartials{xent, w, rows, constant, partial});
  device_->run(kernels::PaddedLossFinish{partial, chunks, nullptr, sums});
  device_->run(
      kernels::PaddedLossBackward{xent, w, rows, constant, sums, upstream, row_scale, x_scale, dw});
}

}  // namespace rig::cuda
