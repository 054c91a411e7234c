// Parsing command-line overrides, and the did-you-mean helper.
#include <gtest/gtest.h>

#include <string>

#include "config/did_you_mean.hpp"
#include "config/overrides.hpp"
#include "rig/error.hpp"
#include "user_error_of.hpp"

namespace rig::config {
namespace {

using rig_test::user_error_of;

TEST(ConfigOverrides, SlashForm) {
  Override o = parse_slash_override("--lr_policy_params/learning_rate=0.5");
  EXPECT_EQ(o.path, "lr_policy_params.learning_rate");
  EXPECT_EQ(o.value, "0.5");
  EXPECT_EQ(o.origin, "--lr_policy_params/learning_rate=0.5");
  // The leading dashes are optional; the origin shows them either way.
  o = parse_slash_override("max_steps=10");
  EXPECT_EQ(o.path, "max_steps");
  EXPECT_EQ(o.value, "10");
  EXPECT_EQ(o.origin, "--max_steps=10");
  // Only the first '=' splits: the value may contain more.
  o = parse_slash_override("--model_params/expr=a=b");
  EXPECT_EQ(o.path, "model_params.expr");
  EXPECT_EQ(o.value, "a=b");
}

TEST(ConfigOverrides, SetForm) {
  for (const char* arg : {"a.b.c=[1, 2]", "--set a.b.c=[1, 2]", "--set=a.b.c=[1, 2]"}) {
    const Override o = parse_set_override(arg);
    EXPECT_EQ(o.path, "a.b.c") << arg;
    EXPECT_EQ(o.value, "[1, 2]") << arg;
    EXPECT_EQ(o.origin, "--set a.b.c=[1, 2]") << arg;
  }
}

TEST(ConfigOverrides, Malformed) {
  EXPECT_EQ(user_error_of([] { parse_set_override("foo"); }),
            "command line (--set foo): expected KEY=VALUE after --set, e.g. --set "
            "lr_policy_params.learning_rate=0.5");
  EXPECT_EQ(user_error_of([] { parse_slash_override("--foo"); }),
            "command line (--foo): expected --KEY/SUBKEY=VALUE, e.g. "
            "--lr_policy_params/learning_rate=0.5");
  EXPECT_EQ(user_error_of([] { parse_set_override("a..b=1"); }),
            "command line (--set a..b=1): empty key name in 'a..b'; expected KEY=VALUE after "
            "--set, e.g. --set lr_policy_params.learning_rate=0.5");
  EXPECT_EQ(user_error_of([] {
              parse_set_override("=1");
            }).rfind("command line (--set =1): empty key", 0),
            0u);
  EXPECT_EQ(user_error_of([] {
              parse_slash_override("--a//b=1");
            }).rfind("command line (--a//b=1): empty key name in 'a//b'", 0),
            0u);
  EXPECT_EQ(user_error_of([] { parse_set_override("logdir="); }),
            "command line (--set logdir=): no value after '='; write '' for an empty string or "
            "null to remove the key");
}

TEST(ConfigOverrides, ApplyRecordsTheCommandLine) {
  YAML::Node root = YAML::Load("a: {b: 1}\n");
  SourceMap sources;
  apply_override(root, sources, parse_set_override("a.c.d={x: 1}"));
  EXPECT_EQ(root["a"]["b"].as<int>(), 1);
  EXPECT_EQ(root["a"]["c"]["d"]["x"].as<int>(), 1);
  EXPECT_EQ(sources.at("a.c").describe(), "command line (--set a.c.d={x: 1})");
  EXPECT_EQ(sources.at("a.c.d.x").describe(), "command line (--set a.c.d={x: 1})");
  // A map value replaces the map: --set is "set", not "merge".
  apply_override(root, sources, parse_set_override("a.c={y: 2}"));
  EXPECT_FALSE(root["a"]["c"]["d"]);
  EXPECT_FALSE(sources.count("a.c.d.x"));
  EXPECT_EQ(root["a"]["c"]["y"].as<int>(), 2);
}

TEST(ConfigDidYouMean, Suggestions) {
  const std::vector<std::string> keys = {"max_steps", "num_epochs", "train_params", "hidden_sizes"};
  EXPECT_EQ(did_you_mean("max_step", keys), "max_steps");
  EXPECT_EQ(did_you_mean("trian_params", keys), "train_params");
  EXPECT_EQ(did_you_mean("hiden_sizes", keys), "hidden_sizes");
  EXPECT_EQ(did_you_mean("NUM_EPOCHS", keys), "num_epochs");
  EXPECT_EQ(did_you_mean("learning_rate", keys), std::nullopt);
  EXPECT_EQ(did_you_mean("x", {}), std::nullopt);
  EXPECT_EQ(edit_distance("kitten", "sitting"), 3u);
  EXPECT_EQ(edit_distance("ab", "ba"), 1u);
  EXPECT_EQ(edit_distance("", "abc"), 3u);
}

}  // namespace
}  // namespace rig::config
