// Sum and max reductions over contiguous f32 data viewed as [outer, r, inner]
// (reducing the middle axis), threaded, without allocation.
#pragma once

#include <cstdint>

namespace rig::cpu {

// Sum of n contiguous values, accumulated in double; the result does not
// depend on the number of threads.
double sum_all(const float* x, std::int64_t n);
// Sum of x[i]^2, likewise.
double sum_squares(const float* x, std::int64_t n);

// y[o, i] = scale * sum_j x[o, j, i] for x [outer, r, inner], y [outer, inner].
void sum_axis(const float* x, float* y, std::int64_t outer, std::int64_t r, std::int64_t inner,
              float scale = 1.0F);

// y[o, i] = max_j x[o, j, i] and index[o, i] = the first j reaching it (NaN
// counts as the maximum, as in torch). r must be > 0.
void max_axis(const float* x, float* y, std::int64_t* index, std::int64_t outer, std::int64_t r,
              std::int64_t inner);
// dx [outer, r, inner] = g [outer, inner] at the recorded index, zero elsewhere.
void max_axis_backward(const float* g, const std::int64_t* index, float* dx, std::int64_t outer,
                       std::int64_t r, std::int64_t inner);

}  // namespace rig::cpu
