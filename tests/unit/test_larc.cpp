// LARC (core/src/engine/larc.*): OpenSeq2Seq's per-variable trust ratio in
// clip and scale modes on a store of 3 parameters, against
// tests/golden/loss_scaling_larc.json (tests/golden/gen_loss_scaling_larc.py),
// and larc_params checking.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <string>
#include <vector>

#include <yaml-cpp/yaml.h>
#include <nlohmann/json.hpp>

#include "engine/larc.hpp"
#include "rig/parameter_store.hpp"
#include "test_tensor_util.hpp"
#include "user_error_of.hpp"

namespace {

using rig::ParameterStore;
using rig::engine::apply_larc;
using rig::engine::read_larc_settings;
using rig_test::contains;
using rig_test::user_error_of;

nlohmann::json golden() {
  std::ifstream in(std::string(RIG_SOURCE_DIR) + "/tests/golden/loss_scaling_larc.json");
  EXPECT_TRUE(in.good()) << "missing tests/golden/loss_scaling_larc.json";
  return nlohmann::json::parse(in);
}

void copy_into(const std::vector<float>& from, float* to) {
  std::copy(from.begin(), from.end(), to);
}

TEST(Larc, MatchesOpenSeq2SeqPerParameter) {
  const auto cases = golden().at("larc");
  ASSERT_EQ(cases.size(), 4U);
  for (const auto& c : cases) {
    SCOPED_TRACE(c.at("name").get<std::string>());
    ParameterStore store;
    for (const auto& p : c.at("parameters")) {
      store.declare(p.at("name").get<std::string>(), p.at("shape").get<rig::Shape>(),
                    rig::Initializer::zeros());
    }
    store.allocate(0);
    for (const auto& p : c.at("parameters")) {
      const auto& info = store.find(p.at("name").get<std::string>());
      copy_into(p.at("values").get<std::vector<float>>(),
                store.values().data<float>() + info.offset);
      copy_into(p.at("grads").get<std::vector<float>>(), store.grads().data<float>() + info.offset);
    }
    const std::vector<float> values_before = store.values().to_vector();
    const auto settings = read_larc_settings(YAML::Load(c.at("params").dump()));
    apply_larc(store, settings, c.at("lr").get<double>());
    EXPECT_EQ(store.values().to_vector(), values_before);  // only gradients change
    const std::vector<float> grads = store.grads().to_vector();
    for (const auto& p : c.at("parameters")) {
      const auto& info = store.find(p.at("name").get<std::string>());
      const auto expected = p.at("expected").get<std::vector<double>>();
      for (std::size_t i = 0; i < expected.size(); ++i) {
        const double got = grads[static_cast<std::size_t>(info.offset) + i];
        EXPECT_NEAR(got, expected[i], 1e-6 * std::abs(expected[i]) + 1e-30)
            << info.name << "[" << i << "] ratio " << p.at("ratio").get<double>();
      }
    }
  }
}

TEST(Larc, ClipModeWithAZeroLearningRateLeavesGradients) {
  ParameterStore store;
  store.declare("w", {3}, rig::Initializer::constant(2.0F));
  store.allocate(0);
  store.grads().fill_(4.0F);
  apply_larc(store, read_larc_settings(YAML::Load("{larc_eta: 0.01}")), 0.0);
  EXPECT_EQ(store.grads().to_vector(), (std::vector<float>{4, 4, 4}));
  // Scale mode does not use the learning rate: 0.01 * sqrt(12) / (sqrt(48) + 1e-7).
  apply_larc(store, read_larc_settings(YAML::Load("{larc_eta: 0.01, larc_mode: scale}")), 0.0);
  EXPECT_NEAR(store.grads().to_vector()[0], 4.0 * 0.005, 1e-7);
}

TEST(Larc, SettingsDefaultsAndErrors) {
  const auto s = read_larc_settings(YAML::Load("{larc_eta: 0.002}"));
  EXPECT_EQ(s.eta, 0.002);
  EXPECT_EQ(s.mode, "clip");
  EXPECT_EQ(s.min_update, 1e-7);
  EXPECT_EQ(s.epsilon, 1e-7);
  EXPECT_TRUE(contains(user_error_of([] { read_larc_settings(YAML::Load("{larc_mode: clip}")); }),
                       "larc_params needs larc_eta"));
  EXPECT_TRUE(contains(
      user_error_of([] { read_larc_settings(YAML::Load("{larc_eta: 1, larc_mode: trust}")); }),
      "larc_params.larc_mode must be clip or scale, found 'trust'"));
  EXPECT_TRUE(
      contains(user_error_of([] { read_larc_settings(YAML::Load("{larc_eta: 1, eta: 2}")); }),
               "larc_params.eta is not a LARC parameter"));
  EXPECT_TRUE(contains(user_error_of([] { read_larc_settings(YAML::Load("{larc_eta: -1}")); }),
                       "larc_eta -1 must be > 0"));
  EXPECT_TRUE(contains(user_error_of([] { read_larc_settings(YAML::Load("{larc_eta: x}")); }),
                       "larc_params.larc_eta must be a finite number, found 'x'"));
  EXPECT_TRUE(contains(user_error_of([] { read_larc_settings(YAML::Load("[1]")); }),
                       "larc_params must be a mapping"));
}

}  // namespace
