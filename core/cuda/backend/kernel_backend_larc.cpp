// KernelBackend: LARC over the parameter slices of the flat buffers.
#include <vector>

#include "cuda/backend/kernel_backend.hpp"

namespace rig::cuda {

void KernelBackend::larc(const float* values, float* grads, const FlatSlice* slices,
                         std::int64_t count, const LarcOptions& options) {
  if (count == 0) return;
  std::vector<std::int64_t> starts(static_cast<std::size_t>(count) + 1);
  const std::int64_t chunks = kernels::larc_chunk_starts(slices, count, starts.data());
  const DeviceScratch device_slices =
      upload(slices, static_cast<std::size_t>(count) * sizeof(FlatSlice));
  const DeviceScratch device_starts = upload(starts.data(), starts.size() * sizeof(std::int64_t));
  DeviceScratch buffer = scratch(kernels::larc_scratch_bytes(count, chunks));
  auto* partial = buffer.as<double>();
  auto* ratio = reinterpret_cast<float*>(partial + 2 * chunks);
  const auto* s = device_slices.as<const FlatSlice>();
  const auto* st = device_starts.as<const std::int64_t>();
  run(kernels::LarcPartials{values, grads, s, st, count, chunks, partial});
  device_->run(kernels::LarcRatios{partial, st, count, options, ratio});
  run(kernels::LarcScale{grads, s, st, count, chunks, ratio});
}

}  // namespace rig::cuda
