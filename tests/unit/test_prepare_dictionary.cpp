// tools/prepare: parsing and cleaning lines of the trans-de-en dictionary
// (the lines are real ones from /usr/share/trans/de-en, some shortened).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "dictionary_entry.hpp"

namespace {

using rig::prepare::clean_alternative;
using rig::prepare::parse_dictionary_line;
using rig::prepare::remove_abbreviation_markers;
using rig::prepare::SkipReason;
using rig::prepare::split_top_level;
using rig::prepare::TextPair;

std::vector<std::string> split(std::string_view text, std::string_view separator) {
  std::vector<std::string_view> parts;
  EXPECT_TRUE(split_top_level(text, separator, parts)) << text;
  return {parts.begin(), parts.end()};
}

TEST(PrepareDictionary, SplitsOnlyOutsideBrackets) {
  EXPECT_EQ(split("a; b (c; d); e", "; "), (std::vector<std::string>{"a", "b (c; d)", "e"}));
  EXPECT_EQ(split("x {prp; +Dat.} | y [a | b] | z", " | "),
            (std::vector<std::string>{"x {prp; +Dat.}", "y [a | b]", "z"}));
  EXPECT_EQ(split("no separator", " | "), (std::vector<std::string>{"no separator"}));
  EXPECT_EQ(split("a ::  :: b", " :: "), (std::vector<std::string>{"a", "", "b"}));
  std::vector<std::string_view> parts;
  EXPECT_FALSE(split_top_level("a (b; c", "; ", parts));
  EXPECT_FALSE(split_top_level("a b) c", "; ", parts));
  EXPECT_FALSE(split_top_level("a (b] c", "; ", parts));
}

TEST(PrepareDictionary, RemovesAbbreviationMarkersOnly) {
  EXPECT_EQ(remove_abbreviation_markers("Abfahrt {f} /Abf./; Abflug {m}"),
            "Abfahrt {f} ; Abflug {m}");
  EXPECT_EQ(remove_abbreviation_markers("estimated time of departure /ETD/"),
            "estimated time of departure ");
  EXPECT_EQ(remove_abbreviation_markers("/NATO/, x"), ", x");
  // Slashes inside words and lone slashes stay.
  EXPECT_EQ(remove_abbreviation_markers("zwei Stunden vor Abfahrt/Abflug"),
            "zwei Stunden vor Abfahrt/Abflug");
  EXPECT_EQ(remove_abbreviation_markers("he/she has/had"), "he/she has/had");
  EXPECT_EQ(remove_abbreviation_markers("a / b"), "a / b");
  EXPECT_EQ(remove_abbreviation_markers("1/8 Kreisfläche"), "1/8 Kreisfläche");
}

TEST(PrepareDictionary, CleansAnnotations) {
  EXPECT_EQ(clean_alternative("Aal {m} (auf der Speisekarte) [cook.]"), "Aal");
  EXPECT_EQ(clean_alternative(" congo eels [coll.]"), "congo eels");
  EXPECT_EQ(clean_alternative("Aalmolche {pl} (Amphiuma) (zoologische Gattung) <Aalmolch>"),
            "Aalmolche");
  EXPECT_EQ(clean_alternative("Aa machen {v}"), "Aa machen");
  EXPECT_EQ(clean_alternative("Einsteller {m} eines Privatwagens (Bahn)"),
            "Einsteller eines Privatwagens");
  // Nested groups go with their outer group.
  EXPECT_EQ(clean_alternative("Trikot {n} (Fußball (Sport)) [sport]"), "Trikot");
  // The … placeholder; no space left before punctuation; no stray comma.
  EXPECT_EQ(clean_alternative("Abfall…"), "Abfall");
  EXPECT_EQ(clean_alternative("smoothing …"), "smoothing");
  EXPECT_EQ(clean_alternative("Er kam (gestern) ."), "Er kam.");
  EXPECT_EQ(clean_alternative("(etw.), worauf man achten muss"), "worauf man achten muss");
  EXPECT_EQ(clean_alternative("  two   spaces\tand a tab "), "two spaces and a tab");
  EXPECT_EQ(clean_alternative("{adj}"), "");
  // Word forms that are part of the phrase stay.
  EXPECT_EQ(clean_alternative("jdm. auf die Schliche kommen"), "jdm. auf die Schliche kommen");
  EXPECT_EQ(clean_alternative("to find sb. out"), "to find sb. out");
}

TEST(PrepareDictionary, PairsAlignedSubEntries) {
  const auto parsed = parse_dictionary_line(
      "Aasfliege {f} [zool.] | Aasfliegen {pl} :: carrion fly; fleshfly; flesh fly | "
      "carrion flies; fleshflies");
  EXPECT_EQ(parsed.skipped, SkipReason::kNone);
  EXPECT_EQ(parsed.pairs, (std::vector<TextPair>{{"Aasfliege", "carrion fly"},
                                                 {"Aasfliege", "fleshfly"},
                                                 {"Aasfliege", "flesh fly"},
                                                 {"Aasfliegen", "carrion flies"},
                                                 {"Aasfliegen", "fleshflies"}}));
}

TEST(PrepareDictionary, PairsEachAlternativeWithTheOtherSidesFirst) {
  // 3 German x 2 English alternatives: 3 + 2 - 1 pairs, not the cross product's 6.
  const auto parsed = parse_dictionary_line(
      "Schlehdorn {m}; Schlehendorn {m}; Schwarzdorn {m} (Prunus spinosa) [bot.] :: "
      "blackthorn; sloe");
  EXPECT_EQ(parsed.pairs, (std::vector<TextPair>{{"Schlehdorn", "blackthorn"},
                                                 {"Schlehendorn", "blackthorn"},
                                                 {"Schwarzdorn", "blackthorn"},
                                                 {"Schlehdorn", "sloe"}}));
}

TEST(PrepareDictionary, KeepsSentencesAndAbbreviationsOut) {
  const auto parsed = parse_dictionary_line(
      "Abfahrt {f} /Abf./; Abflug {m} [transp.] | zur Abfahrt bereitstehen | "
      "Dann bin ich ihm auf die Schliche gekommen. :: departure /dep./ | to be ready to depart | "
      "Then I got wise to him.");
  EXPECT_EQ(parsed.pairs,
            (std::vector<TextPair>{
                {"Abfahrt", "departure"},
                {"Abflug", "departure"},
                {"zur Abfahrt bereitstehen", "to be ready to depart"},
                {"Dann bin ich ihm auf die Schliche gekommen.", "Then I got wise to him."}}));
}

TEST(PrepareDictionary, SkipsUnusableLines) {
  EXPECT_EQ(parse_dictionary_line("# Version :: devel 2023-01-30").skipped, SkipReason::kComment);
  EXPECT_EQ(parse_dictionary_line("").skipped, SkipReason::kComment);
  EXPECT_EQ(parse_dictionary_line("Aal {m} eel").skipped, SkipReason::kNoSeparator);
  EXPECT_EQ(parse_dictionary_line("a :: b :: c").skipped, SkipReason::kNoSeparator);
  EXPECT_EQ(parse_dictionary_line("Aal (m :: eel").skipped, SkipReason::kUnbalancedBrackets);
  const auto mismatch = parse_dictionary_line("Aal {m} | Aale {pl} :: eel");
  EXPECT_EQ(mismatch.skipped, SkipReason::kSubEntryMismatch);
  EXPECT_TRUE(mismatch.pairs.empty());
  // A sub-entry with nothing left on one side is left out; the others stay.
  const auto empty = parse_dictionary_line("Abbau… {adj} [biol.] | Abbauweg {m} :: … | pathway");
  EXPECT_EQ(empty.skipped, SkipReason::kNone);
  EXPECT_EQ(empty.empty_sub_entries, 1U);
  EXPECT_EQ(empty.pairs, (std::vector<TextPair>{{"Abbauweg", "pathway"}}));
}

}  // namespace
