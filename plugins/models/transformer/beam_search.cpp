#include "beam_search.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <stdexcept>

#include <fmt/format.h>

#include "rig/ops.hpp"

namespace rig_transformer {

namespace {

using rig::Tensor;
using Sequence = std::vector<std::int64_t>;

// beam_search.py's INF: the penalty that pushes finished hypotheses out of
// the alive set and alive ones out of the finished set.
constexpr float kInf = 32768.0F;
constexpr float kMinusInfinity = -std::numeric_limits<float>::infinity();

// Whether (value a, index ia) comes before (value b, index ib): the larger
// value first, ties to the lower index (tf.nn.top_k), NaN largest as
// ops::topk orders it, so the host's picks agree with the device's.
bool ranks_before(float a, std::int64_t ia, float b, std::int64_t ib) {
  const bool a_nan = std::isnan(a), b_nan = std::isnan(b);
  if (a_nan != b_nan) return a_nan;
  if (!a_nan && a != b) return a > b;
  return ia < ib;
}

// The positions of the k first pairs (values[i], ids[i]) in ranks_before's
// order, best first; without ids, a pair's id is its position.
std::vector<std::int64_t> top_k(const float* values, const std::int64_t* ids, std::int64_t n,
                                std::int64_t k) {
  std::vector<std::int64_t> index(static_cast<std::size_t>(n));
  std::iota(index.begin(), index.end(), 0);
  const auto id = [&](std::int64_t i) { return ids == nullptr ? i : ids[i]; };
  std::partial_sort(index.begin(), index.begin() + k, index.end(),
                    [&](std::int64_t a, std::int64_t b) {
                      return ranks_before(values[a], id(a), values[b], id(b));
                    });
  index.resize(static_cast<std::size_t>(k));
  return index;
}

// Each of the step's n hypotheses' k best next tokens by log p(token) plus
// the hypothesis' `base` score (none when base is empty), chosen where the
// step ran: only n x k scores and tokens reach the host, not the n x V
// log-probabilities (on a GPU, a 16 MB copy and a host sort of every
// hypothesis' whole vocabulary at each step for transformer-base's 32768
// tokens and 128 hypotheses).
struct BestNext {
  std::int64_t k = 0;
  std::vector<float> scores;         // [n, k], best first
  std::vector<std::int64_t> tokens;  // [n, k]
};

BestNext best_next(const StepFunction& step, const std::vector<std::int64_t>& ids,
                   const std::vector<float>& base, std::int64_t vocab, std::int64_t k,
                   rig::Device device) {
  const auto n = static_cast<std::int64_t>(ids.size());
  const Tensor logits = step(Tensor::from_vector(ids, {n}, device));
  if (logits.dim() != 2 || logits.size(0) != n || logits.size(1) != vocab) {
    throw std::logic_error(fmt::format("beam search: step logits {} must be [{},{}]",
                                       rig::to_string(logits.shape()), n, vocab));
  }
  Tensor scores = rig::ops::log_softmax(logits.to(rig::DType::f32), -1);
  if (!base.empty()) scores = rig::ops::add(scores, Tensor::from_vector(base, {n, 1}, device));
  const auto [values, tokens] = rig::ops::topk(scores, k);
  return {k, values.to_vector(), tokens.to_int_vector()};
}

SearchResult greedy(const SearchParams& p, const StepFunction& step) {
  const std::int64_t batch = p.batch_size;
  SearchResult result;
  result.sequences.resize(static_cast<std::size_t>(batch));
  std::vector<double> log_prob(static_cast<std::size_t>(batch), 0.0);
  std::vector<bool> done(static_cast<std::size_t>(batch), false);
  std::vector<std::int64_t> ids(static_cast<std::size_t>(batch), p.pad_id);
  for (std::int64_t i = 0; i < p.max_decode_length; ++i) {
    if (std::all_of(done.begin(), done.end(), [](bool d) { return d; })) break;
    const BestNext next = best_next(step, ids, {}, p.vocab_size, 1, p.device);
    for (std::int64_t b = 0; b < batch; ++b) {
      const auto row = static_cast<std::size_t>(b);
      const std::int64_t best = next.tokens[row];
      // Finished rows keep decoding in the batch; their tokens are dropped.
      ids[row] = done[row] ? p.pad_id : best;
      if (done[row]) continue;
      result.sequences[row].push_back(best);
      log_prob[row] += static_cast<double>(next.scores[row]);
      done[row] = best == p.eos_id;
    }
  }
  for (std::int64_t b = 0; b < batch; ++b) {
    const auto row = static_cast<std::size_t>(b);
    const auto lp = static_cast<float>(log_prob[row]);
    const auto length = static_cast<std::int64_t>(result.sequences[row].size());
    result.scores.push_back(done[row] ? lp / length_penalty(p.alpha, length) : lp);
  }
  return result;
}

// OpenSeq2Seq's SequenceBeamSearch state for one batch row; index j < beam.
struct RowState {
  std::vector<Sequence> alive_seq;
  std::vector<float> alive_log_probs;
  std::vector<Sequence> finished_seq;
  std::vector<float> finished_scores;
  std::vector<bool> finished_flags;
};

class BeamSearch {
 public:
  BeamSearch(const SearchParams& p, const StepFunction& step, const ReorderFunction& reorder)
      : p_(p), step_(step), reorder_(reorder), rows_(static_cast<std::size_t>(p.batch_size)) {
    const auto beam = static_cast<std::size_t>(p.beam_size);
    for (RowState& row : rows_) {
      row.alive_seq.assign(beam, Sequence{p.pad_id});
      // The initial id has probability 1; the other beams start empty (-inf).
      row.alive_log_probs.assign(beam, kMinusInfinity);
      row.alive_log_probs[0] = 0.0F;
      row.finished_seq.assign(beam, Sequence{p.pad_id});
      row.finished_scores.assign(beam, -kInf);
      row.finished_flags.assign(beam, false);
    }
  }

  SearchResult run() {
    std::int64_t i = 0;
    while (continue_search(i)) step(i++);
    SearchResult result;
    for (const RowState& row : rows_) {
      const bool any = std::any_of(row.finished_flags.begin(), row.finished_flags.end(),
                                   [](bool f) { return f; });
      const Sequence& best = any ? row.finished_seq[0] : row.alive_seq[0];
      // Without the initial pad id, and without the pads a finished one got since.
      const auto end = any ? std::find(best.begin() + 1, best.end(), p_.eos_id) + 1 : best.end();
      result.sequences.emplace_back(best.begin() + 1, end);
      result.scores.push_back(any ? row.finished_scores[0] : row.alive_log_probs[0]);
    }
    return result;
  }

 private:
  // _continue_search: not at the maximum length, and some row's best alive
  // hypothesis (with the largest possible length penalty) could still beat
  // its worst finished one.
  bool continue_search(std::int64_t i) const {
    if (i >= p_.max_decode_length) return false;
    const float max_norm = length_penalty(p_.alpha, p_.max_decode_length);
    bool all_settled = true;
    for (const RowState& row : rows_) {
      const float best_alive = row.alive_log_probs[0] / max_norm;
      float lowest_finished = std::numeric_limits<float>::infinity();
      bool any = false;
      for (std::size_t j = 0; j < row.finished_scores.size(); ++j) {
        // Filler scores count as 0, as finished_scores *= finished_flags.
        lowest_finished =
            std::min(lowest_finished, row.finished_flags[j] ? row.finished_scores[j] : 0.0F);
        any = any || row.finished_flags[j];
      }
      if (!any) lowest_finished += -kInf;
      all_settled = all_settled && lowest_finished > best_alive;
    }
    return !all_settled;
  }

  void step(std::int64_t i) {
    const std::int64_t beam = p_.beam_size;
    const std::int64_t vocab = p_.vocab_size;
    const std::int64_t keep = 2 * beam;
    std::vector<std::int64_t> ids;
    std::vector<float> base;
    for (const RowState& row : rows_) {
      for (const Sequence& s : row.alive_seq) ids.push_back(s.back());
      base.insert(base.end(), row.alive_log_probs.begin(), row.alive_log_probs.end());
    }
    // Each hypothesis' `keep` best extensions hold every row's `keep` best:
    // within hypothesis j a row's order (score, then j x vocab + token) is the
    // order of scores with ties to the lower token, so whatever precedes one of
    // a row's best in its hypothesis precedes it in the row too.
    const BestNext next = best_next(step_, ids, base, vocab, std::min(keep, vocab), p_.device);
    const float norm = length_penalty(p_.alpha, i + 1);
    std::vector<std::int64_t> cache_index;
    const auto per_row = static_cast<std::size_t>(beam * next.k);
    std::vector<float> candidates(per_row);
    std::vector<std::int64_t> candidate_ids(per_row);  // j x vocab + token, the row's index
    for (std::size_t b = 0; b < rows_.size(); ++b) {
      RowState& row = rows_[b];
      // _grow_alive_seq: the 2 x beam best extensions of the alive hypotheses.
      for (std::size_t c = 0; c < per_row; ++c) {
        const std::size_t at = b * per_row + c;
        candidates[c] = next.scores[at];
        candidate_ids[c] = static_cast<std::int64_t>(c) / next.k * vocab + next.tokens[at];
      }
      const std::vector<std::int64_t> top =
          top_k(candidates.data(), candidate_ids.data(), static_cast<std::int64_t>(per_row), keep);
      std::vector<Sequence> top_seq;
      std::vector<float> top_log_probs;
      std::vector<std::int64_t> top_beam;
      std::vector<bool> ends;
      for (const std::int64_t t : top) {
        const std::int64_t c = candidate_ids[static_cast<std::size_t>(t)];
        const std::int64_t j = c / vocab;
        top_seq.push_back(row.alive_seq[static_cast<std::size_t>(j)]);
        top_seq.back().push_back(c % vocab);
        top_log_probs.push_back(candidates[static_cast<std::size_t>(t)]);
        top_beam.push_back(j);
        ends.push_back(c % vocab == p_.eos_id);
      }

      // _get_new_alive_state: the best `beam` that did not just end.
      std::vector<float> alive_scores(top_log_probs);
      for (std::size_t c = 0; c < alive_scores.size(); ++c) {
        if (ends[c]) alive_scores[c] += -kInf;
      }
      const std::vector<std::int64_t> alive = top_k(alive_scores.data(), nullptr, keep, beam);
      std::vector<Sequence> new_alive_seq;
      std::vector<float> new_alive_log_probs;
      for (const std::int64_t c : alive) {
        const auto cc = static_cast<std::size_t>(c);
        new_alive_seq.push_back(top_seq[cc]);
        new_alive_log_probs.push_back(alive_scores[cc]);
        cache_index.push_back(static_cast<std::int64_t>(b) * beam + top_beam[cc]);
      }

      // _get_new_finished_state: old finished (one more pad) and the new ones.
      std::vector<Sequence> all_seq = row.finished_seq;
      for (Sequence& s : all_seq) s.push_back(p_.pad_id);
      std::vector<float> all_scores = row.finished_scores;
      std::vector<bool> all_flags = row.finished_flags;
      for (std::size_t c = 0; c < top_seq.size(); ++c) {
        all_seq.push_back(top_seq[c]);
        all_scores.push_back(top_log_probs[c] / norm + (ends[c] ? 0.0F : -kInf));
        all_flags.push_back(ends[c]);
      }
      const std::vector<std::int64_t> finished =
          top_k(all_scores.data(), nullptr, static_cast<std::int64_t>(all_scores.size()), beam);
      RowState next;
      next.alive_seq = std::move(new_alive_seq);
      next.alive_log_probs = std::move(new_alive_log_probs);
      for (const std::int64_t c : finished) {
        const auto cc = static_cast<std::size_t>(c);
        next.finished_seq.push_back(all_seq[cc]);
        next.finished_scores.push_back(all_scores[cc]);
        next.finished_flags.push_back(all_flags[cc]);
      }
      row = std::move(next);
    }
    // The caches follow the alive hypotheses they were grown from.
    reorder_(Tensor::from_vector(cache_index, {static_cast<std::int64_t>(cache_index.size())},
                                 p_.device));
  }

  SearchParams p_;
  const StepFunction& step_;
  const ReorderFunction& reorder_;
  std::vector<RowState> rows_;
};

}  // namespace

float length_penalty(float alpha, std::int64_t length) {
  return std::pow((5.0F + static_cast<float>(length)) / 6.0F, alpha);
}

SearchResult search(const SearchParams& params, const StepFunction& step,
                    const ReorderFunction& reorder) {
  if (params.batch_size < 1 || params.beam_size < 1 || params.max_decode_length < 1 ||
      2 * params.beam_size > params.beam_size * params.vocab_size) {
    throw std::invalid_argument(fmt::format(
        "beam search: batch {}, beam {}, max length {}, vocabulary {} do not fit",
        params.batch_size, params.beam_size, params.max_decode_length, params.vocab_size));
  }
  if (params.beam_size == 1) return greedy(params, step);
  return BeamSearch(params, step, reorder).run();
}

Tensor to_tensor(const SearchResult& result, std::int64_t pad_id) {
  const auto batch = static_cast<std::int64_t>(result.sequences.size());
  std::size_t length = 0;
  for (const auto& s : result.sequences) length = std::max(length, s.size());
  const auto width = static_cast<std::int64_t>(length);
  std::vector<std::int64_t> out(static_cast<std::size_t>(batch * width), pad_id);
  for (std::int64_t b = 0; b < batch; ++b) {
    const auto& s = result.sequences[static_cast<std::size_t>(b)];
    std::copy(s.begin(), s.end(), out.begin() + b * width);
  }
  return Tensor::from_vector(out, {batch, width});
}

}  // namespace rig_transformer
