// tools/prepare: pair filters, de-duplication and the German-hash split.
#include <gtest/gtest.h>

#include <set>
#include <string>
#include <vector>

#include "corpus.hpp"

namespace {

using namespace rig::prepare;

TEST(PrepareCorpus, CountsCharactersAndWords) {
  EXPECT_EQ(count_codepoints("Straße"), 6U);
  EXPECT_EQ(count_codepoints("„Indien“"), 8U);
  EXPECT_EQ(count_words("to be ready to depart"), 5U);
  EXPECT_EQ(count_words(""), 0U);
  EXPECT_TRUE(has_word_character("Äpfel"));
  EXPECT_TRUE(has_word_character("42"));
  EXPECT_TRUE(has_word_character("– é"));
  EXPECT_FALSE(has_word_character("–"));       // U+2013
  EXPECT_FALSE(has_word_character("„“ ..."));  // quotes and dots
  EXPECT_FALSE(has_word_character("§ ×"));
}

TEST(PrepareCorpus, Fnv1aMatchesPublishedValues) {
  EXPECT_EQ(fnv1a64(""), 0xcbf29ce484222325ULL);
  EXPECT_EQ(fnv1a64("a"), 0xaf63dc4c8601ec8cULL);
  EXPECT_EQ(fnv1a64("foobar"), 0x85944171f73967e8ULL);
}

TEST(PrepareCorpus, ChecksPairs) {
  EXPECT_EQ(check_pair({"Aal", "eel"}, 300), PairRejection::kKept);
  EXPECT_EQ(check_pair({"", "eel"}, 300), PairRejection::kEmpty);
  EXPECT_EQ(check_pair({"–", "dash"}, 300), PairRejection::kNoWordCharacter);
  EXPECT_EQ(check_pair({"Aal", std::string(301, 'e')}, 300), PairRejection::kTooLong);
  // 3 characters against 20: more than 3 * 3 + 10.
  EXPECT_EQ(check_pair({"AWG", "Waste Management Act"}, 300), PairRejection::kUnbalancedLength);
  EXPECT_EQ(check_pair({"AWG", "Waste Management"}, 300), PairRejection::kKept);
}

TEST(PrepareCorpus, RemovesExactDuplicatesKeepingOrder) {
  const std::vector<TextPair> pairs = {{"a", "x"}, {"b", "y"}, {"a", "x"}, {"a", "y"}, {"b", "y"}};
  EXPECT_EQ(remove_duplicates(pairs), (std::vector<TextPair>{{"a", "x"}, {"b", "y"}, {"a", "y"}}));
}

// 400 German phrases of 3 words, each with two translations (one of them
// short), and single-word pairs.
std::vector<TextPair> make_pairs() {
  std::vector<TextPair> pairs;
  for (int i = 0; i < 400; ++i) {
    const std::string de = "der Satz " + std::to_string(i);
    pairs.push_back({de, "the sentence " + std::to_string(i)});
    pairs.push_back({de, "sentence" + std::to_string(i)});
    pairs.push_back({"Wort" + std::to_string(i), "word" + std::to_string(i)});
  }
  return pairs;
}

TEST(PrepareCorpus, SplitsByGermanPhrase) {
  const std::vector<TextPair> pairs = make_pairs();
  SplitOptions options;
  options.dev_pairs = 20;
  options.test_pairs = 30;
  const Splits splits = split_by_german_hash(pairs, options);
  EXPECT_EQ(splits.dev.size(), 20U);
  EXPECT_EQ(splits.test.size(), 30U);
  // The short translations of the 50 held-out phrases are dropped, not put in train.
  EXPECT_EQ(splits.held_out_short_dropped, 50U);
  EXPECT_EQ(splits.train.size(), pairs.size() - 100);
  std::set<std::string> train_de;
  for (const auto& pair : splits.train) train_de.insert(pair.de);
  std::set<std::string> dev_de;
  for (const auto& pair : splits.dev) {
    EXPECT_GE(count_words(pair.de), 3U);
    EXPECT_GE(count_words(pair.en), 3U);
    EXPECT_FALSE(train_de.contains(pair.de)) << pair.de;
    dev_de.insert(pair.de);
  }
  for (const auto& pair : splits.test) {
    EXPECT_GE(count_words(pair.en), 3U);
    EXPECT_FALSE(train_de.contains(pair.de)) << pair.de;
    EXPECT_FALSE(dev_de.contains(pair.de)) << pair.de;
  }
  // Dev holds the phrases with the smallest hashes.
  std::uint64_t largest_dev = 0;
  for (const auto& pair : splits.dev) largest_dev = std::max(largest_dev, fnv1a64(pair.de));
  for (const auto& pair : splits.test) EXPECT_GT(fnv1a64(pair.de), largest_dev);
}

TEST(PrepareCorpus, SplitDoesNotDependOnInputOrder) {
  std::vector<TextPair> pairs = make_pairs();
  SplitOptions options;
  options.dev_pairs = 25;
  options.test_pairs = 25;
  const Splits forward = split_by_german_hash(pairs, options);
  std::reverse(pairs.begin(), pairs.end());
  const Splits backward = split_by_german_hash(pairs, options);
  const auto as_set = [](const std::vector<TextPair>& split) {
    std::set<std::string> set;
    for (const auto& pair : split) set.insert(pair.de + '\t' + pair.en);
    return set;
  };
  EXPECT_EQ(as_set(forward.dev), as_set(backward.dev));
  EXPECT_EQ(as_set(forward.test), as_set(backward.test));
  EXPECT_EQ(as_set(forward.train), as_set(backward.train));
}

TEST(PrepareCorpus, SmallCorpusGivesWhatItHas) {
  const std::vector<TextPair> pairs = {{"ein langer Satz", "a long sentence"}, {"Aal", "eel"}};
  const Splits splits = split_by_german_hash(pairs, SplitOptions{});
  EXPECT_EQ(splits.dev.size(), 1U);
  EXPECT_TRUE(splits.test.empty());
  EXPECT_EQ(splits.train, (std::vector<TextPair>{{"Aal", "eel"}}));
}

}  // namespace
