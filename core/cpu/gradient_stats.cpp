#include "cpu/gradient_stats.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "cpu/gradient_source.hpp"
#include "cpu/parallel.hpp"
#include "cpu/reduce.hpp"
#include "rig/math/bits.hpp"

namespace rig::cpu {

namespace {

// Interleaved sums: lane k of a run takes its elements k, k + kLanes, ... in
// order, and the lanes are added in order. The lanes are independent, so the
// loop vectorises (one running float sum cannot: each add waits for the
// last), and the bits do not depend on the vector width.
constexpr int kLanes = 8;

struct RunStats {
  float squares = 0.0F;
  std::uint32_t amax_bits = 0;  // the largest math::abs_bits (orders like |g|; inf and NaN above)
};

RunStats run_stats(const float* g, std::int64_t count) {
  float lane[kLanes] = {};
  std::uint32_t bits[kLanes] = {};
  const std::int64_t whole = count / kLanes * kLanes;
  for (std::int64_t j = 0; j < whole; j += kLanes) {
    for (int k = 0; k < kLanes; ++k) {
      const float x = g[j + k];
      lane[k] += x * x;
      bits[k] = std::max(bits[k], math::abs_bits(x));
    }
  }
  for (std::int64_t j = whole; j < count; ++j) {
    const float x = g[j];
    lane[j - whole] += x * x;
    bits[j - whole] = std::max(bits[j - whole], math::abs_bits(x));
  }
  RunStats r;
  for (int k = 0; k < kLanes; ++k) {
    r.squares += lane[k];
    r.amax_bits = std::max(r.amax_bits, bits[k]);
  }
  return r;
}

}  // namespace

GradientStats gradient_stats(const GradientSource& source, std::int64_t n) {
  // Float partial sums over short runs (run_stats), doubles across them, one
  // slot per fixed chunk summed in order: the same bits on every run,
  // whatever the thread timing (resumes stay bit-exact). 16-bit gradients
  // are unscaled a run at a time into an L1-sized scratch: the same values,
  // so the same bits, as the f32 master gradients unscale() writes.
  constexpr std::int64_t kChunk = 1 << 16;
  constexpr std::int64_t kRun = 1024;
  const auto chunks = static_cast<std::size_t>((n + kChunk - 1) / kChunk);
  std::vector<double> squares(chunks, 0.0);
  std::vector<std::uint32_t> amax_bits(chunks, 0);
  parallel_for(static_cast<std::int64_t>(chunks), 1, [&](std::int64_t first, std::int64_t last) {
    for (std::int64_t chunk = first; chunk < last; ++chunk) {
      const std::int64_t begin = chunk * kChunk;
      const std::int64_t end = std::min(n, begin + kChunk);
      double sum = 0.0;
      std::uint32_t largest = 0;
      float scratch[kRun];
      for (std::int64_t i = begin; i < end; i += kRun) {
        const std::int64_t stop = std::min(end, i + kRun);
        const RunStats run = run_stats(gradients_at(source, i, stop - i, scratch), stop - i);
        sum += run.squares;
        largest = std::max(largest, run.amax_bits);
      }
      squares[static_cast<std::size_t>(chunk)] = sum;
      amax_bits[static_cast<std::size_t>(chunk)] = largest;
    }
  });
  GradientStats stats;
  double total = 0.0;
  for (const double part : squares) total += part;
  stats.norm = std::sqrt(total);
  std::uint32_t largest = 0;
  for (const std::uint32_t bits : amax_bits) largest = std::max(largest, bits);
  stats.amax = math::amax_of_abs_bits(largest);
  // An inf or NaN anywhere makes both +inf.
  if (!std::isfinite(stats.norm) || !std::isfinite(stats.amax)) {
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
