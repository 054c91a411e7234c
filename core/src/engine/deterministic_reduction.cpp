#include "engine/deterministic_reduction.hpp"

#include <algorithm>
#include <chrono>
#include <stdexcept>

#include "rig/ops.hpp"

namespace rig::engine {

Tensor canonical_sum(const std::vector<Tensor>& slots) {
  if (slots.empty()) throw std::invalid_argument("canonical_sum: no slots");
  if (slots.size() == 1) return slots.front();
  std::vector<Tensor> even;
  std::vector<Tensor> odd;
  for (std::size_t i = 0; i < slots.size(); ++i) (i % 2 == 0 ? even : odd).push_back(slots[i]);
  return ops::add(canonical_sum(even), canonical_sum(odd));
}

DeterministicReduction::DeterministicReduction(ParameterStore& params, Communicator& comm,
                                               std::int64_t iter_size, std::int64_t chunk_elements)
    : params_(params),
      comm_(comm),
      iter_size_(iter_size),
      chunk_(std::max<std::int64_t>(chunk_elements, 1)) {
  const Tensor grads = params_.grads();
  for (std::int64_t m = 0; m < iter_size_; ++m) {
    micro_grads_.push_back(Tensor::empty({grads.numel()}, DType::f32, grads.device()));
  }
}

void DeterministicReduction::micro_done(std::int64_t micro) {
  micro_grads_[static_cast<std::size_t>(micro)].copy_from(params_.grads());
  params_.zero_grad();
}

ReductionStats DeterministicReduction::finish() {
  const auto start = std::chrono::steady_clock::now();
  const auto world = static_cast<std::int64_t>(comm_.size());
  const std::int64_t slots = world * iter_size_;
  Tensor grads = params_.grads();
  const std::int64_t numel = grads.numel();
  ReductionStats stats;
  for (std::int64_t begin = 0; begin < numel; begin += chunk_) {
    const std::int64_t n = std::min(chunk_, numel - begin);
    // This rank's micro-batches side by side, then every rank's.
    Tensor mine = Tensor::empty({iter_size_ * n}, DType::f32, grads.device());
    for (std::int64_t m = 0; m < iter_size_; ++m) {
      mine.slice(0, m * n, (m + 1) * n)
          .copy_from(micro_grads_[static_cast<std::size_t>(m)].slice(0, begin, begin + n));
    }
    Tensor all = mine;
    if (world > 1) {
      all = Tensor::empty({world * iter_size_ * n}, DType::f32, grads.device());
      comm_.allgather(mine, all)->wait();
      stats.bytes += static_cast<double>(mine.nbytes());
      ++stats.buckets;
    }
    // Slot g = micro x world + rank lives at rank r's block, micro m's place.
    std::vector<Tensor> ordered;
    for (std::int64_t g = 0; g < slots; ++g) {
      const std::int64_t r = g % world;
      const std::int64_t m = g / world;
      const std::int64_t at = (r * iter_size_ + m) * n;
      ordered.push_back(all.slice(0, at, at + n));
    }
    const Tensor total = ops::mul_scalar(canonical_sum(ordered), 1.0F / static_cast<float>(slots));
    grads.slice(0, begin, begin + n).copy_from(total);
  }
  stats.busy_seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  stats.exposed_seconds = stats.busy_seconds;
  stats.timing_known = false;
  return stats;
}

}  // namespace rig::engine
