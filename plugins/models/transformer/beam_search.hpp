// Batched beam search, transcribed from OpenSeq2Seq's
// parts/transformer/beam_search.py (itself tensor2tensor's): log-probability
// accumulation, alive and finished hypotheses, the GNMT length penalty
// ((5 + length) / 6)^alpha, and an early stop once no alive hypothesis can beat
// the finished ones. Beam size 1 is greedy decoding. The model is reached
// through two callbacks, so the search knows nothing of the network.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "rig/tensor.hpp"

namespace rig_transformer {

struct SearchParams {
  std::int64_t batch_size = 1;
  std::int64_t beam_size = 1;
  float alpha = 0.0F;
  std::int64_t max_decode_length = 1;
  std::int64_t vocab_size = 1;
  std::int64_t eos_id = 1;
  std::int64_t pad_id = 0;  // the first input of every hypothesis, and what follows EOS
  rig::Device device;       // of the step's ids and the caches' reorder index
};

// ids i64 [N] (the newest token of each hypothesis) -> logits f32 [N, V] of
// the next token; N = batch_size x beam_size, hypothesis n = b x beam + j.
using StepFunction = std::function<rig::Tensor(const rig::Tensor& ids)>;
// Makes hypothesis index[n] (i64 [N], always within the same batch row) the new n.
using ReorderFunction = std::function<void(const rig::Tensor& index)>;

struct SearchResult {
  // Per batch row: the best hypothesis' tokens (without the initial pad id),
  // ending at its EOS, or at max_decode_length when none finished.
  std::vector<std::vector<std::int64_t>> sequences;
  // Its score: log-probability / length penalty when it finished, else the
  // plain log-probability (as OpenSeq2Seq).
  std::vector<float> scores;
};

// GNMT's length penalty ((5 + length) / 6)^alpha.
float length_penalty(float alpha, std::int64_t length);

// beam_size 1: greedy; otherwise OpenSeq2Seq's SequenceBeamSearch.
SearchResult search(const SearchParams& params, const StepFunction& step,
                    const ReorderFunction& reorder);

// The sequences as i64 [B, L] (L = the longest), PAD after each one.
rig::Tensor to_tensor(const SearchResult& result, std::int64_t pad_id);

}  // namespace rig_transformer
