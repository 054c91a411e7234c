#include "engine/gradient_norm.hpp"

#include <algorithm>
#include <cmath>
#include <vector>

#include "cpu/parallel.hpp"

namespace rig::engine {

double global_gradient_norm(const ParameterStore& params) {
  const Tensor grads = params.grads();
  const float* g = grads.data<float>();
  const std::int64_t n = grads.numel();
  // Float partial sums over short runs (vectorisable), doubles across them,
  // one slot per fixed chunk summed in order: the same bits on every run,
  // whatever the thread timing (resumes stay bit-exact).
  constexpr std::int64_t kChunk = 1 << 16;
  std::vector<double> partial(static_cast<std::size_t>((n + kChunk - 1) / kChunk), 0.0);
  cpu::parallel_for(static_cast<std::int64_t>(partial.size()), 1,
                    [&](std::int64_t first, std::int64_t last) {
                      for (std::int64_t chunk = first; chunk < last; ++chunk) {
                        const std::int64_t begin = chunk * kChunk;
                        const std::int64_t end = std::min(n, begin + kChunk);
                        double sum = 0.0;
                        for (std::int64_t i = begin; i < end; i += 1024) {
                          const std::int64_t stop = std::min(end, i + 1024);
                          float part = 0.0F;
                          for (std::int64_t j = i; j < stop; ++j) part += g[j] * g[j];
                          sum += part;
                        }
                        partial[static_cast<std::size_t>(chunk)] = sum;
                      }
                    });
  double total = 0.0;
  for (const double p : partial) total += p;
  return std::sqrt(total);
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
