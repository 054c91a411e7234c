// rig::bleu against SacreBLEU: tests/unit/fixtures/bleu/golden.json holds
// sacrebleu's results for the fixture corpora there (make_golden.py writes it),
// plus hand-checked properties of the algorithm.
#include <cmath>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "metrics/utf8_text.hpp"
#include "rig/bleu.hpp"
#include "rig/utf8.hpp"
#include "user_error_of.hpp"

namespace {

using rig::bleu::Options;
using rig::bleu::Smooth;
using rig::bleu::Stats;

const std::string kFixtures = std::string(RIG_SOURCE_DIR) + "/tests/unit/fixtures/bleu/";

const nlohmann::json& golden() {
  static const nlohmann::json doc = [] {
    std::ifstream in(kFixtures + "golden.json");
    if (!in) throw std::runtime_error("missing " + kFixtures + "golden.json");
    return nlohmann::json::parse(in);
  }();
  return doc;
}

// Lines as the sacrebleu command reads them: split at '\n', no empty last line.
std::vector<std::string> read_lines(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("missing " + path);
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string text = ss.str();
  std::vector<std::string> lines;
  std::size_t start = 0;
  while (start < text.size()) {
    std::size_t end = text.find('\n', start);
    if (end == std::string::npos) end = text.size();
    lines.push_back(text.substr(start, end - start));
    start = end + 1;
  }
  return lines;
}

// sacrebleu's BLEU(**kwargs) as rig options.
Options options_from(const nlohmann::json& kwargs) {
  Options o;
  o.smooth = rig::bleu::parse_smooth(kwargs.value("smooth_method", "exp"));
  if (kwargs.contains("smooth_value")) o.smooth_value = kwargs.at("smooth_value").get<double>();
  o.lowercase = kwargs.value("lowercase", false);
  o.tokenize = kwargs.value("tokenize", "13a");
  o.effective_order = kwargs.value("effective_order", false);
  return o;
}

Options option_set(const std::string& name) {
  return options_from(golden().at("option_sets").at(name));
}

TEST(Bleu, GoldenCoversTheFixtureCases) {
  // The fixtures exercise what they are meant to: brevity penalty, smoothing, perfect match.
  std::map<std::string, nlohmann::json> by_fixture;
  for (const auto& c : golden().at("corpus")) {
    if (c.at("options") == "default") by_fixture[c.at("fixture")] = c;
  }
  EXPECT_LT(by_fixture.at("short").at("bp").get<double>(), 0.5);
  EXPECT_LT(by_fixture.at("empty_lines").at("bp").get<double>(), 0.5);
  EXPECT_GT(by_fixture.at("long").at("ratio").get<double>(), 2.0);
  EXPECT_EQ(by_fixture.at("no_4gram").at("matches")[3].get<int>(), 0);
  EXPECT_EQ(by_fixture.at("unigrams_only").at("matches")[1].get<int>(), 0);
  EXPECT_DOUBLE_EQ(by_fixture.at("perfect").at("score").get<double>(), 100.0);
  EXPECT_EQ(golden().at("corpus").size(), 8u * golden().at("option_sets").size());
}

TEST(Bleu, CorpusScoresMatchSacreBleu) {
  for (const auto& c : golden().at("corpus")) {
    const std::string fixture = c.at("fixture");
    const std::string name = c.at("options");
    SCOPED_TRACE(fixture + " with " + name);
    const Options options = option_set(name);
    const auto hyps = read_lines(kFixtures + fixture + ".hyp");
    const auto refs = read_lines(kFixtures + fixture + ".ref");

    Stats stats;
    for (std::size_t i = 0; i < hyps.size(); ++i) {
      stats += rig::bleu::sentence_stats(hyps[i], refs[i], options);
    }
    EXPECT_EQ(stats.hyp_len, c.at("hyp_len").get<std::int64_t>());
    EXPECT_EQ(stats.ref_len, c.at("ref_len").get<std::int64_t>());
    for (int n = 0; n < rig::bleu::kMaxOrder; ++n) {
      EXPECT_EQ(stats.matches[n], c.at("matches")[n].get<std::int64_t>()) << "order " << n + 1;
      EXPECT_EQ(stats.totals[n], c.at("totals")[n].get<std::int64_t>()) << "order " << n + 1;
    }

    const auto score = rig::bleu::corpus_bleu(hyps, refs, options);
    EXPECT_NEAR(score.score, c.at("score").get<double>(), 0.01);
    EXPECT_NEAR(score.bp, c.at("bp").get<double>(), 1e-9);
    EXPECT_NEAR(score.ratio, c.at("ratio").get<double>(), 1e-9);
    for (int n = 0; n < rig::bleu::kMaxOrder; ++n) {
      EXPECT_NEAR(score.precisions[n], c.at("precisions")[n].get<double>(), 1e-9);
    }
    EXPECT_EQ(score.format(), c.at("format").get<std::string>());

    // Same fields as sacrebleu's signature; only the version names rig's port.
    std::string expected_signature = c.at("signature");
    expected_signature.replace(expected_signature.rfind("version:"), std::string::npos,
                               "version:rig-sacrebleu-2");
    EXPECT_EQ(rig::bleu::signature(options), expected_signature);
  }
}

TEST(Bleu, SentenceScoresMatchSacreBleu) {
  Options options;
  options.effective_order = true;
  for (const auto& s : golden().at("sentences")) {
    const std::string fixture = s.at("fixture");
    const std::size_t line = s.at("line");
    SCOPED_TRACE(fixture + " line " + std::to_string(line));
    const auto hyp = read_lines(kFixtures + fixture + ".hyp").at(line);
    const auto ref = read_lines(kFixtures + fixture + ".ref").at(line);
    const auto score = rig::bleu::score(rig::bleu::sentence_stats(hyp, ref, options), options);
    EXPECT_NEAR(score.score, s.at("score").get<double>(), 0.01);
    EXPECT_NEAR(score.bp, s.at("bp").get<double>(), 1e-9);
  }
}

TEST(Bleu, Tokenize13aMatchesSacreBleu) {
  for (const auto& t : golden().at("tokenize_13a")) {
    const std::string input = t.at("input");
    EXPECT_EQ(rig::bleu::tokenize_13a(input), t.at("output").get<std::string>()) << input;
  }
}

TEST(Bleu, LowercaseMatchesPythonLower) {
  Options options;
  options.lowercase = true;
  for (const auto& t : golden().at("lowercase_13a")) {
    const std::string input = t.at("input");
    EXPECT_EQ(rig::bleu::preprocess(input, options), t.at("output").get<std::string>()) << input;
  }
}

TEST(Bleu, BrevityPenaltyIsExpOfOneMinusRefOverHyp) {
  Stats stats;
  stats.hyp_len = 5;
  stats.ref_len = 8;
  stats.matches = {5, 4, 3, 2};
  stats.totals = {5, 4, 3, 2};
  const auto score = rig::bleu::score(stats, Options{});
  EXPECT_DOUBLE_EQ(score.bp, std::exp(1.0 - 8.0 / 5.0));
  EXPECT_DOUBLE_EQ(score.score, 100.0 * std::exp(1.0 - 8.0 / 5.0));
  stats.hyp_len = 9;  // longer than the reference: no penalty
  EXPECT_DOUBLE_EQ(rig::bleu::score(stats, Options{}).bp, 1.0);
}

TEST(Bleu, ExpSmoothingHalvesEachFurtherZeroOrder) {
  Stats stats;
  stats.hyp_len = stats.ref_len = 10;
  stats.matches = {10, 0, 0, 0};
  stats.totals = {10, 9, 8, 7};
  const auto score = rig::bleu::score(stats, Options{});
  EXPECT_DOUBLE_EQ(score.precisions[1], 100.0 / (2 * 9));
  EXPECT_DOUBLE_EQ(score.precisions[2], 100.0 / (4 * 8));
  EXPECT_DOUBLE_EQ(score.precisions[3], 100.0 / (8 * 7));
  Options none;
  none.smooth = Smooth::none;
  EXPECT_DOUBLE_EQ(rig::bleu::score(stats, none).score, 0.0);
}

TEST(Bleu, ClipsHypothesisCountsByTheReference) {
  const auto stats = rig::bleu::sentence_stats("the the the the", "the cat", Options{});
  EXPECT_EQ(stats.matches[0], 1);
  EXPECT_EQ(stats.totals[0], 4);
  EXPECT_EQ(stats.totals[3], 1);
}

TEST(Bleu, EmptyHypothesisScoresZeroWithZeroPenalty) {
  const auto score = rig::bleu::corpus_bleu({""}, {"a reference"}, Options{});
  EXPECT_EQ(score.score, 0.0);
  EXPECT_EQ(score.bp, 0.0);
  EXPECT_EQ(score.format(),
            "BLEU = 0.00 0.0/0.0/0.0/0.0 (BP = 0.000 ratio = 0.000 hyp_len = 0 ref_len = 2)");
}

TEST(Bleu, BadInputIsAUserError) {
  EXPECT_EQ(rig_test::user_error_of([] {
              rig::bleu::corpus_bleu({"a", "b"}, {"a"}, Options{});
            }),
            "BLEU needs one reference per hypothesis: 2 hypotheses, 1 references");
  Options intl;
  intl.tokenize = "intl";
  EXPECT_EQ(rig_test::user_error_of([&] { rig::bleu::preprocess("x", intl); }),
            "unknown BLEU tokenizer 'intl': expected 13a or none");
  EXPECT_EQ(rig_test::user_error_of([] { rig::bleu::parse_smooth("add_k"); }),
            "unknown BLEU smoothing method 'add_k': expected exp, floor, add-k or none");
}

TEST(Bleu, InvalidUtf8IsFoundAndNeverSplitFurther) {
  EXPECT_EQ(rig::first_invalid_utf8("Grüße"), std::nullopt);
  EXPECT_EQ(rig::first_invalid_utf8("ab\xC3("), 2u);           // truncated sequence
  EXPECT_EQ(rig::first_invalid_utf8("a\xC0\xAF"), 1u);         // overlong '/'
  EXPECT_EQ(rig::first_invalid_utf8("\xED\xA0\x80"), 0u);      // a surrogate
  EXPECT_EQ(rig::first_invalid_utf8("\xF4\x90\x80\x80"), 0u);  // > U+10FFFF
  // Invalid bytes stay as they are (no crash, no lost bytes).
  EXPECT_EQ(rig::bleu::tokenize_13a("a\xFF.b"), "a\xFF . b");
}

}  // namespace
