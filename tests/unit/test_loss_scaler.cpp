// Loss scalers (core/src/engine/loss_scaler.*): OpenSeq2Seq's BackoffScaler
// and LogMaxScaler step by step against tests/golden/loss_scaling_larc.json
// (tests/golden/gen_loss_scaling_larc.py), their defaults, a bit-exact state
// round trip through YAML text, and the refusal of parameters that do not apply.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include <yaml-cpp/yaml.h>
#include <nlohmann/json.hpp>

#include "engine/loss_scaler.hpp"
#include "test_tensor_util.hpp"
#include "user_error_of.hpp"

namespace {

using rig::engine::LossScaler;
using rig::engine::make_loss_scaler;
using rig_test::contains;
using rig_test::user_error_of;

constexpr double kInf = std::numeric_limits<double>::infinity();

nlohmann::json golden() {
  std::ifstream in(std::string(RIG_SOURCE_DIR) + "/tests/golden/loss_scaling_larc.json");
  EXPECT_TRUE(in.good()) << "missing tests/golden/loss_scaling_larc.json";
  return nlohmann::json::parse(in);
}

std::unique_ptr<LossScaler> make(const std::string& scaling, const std::string& params = "~") {
  return make_loss_scaler(YAML::Load(scaling), YAML::Load(params));
}

// The JSON params of a golden case as the YAML node the engine passes.
YAML::Node yaml_of(const nlohmann::json& params) {
  return params.empty() ? YAML::Node() : YAML::Load(params.dump());
}

TEST(LossScaler, MatchesOpenSeq2SeqStepByStep) {
  const auto cases = golden().at("loss_scaling");
  ASSERT_GE(cases.size(), 5U);
  for (const auto& c : cases) {
    const auto name = c.at("name").get<std::string>();
    SCOPED_TRACE(name);
    const auto algorithm = c.at("algorithm").get<std::string>();
    auto scaler = make_loss_scaler(YAML::Node(algorithm), yaml_of(c.at("params")));
    EXPECT_TRUE(scaler->automatic());
    const auto& overflow = c.at("overflow");
    const auto& amax = c.at("amax");
    const auto& expected = c.at("scale");
    ASSERT_EQ(overflow.size(), expected.size());
    for (std::size_t i = 0; i < expected.size(); ++i) {
      const bool o = overflow[i].get<bool>();
      scaler->update(o, o ? kInf : amax[i].get<double>());
      const double want = expected[i].get<double>();
      if (algorithm == "Backoff") {
        ASSERT_EQ(scaler->scale(), want) << "step " << i;
      } else {
        ASSERT_NEAR(scaler->scale(), want, 1e-12 * want) << "step " << i;
      }
    }
  }
}

TEST(LossScaler, DefaultsAndFixedScales) {
  auto backoff = make("Backoff");
  EXPECT_EQ(backoff->scale(), 16777216.0);  // starts at scale_max, 2^24
  EXPECT_EQ(backoff->describe(), "Backoff (scale 16777216)");
  auto logmax = make("LogMax", "{}");
  EXPECT_EQ(logmax->scale(), 1.0);
  EXPECT_TRUE(logmax->automatic());

  for (const char* absent : {"~", ""}) {
    auto none = make(absent);
    EXPECT_FALSE(none->automatic());
    EXPECT_EQ(none->scale(), 1.0);
  }
  auto fixed = make("512");
  EXPECT_FALSE(fixed->automatic());
  fixed->update(true, kInf);
  fixed->update(false, 3.0);
  EXPECT_EQ(fixed->scale(), 512.0);
  EXPECT_EQ(fixed->describe(), "fixed (scale 512)");
}

TEST(LossScaler, ANonFiniteAmaxIsAnOverflow) {
  auto backoff = make("Backoff", "{scale_max: 64}");
  backoff->update(false, kInf);
  EXPECT_EQ(backoff->scale(), 32.0);
  backoff->update(false, std::numeric_limits<double>::quiet_NaN());
  EXPECT_EQ(backoff->scale(), 16.0);
  // LogMax: an overflow counts as x = 2^log_max; the scale collapses to scale_min.
  auto logmax = make("LogMax", "{scale_min: 0.25}");
  logmax->update(false, std::numeric_limits<double>::quiet_NaN());
  EXPECT_EQ(logmax->scale(), 0.25);
}

// Runs `steps` updates with a fixed pseudo-random pattern starting at `first`.
void drive(LossScaler& scaler, int first, int steps) {
  for (int i = first; i < first + steps; ++i) {
    const bool overflow = i % 17 == 5;
    scaler.update(overflow, overflow ? kInf : std::exp2(-7.0 + 3.0 * std::sin(i * 0.7)));
  }
}

TEST(LossScaler, StateRoundTripsBitExactlyThroughYamlText) {
  for (const char* algorithm : {"Backoff", "LogMax"}) {
    SCOPED_TRACE(algorithm);
    const std::string params = std::string(algorithm) == "Backoff"
                                   ? "{step_window: 7, step_factor: 1.7, scale_max: 1000000}"
                                   : "{log_max: 3, beta1: 0.9, beta2: 0.95, overflow_std_dev: 2.5}";
    auto straight = make(algorithm, params);
    drive(*straight, 0, 80);

    auto first = make(algorithm, params);
    drive(*first, 0, 37);
    const std::string saved = YAML::Dump(first->state());
    auto resumed = make(algorithm, params);
    resumed->load_state(YAML::Load(saved));
    EXPECT_EQ(YAML::Dump(resumed->state()), saved);
    drive(*resumed, 37, 43);
    EXPECT_EQ(resumed->scale(), straight->scale());
    EXPECT_EQ(YAML::Dump(resumed->state()), YAML::Dump(straight->state()));
    EXPECT_NE(resumed->scale(), make(algorithm, params)->scale());  // the state mattered
    EXPECT_NE(resumed->scale(), first->scale());
  }
  // Awkward doubles survive the text form.
  auto logmax = make("LogMax");
  logmax->update(false, 0.1 + 0.2);
  auto copy = make("LogMax");
  copy->load_state(YAML::Load(YAML::Dump(logmax->state())));
  for (int i = 0; i < 5; ++i) {
    logmax->update(false, 1.0 / 3.0 + i);
    copy->update(false, 1.0 / 3.0 + i);
    EXPECT_EQ(copy->scale(), logmax->scale());
  }
}

TEST(LossScaler, LoadStateRefusesAnotherAlgorithmOrAMissingKey) {
  auto backoff = make("Backoff");
  auto logmax = make("LogMax");
  EXPECT_TRUE(contains(user_error_of([&] { backoff->load_state(logmax->state()); }),
                       "saved by the 'LogMax' scaler, but the experiment uses 'Backoff'"));
  YAML::Node state = backoff->state();
  state.remove("iteration");
  EXPECT_TRUE(contains(user_error_of([&] { backoff->load_state(state); }), "'iteration'"));
  auto fixed = make("128");
  EXPECT_TRUE(contains(user_error_of([&] { fixed->load_state(make("64")->state()); }),
                       "fixed loss scale 64 differs from loss_scaling 128"));
  fixed->load_state(make("128")->state());
}

TEST(LossScaler, RefusesParametersThatDoNotApply) {
  EXPECT_TRUE(contains(user_error_of([] { make("Backoff", "{log_max: 8}"); }),
                       "loss_scaling_params.log_max does not apply to loss_scaling Backoff"));
  EXPECT_TRUE(contains(user_error_of([] { make("LogMax", "{step_window: 8}"); }),
                       "loss_scaling_params.step_window does not apply to loss_scaling LogMax"));
  EXPECT_TRUE(contains(user_error_of([] { make("256", "{scale_min: 2}"); }),
                       "loss_scaling_params.scale_min applies only to loss_scaling Backoff or "
                       "LogMax, but loss_scaling is 256"));
  EXPECT_TRUE(contains(user_error_of([] { make("~", "{beta1: 0.5}"); }),
                       "loss_scaling_params.beta1 applies only"));
  EXPECT_EQ(user_error_of([] { make("~", "{}"); }), "<no error>");
  EXPECT_TRUE(contains(user_error_of([] { make("Backoff", "{scale_min: 8, scale_max: 4}"); }),
                       "scale_min 8 and scale_max 4"));
  EXPECT_TRUE(contains(user_error_of([] { make("Backoff", "{step_window: 2.5}"); }),
                       "step_window 2.5 must be a whole number"));
  EXPECT_TRUE(
      contains(user_error_of([] { make("LogMax", "{beta2: 1}"); }), "beta2 1 must be in [0, 1)"));
  EXPECT_TRUE(contains(user_error_of([] { make("LogMax", "{beta1: fast}"); }),
                       "loss_scaling_params.beta1 must be a number, found 'fast'"));
  EXPECT_TRUE(contains(user_error_of([] { make("Dynamic"); }),
                       "loss_scaling must be a positive number, Backoff or LogMax; found "
                       "'Dynamic'"));
  EXPECT_TRUE(contains(user_error_of([] { make("-1"); }), "loss_scaling -1 must be a positive"));
}

}  // namespace
