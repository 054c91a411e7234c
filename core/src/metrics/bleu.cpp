// sacrebleu.metrics.bleu.BLEU (sacrebleu 2.x), transcribed: segment
// statistics (_compute_segment_statistics with one reference), their sum, and
// compute_bleu's smoothing and brevity penalty.
#include "rig/bleu.hpp"

#include <algorithm>
#include <cmath>
#include <unordered_map>

#include <fmt/format.h>

#include "metrics/utf8_text.hpp"
#include "rig/error.hpp"

namespace rig::bleu {
namespace {

// n-gram (tokens joined by single spaces; tokens hold no spaces, so each
// order's keys are distinct) -> count, for n = 1..kMaxOrder.
using NgramCounts = std::unordered_map<std::string, std::int64_t>;

NgramCounts count_ngrams(const std::vector<std::string_view>& tokens) {
  NgramCounts counts;
  for (std::size_t i = 0; i < tokens.size(); ++i) {
    std::string key;
    for (std::size_t n = 1; n <= kMaxOrder && i + n <= tokens.size(); ++n) {
      if (n > 1) key += ' ';
      key.append(tokens[i + n - 1]);
      ++counts[key];
    }
  }
  return counts;
}

std::size_t order_of(const std::string& ngram) {
  return 1 + static_cast<std::size_t>(std::count(ngram.begin(), ngram.end(), ' '));
}

// sacrebleu's SMOOTH_DEFAULTS.
std::optional<double> default_smooth_value(Smooth smooth) {
  switch (smooth) {
    case Smooth::floor:
      return 0.1;
    case Smooth::add_k:
      return 1.0;
    default:
      return std::nullopt;
  }
}

// sacrebleu.utils.my_log: log floored at -9999999999 for a zero precision.
double floored_log(double x) {
  return x == 0.0 ? -9999999999.0 : std::log(x);
}

}  // namespace

Stats& Stats::operator+=(const Stats& other) {
  for (int n = 0; n < kMaxOrder; ++n) {
    matches[n] += other.matches[n];
    totals[n] += other.totals[n];
  }
  hyp_len += other.hyp_len;
  ref_len += other.ref_len;
  return *this;
}

std::string to_string(Smooth smooth) {
  switch (smooth) {
    case Smooth::none:
      return "none";
    case Smooth::floor:
      return "floor";
    case Smooth::add_k:
      return "add-k";
    case Smooth::exp:
      return "exp";
  }
  return "?";
}

Smooth parse_smooth(std::string_view name) {
  for (Smooth s : {Smooth::exp, Smooth::floor, Smooth::add_k, Smooth::none}) {
    if (name == to_string(s)) return s;
  }
  throw UserError(
      fmt::format("unknown BLEU smoothing method '{}': expected exp, floor, add-k or none", name));
}

std::string preprocess(std::string_view line, const Options& options) {
  std::string lowered;
  if (options.lowercase) {
    lowered = text::lower(line);
    line = lowered;
  }
  line = text::rstrip(line);
  if (options.tokenize == "13a") return tokenize_13a(line);
  if (options.tokenize == "none") return std::string(line);
  throw UserError(
      fmt::format("unknown BLEU tokenizer '{}': expected 13a or none", options.tokenize));
}

Stats sentence_stats(std::string_view hyp, std::string_view ref, const Options& options) {
  const std::string hyp_text = preprocess(hyp, options);
  const std::string ref_text = preprocess(ref, options);
  const auto hyp_tokens = text::split(hyp_text);
  const auto ref_tokens = text::split(ref_text);
  const NgramCounts ref_counts = count_ngrams(ref_tokens);

  Stats stats;
  stats.hyp_len = static_cast<std::int64_t>(hyp_tokens.size());
  stats.ref_len = static_cast<std::int64_t>(ref_tokens.size());
  for (const auto& [ngram, count] : count_ngrams(hyp_tokens)) {
    const std::size_t n = order_of(ngram) - 1;
    stats.totals[n] += count;
    if (auto it = ref_counts.find(ngram); it != ref_counts.end()) {
      stats.matches[n] += std::min(count, it->second);  // clipped by the reference
    }
  }
  return stats;
}

Score score(const Stats& stats, const Options& options) {
  const double smooth_value = options.smooth_value
                                  ? *options.smooth_value
                                  : default_smooth_value(options.smooth).value_or(0);
  Score result;
  result.hyp_len = stats.hyp_len;
  result.ref_len = stats.ref_len;
  result.ratio = stats.ref_len != 0
                     ? static_cast<double>(stats.hyp_len) / static_cast<double>(stats.ref_len)
                     : 0.0;
  if (stats.hyp_len < stats.ref_len) {
    result.bp = stats.hyp_len > 0 ? std::exp(1.0 - static_cast<double>(stats.ref_len) /
                                                       static_cast<double>(stats.hyp_len))
                                  : 0.0;
  }
  bool any_match = false;
  for (auto m : stats.matches) any_match = any_match || m != 0;
  if (!any_match) return result;  // score 0, precisions 0

  double smooth_mteval = 1.0;
  int eff_order = kMaxOrder;
  for (int n = 1; n <= kMaxOrder; ++n) {
    double correct = static_cast<double>(stats.matches[n - 1]);
    double total = static_cast<double>(stats.totals[n - 1]);
    if (options.smooth == Smooth::add_k && n > 1) {
      correct += smooth_value;
      total += smooth_value;
    }
    if (total == 0) break;  // higher orders keep precision 0
    if (options.effective_order) eff_order = n;
    double& precision = result.precisions[n - 1];
    if (correct == 0) {
      if (options.smooth == Smooth::exp) {
        smooth_mteval *= 2;
        precision = 100.0 / (smooth_mteval * total);
      } else if (options.smooth == Smooth::floor) {
        precision = 100.0 * smooth_value / total;
      }
    } else {
      precision = 100.0 * correct / total;
    }
  }
  double log_sum = 0;
  for (int n = 0; n < eff_order; ++n) log_sum += floored_log(result.precisions[n]);
  result.score = result.bp * std::exp(log_sum / eff_order);
  return result;
}

Score corpus_bleu(const std::vector<std::string>& hyps, const std::vector<std::string>& refs,
                  const Options& options) {
  if (hyps.size() != refs.size()) {
    throw UserError(
        fmt::format("BLEU needs one reference per hypothesis: {} hypotheses, {} references",
                    hyps.size(), refs.size()));
  }
  Stats total;
  for (std::size_t i = 0; i < hyps.size(); ++i) total += sentence_stats(hyps[i], refs[i], options);
  return score(total, options);
}

std::string Score::format(int width) const {
  return fmt::format(
      "BLEU = {:.{}f} {:.1f}/{:.1f}/{:.1f}/{:.1f} (BP = {:.3f} ratio = {:.3f} hyp_len = {} "
      "ref_len = {})",
      score, width, precisions[0], precisions[1], precisions[2], precisions[3], bp, ratio, hyp_len,
      ref_len);
}

std::string signature(const Options& options) {
  std::string smooth = to_string(options.smooth);
  if (auto def = default_smooth_value(options.smooth)) {
    smooth += fmt::format("[{:.2f}]", options.smooth_value.value_or(*def));
  }
  return fmt::format("nrefs:1|case:{}|eff:{}|tok:{}|smooth:{}|version:rig-sacrebleu-2",
                     options.lowercase ? "lc" : "mixed", options.effective_order ? "yes" : "no",
                     options.tokenize, smooth);
}

}  // namespace rig::bleu
