// Fused softmax cross-entropy over the rows of contiguous logits [rows, c]
// against a smoothed one-hot target: q = `on` at the label, `off` elsewhere.
// Forward keeps only the per-row log-sum-exp; backward recomputes the
// probabilities from it in the same pass that writes the gradient.
#pragma once

#include <cstdint>

namespace rig::cpu {

// loss[r] = -sum_j q_j log softmax(x_r)_j = lse_r - (on - off) x[r, y_r] - off sum_j x[r, j];
// lse[r] = log sum_j e^x[r, j]. Labels must be in [0, c).
void cross_entropy_forward(const float* x, const std::int64_t* labels, std::int64_t rows,
                           std::int64_t c, float on, float off, float* loss, float* lse);

// dx[r, j] = (e^(x[r, j] - lse_r) - q_j) * scale_r with scale_r = scale * row_scale[r]
// (row_scale may be null: 1).
void cross_entropy_backward(const float* x, const std::int64_t* labels, const float* lse,
                            const float* row_scale, float scale, std::int64_t rows, std::int64_t c,
                            float on, float off, float* dx);

// OpenSeq2Seq's padded loss over rows: loss[0] = sum (xent - constant) w^2 /
// sum w (0 when sum w is 0), in f64; and its gradient pieces: row_scale =
// w^2, x_scale[0] = upstream / sum w (0 when sum w is 0), dw (may be null)
// = upstream (2 w (xent - constant) - loss) / sum w.
void padded_loss(const float* xent, const float* w, std::int64_t rows, double constant,
                 float* loss);
void padded_loss_backward(const float* xent, const float* w, std::int64_t rows, double constant,
                          const float* upstream, float* row_scale, float* x_scale, float* dw);

}  // namespace rig::cpu
