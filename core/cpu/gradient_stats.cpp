#include "cpu/gradient_stats.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "cpu/gradient_source.hpp"
#include "cpu/parallel.hpp"
#include "cpu/reduce.hpp"

namespace rig::cpu {

GradientStats gradient_stats(const GradientSource& source, std::int64_t n) {
  // Float partial sums over short runs (vectorisable), doubles across them,
  // one slot per fixed chunk summed in order: the same bits on every run,
  // whatever the thread timing (resumes stay bit-exact). 16-bit gradients
  // are unscaled a run at a time into an L1-sized scratch: the same values,
  // so the same bits, as the f32 master gradients unscale() writes.
  constexpr std::int64_t kChunk = 1 << 16;
  constexpr std::int64_t kRun = 1024;
  const auto chunks = static_cast<std::size_t>((n + kChunk - 1) / kChunk);
  std::vector<double> squares(chunks, 0.0);
  std::vector<float> amax(chunks, 0.0F);
  parallel_for(static_cast<std::int64_t>(chunks), 1, [&](std::int64_t first, std::int64_t last) {
    for (std::int64_t chunk = first; chunk < last; ++chunk) {
      const std::int64_t begin = chunk * kChunk;
      const std::int64_t end = std::min(n, begin + kChunk);
      double sum = 0.0;
      float largest = 0.0F;
      float scratch[kRun];
      for (std::int64_t i = begin; i < end; i += kRun) {
        const std::int64_t stop = std::min(end, i + kRun);
        const float* g = gradients_at(source, i, stop - i, scratch);
        float part = 0.0F;
        for (std::int64_t j = 0; j < stop - i; ++j) {
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

void larc(const float* values, float* grads, const FlatSlice* slices, std::int64_t count,
          const LarcOptions& o) {
  for (std::int64_t k = 0; k < count; ++k) {
    const std::int64_t n = slices[k].size;
    const float* v = values + slices[k].offset;
    float* g = grads + slices[k].offset;
    const double v_norm = std::sqrt(sum_squares(v, n));
    const double g_norm = std::sqrt(sum_squares(g, n));
    double ratio = 1.0;
    if (o.clip) {
      // A zero learning rate makes no update; OpenSeq2Seq's inf (or 0/0) becomes 1.
      const double denominator = o.learning_rate * (g_norm + o.epsilon);
      if (denominator > 0.0) {
        ratio = std::min(std::max(o.eta * v_norm / denominator, o.min_update), 1.0);
      }
    } else {
      ratio = std::max(o.eta * v_norm / (g_norm + o.epsilon), o.min_update);
    }
    if (ratio == 1.0) continue;
    // tf.saturate_cast to the f32 variable: a huge ratio stays finite.
    const auto r = static_cast<float>(std::min(ratio, double{std::numeric_limits<float>::max()}));
    parallel_for(n, 1 << 15, [&](std::int64_t begin, std::int64_t end) {
      for (std::int64_t i = begin; i < end; ++i) g[i] *= r;
    });
  }
}

}  // namespace rig::cpu
