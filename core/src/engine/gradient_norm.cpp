#include "engine/gradient_norm.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "cpu/parallel.hpp"

namespace rig::engine {

GradientStats gradient_stats(const ParameterStore& params) {
  const Tensor grads = params.grads();
  const float* g = grads.data<float>();
  const std::int64_t n = grads.numel();
  // Float partial sums over short runs (vectorisable), doubles across them,
  // one slot per fixed chunk summed in order: the same bits on every run,
  // whatever the thread timing (resumes stay bit-exact).
  constexpr std::int64_t kChunk = 1 << 16;
  const auto chunks = static_cast<std::size_t>((n + kChunk - 1) / kChunk);
  std::vector<double> squares(chunks, 0.0);
  std::vector<float> amax(chunks, 0.0F);
  cpu::parallel_for(static_cast<std::int64_t>(chunks), 1,
                    [&](std::int64_t first, std::int64_t last) {
                      for (std::int64_t chunk = first; chunk < last; ++chunk) {
                        const std::int64_t begin = chunk * kChunk;
                        const std::int64_t end = std::min(n, begin + kChunk);
                        double sum = 0.0;
                        float largest = 0.0F;
                        for (std::int64_t i = begin; i < end; i += 1024) {
                          const std::int64_t stop = std::min(end, i + 1024);
                          float part = 0.0F;
                          for (std::int64_t j = i; j < stop; ++j) {
                            part += g[j] * g[j];
                            largest = std::max(largest, std::fabs(g[j]));
                          }
                          sum += part;
                        }
                        squares[static_cast<std::size_t>(chunk)] = sum;
                        amax[static_cast<std::size_t>(chunk)] = largest;
                      }
                    });
  GradientStats stats;
  double total = 0.0;
  for (const double part : squares) total += part;
  stats.norm = std::sqrt(total);
  for (const float part : amax) stats.amax = std::max(stats.amax, static_cast<double>(part));
  // std::max drops NaN; the norm does not.
  if (!std::isfinite(stats.norm)) {
    stats.norm = stats.amax = std::numeric_limits<double>::infinity();
  }
  return stats;
}

void clip_gradients(ParameterStore& params, double norm, double max_norm) {
  if (!(norm > max_norm)) return;
  Tensor grads = params.grads();
  float* g = grads.data<float>();
  const auto scale = static_cast<float>(max_norm / (norm + 1e-6));
  cpu::parallel_for(grads.numel(), 1 << 16, [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t i = begin; i < end; ++i) g[i] *= scale;
  });
}

}  // namespace rig::engine
