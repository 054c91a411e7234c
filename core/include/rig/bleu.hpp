// Corpus BLEU computed exactly as SacreBLEU 2.x does by default
// (sacrebleu.metrics.BLEU: 13a tokenisation, n-grams up to 4 clipped against
// one reference per hypothesis, corpus sums, brevity penalty, smoothing
// exp | floor | add-k | none, optional lowercasing and effective order).
// Statistics are additive, so ranks or batches can each count theirs and sum
// them before score(). docs/bleu.md explains the algorithm and its options.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "rig/export.hpp"

namespace rig::bleu {

inline constexpr int kMaxOrder = 4;

// sacrebleu's smooth_method.
enum class Smooth { none, floor, add_k, exp };

struct Options {
  Smooth smooth = Smooth::exp;
  // floor: 0.1 and add-k: 1 when not set; exp and none ignore it.
  std::optional<double> smooth_value;
  bool lowercase = false;
  std::string tokenize = "13a";  // "13a" | "none"
  bool effective_order = false;
};

// Sufficient statistics of a set of segments.
struct Stats {
  std::array<std::int64_t, kMaxOrder> matches{};  // clipped n-gram matches, n = 1..4
  std::array<std::int64_t, kMaxOrder> totals{};   // hypothesis n-grams, n = 1..4
  std::int64_t hyp_len = 0;                       // hypothesis tokens
  std::int64_t ref_len = 0;                       // reference tokens

  RIG_API Stats& operator+=(const Stats& other);
  friend bool operator==(const Stats&, const Stats&) = default;
};

struct RIG_API Score {
  double score = 0;                            // BLEU in [0, 100]
  std::array<double, kMaxOrder> precisions{};  // percent, after smoothing
  double bp = 1;                               // brevity penalty
  double ratio = 0;                            // hyp_len / ref_len (0 when ref_len is 0)
  std::int64_t hyp_len = 0;
  std::int64_t ref_len = 0;

  // sacrebleu's BLEUScore.format(): "BLEU = 27.31 60.1/33.4/20.9/13.3 (BP = 1.000
  // ratio = 1.012 hyp_len = 1234 ref_len = 1219)"; `width` decimals for the score.
  std::string format(int width = 2) const;
};

// "smooth"-method names as sacrebleu spells them: exp, floor, add-k, none.
RIG_API std::string to_string(Smooth smooth);
// Throws UserError naming the accepted names for anything else.
RIG_API Smooth parse_smooth(std::string_view name);

// sacrebleu's Tokenizer13a (mteval-v13a): the returned tokens are separated by
// single spaces. `line` is UTF-8; multibyte characters are never split.
RIG_API std::string tokenize_13a(std::string_view line);
// What BLEU compares: optionally lowercased, right-stripped, then tokenised
// with options.tokenize (throws UserError for an unknown tokenizer).
RIG_API std::string preprocess(std::string_view line, const Options& options);

// The statistics of one hypothesis against its reference (raw lines).
RIG_API Stats sentence_stats(std::string_view hyp, std::string_view ref, const Options& options);
// BLEU from (summed) statistics.
RIG_API Score score(const Stats& stats, const Options& options);
// Corpus BLEU of hyps[i] against refs[i]; UserError when the sizes differ.
RIG_API Score corpus_bleu(const std::vector<std::string>& hyps,
                          const std::vector<std::string>& refs, const Options& options);

// sacrebleu-style signature, e.g. "nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp|
// version:rig-sacrebleu-2" (the version names rig's port, not a sacrebleu release).
RIG_API std::string signature(const Options& options);

}  // namespace rig::bleu
