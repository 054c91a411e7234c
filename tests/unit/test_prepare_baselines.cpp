// tools/prepare: the word-by-word dictionary baseline and SentencePiece's
// normaliser and detokenizer as corpus preparation uses them.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "baselines.hpp"
#include "sentencepiece_model.hpp"

namespace {

using namespace rig::prepare;

TEST(PrepareBaselines, MostFrequentSingleWordTranslation) {
  const std::vector<std::string> de = {"Haus", "Haus",  "Haus",     "Hund",
                                       "Hund", "Katze", "ein Haus", "gehen"};
  const std::vector<std::string> en = {"house", "home", "house",   "dog",
                                       "hound", "cat",  "a house", "to go"};
  const WordDictionary dictionary = build_word_dictionary(de, en);
  EXPECT_EQ(dictionary.at("Haus"), "house");  // 2 against 1
  EXPECT_EQ(dictionary.at("Hund"), "dog");    // a tie: the smaller string
  EXPECT_EQ(dictionary.at("Katze"), "cat");
  EXPECT_FALSE(dictionary.contains("ein"));    // only single-word pairs count
  EXPECT_FALSE(dictionary.contains("gehen"));  // "to go" is two words
}

TEST(PrepareBaselines, TranslatesWordByWord) {
  const WordDictionary dictionary = {{"Haus", "house"}, {"der", "the"}, {"ärger", "anger"}};
  WordCounts counts;
  EXPECT_EQ(translate_word_by_word("Der Hund im Haus.", dictionary, counts), "the Hund im house.");
  EXPECT_EQ(counts.translated, 2U);
  EXPECT_EQ(counts.copied, 2U);
  EXPECT_EQ(translate_word_by_word("(Ärger) ...", dictionary, counts), "(anger) ...");
  EXPECT_EQ(counts.translated, 3U);
  EXPECT_EQ(counts.copied, 3U);
}

TEST(PrepareBaselines, NormalizesLikeSentencePiece) {
  const TextNormalizer normalizer;
  EXPECT_EQ(normalizer.normalize("  ﬁx  Ｈｅｌｌｏ  ½ Straße\tx "), "fix Hello 1⁄2 Straße x");
  EXPECT_EQ(normalizer.normalize("Äpfel „Indien“"), "Äpfel „Indien“");
  EXPECT_EQ(normalizer.normalize(""), "");
}

TEST(PrepareBaselines, Detokenizes) {
  EXPECT_EQ(detokenize("▁jdm . ▁Ab b itte ▁tun"), "jdm. Abbitte tun");
  EXPECT_EQ(detokenize(""), "");
}

}  // namespace
