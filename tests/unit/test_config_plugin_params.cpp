// Validating a plugin's params against the plugin's own schema.
#include <gtest/gtest.h>

#include <string>

#include "config/experiment_file.hpp"
#include "config/schema_validator.hpp"
#include "rig/error.hpp"
#include "user_error_of.hpp"

namespace rig::config {
namespace {

using rig_test::user_error_of;

const char* kMlpSchema = R"(
type: object
additionalProperties: false
required: [hidden_sizes]
properties:
  hidden_sizes:
    description: Width of each hidden layer.
    type: array
    minItems: 1
    uniqueItems: true
    items: {type: integer, minimum: 1}
  activation:
    type: string
    enum: [relu, tanh]
    default: relu
  dropout:
    type: number
    minimum: 0
    exclusiveMaximum: 1
    default: 0.0
  bias: {type: boolean, default: true}
  init:
    type: object
    additionalProperties: false
    properties:
      scale: {type: number, default: 1.0}
      kind: {type: string, default: normal}
  layers:
    type: array
    items:
      type: object
      properties:
        width: {type: integer}
        norm: {type: boolean, default: false}
  tag:
    type: string
    pattern: "^[a-z]+$"
  groups:
    type: integer
    multipleOf: 8
)";

const char* kExperiment = R"(base_params:
  batch_size_per_gpu: 4
  max_steps: 10
  model: mlp
  model_params:
    hidden_sizes: [64, 32]
  data_layer: d
  optimizer: o
  lr_policy: l
)";

// Resolves `text` for train mode and validates its model_params.
YAML::Node check(const std::string& text, const std::vector<Override>& overrides = {}) {
  const ResolvedConfig cfg = ExperimentFile::parse(text, "bad.yaml").resolve("train", overrides);
  YAML::Node params = cfg.root["model_params"];
  validate_plugin_params(kMlpSchema, params, cfg, "model_params", "model 'mlp'");
  return params;
}

std::string check_error(const std::string& text, const std::vector<Override>& overrides = {}) {
  return user_error_of([&] { check(text, overrides); });
}

std::string with_params(const std::string& params_lines) {
  return std::string(kExperiment) + "train_params:\n  model_params:\n" + params_lines;
}

TEST(ConfigPluginParams, FillsDefaultsInPlace) {
  const ResolvedConfig cfg = ExperimentFile::parse(kExperiment, "bad.yaml").resolve("train", {});
  YAML::Node params = cfg.root["model_params"];
  validate_plugin_params(kMlpSchema, params, cfg, "model_params", "model 'mlp'");
  EXPECT_EQ(cfg.root["model_params"]["activation"].as<std::string>(), "relu");
  EXPECT_TRUE(cfg.root["model_params"]["bias"].as<bool>());
  EXPECT_DOUBLE_EQ(cfg.root["model_params"]["dropout"].as<double>(), 0.0);
  // A nested map with defaults and nothing required is created.
  EXPECT_DOUBLE_EQ(cfg.root["model_params"]["init"]["scale"].as<double>(), 1.0);
  EXPECT_EQ(cfg.root["model_params"]["init"]["kind"].as<std::string>(), "normal");
  EXPECT_FALSE(cfg.root["model_params"]["layers"]);
}

TEST(ConfigPluginParams, DefaultsInsideListItemsAndNestedMaps) {
  const YAML::Node params = check(with_params(
      "    init: {scale: 2}\n    layers:\n      - width: 3\n      - {width: 4, norm: true}\n"));
  EXPECT_DOUBLE_EQ(params["init"]["scale"].as<double>(), 2.0);
  EXPECT_EQ(params["init"]["kind"].as<std::string>(), "normal");
  EXPECT_FALSE(params["layers"][0]["norm"].as<bool>());
  EXPECT_TRUE(params["layers"][1]["norm"].as<bool>());
}

TEST(ConfigPluginParams, NullParamsBecomeAnEmptyMap) {
  const ResolvedConfig cfg = ExperimentFile::parse(kExperiment, "bad.yaml").resolve("train", {});
  YAML::Node params;
  const char* schema = "type: object\nproperties:\n  momentum: {type: number, default: 0.9}\n";
  validate_plugin_params(schema, params, cfg, "optimizer_params", "optimizer 'o'");
  EXPECT_DOUBLE_EQ(params["momentum"].as<double>(), 0.9);
}

TEST(ConfigPluginParams, UnknownKey) {
  EXPECT_EQ(check_error(with_params("    hiden_sizes: [3]\n")),
            "bad.yaml:12:5: train_params.model_params.hiden_sizes: unknown key for model 'mlp'; "
            "did you mean 'hidden_sizes'?");
  EXPECT_EQ(check_error(with_params("    init: {scael: 2}\n")),
            "bad.yaml:12:12: train_params.model_params.init.scael: unknown key for model 'mlp'; "
            "did you mean 'scale'?");
  const std::string text =
      "base_params:\n  batch_size_per_gpu: 4\n  max_steps: 10\n  model: mlp\n  data_layer: d\n"
      "  optimizer: o\n  lr_policy: l\n  model_params:\n    hidden_sizes: [8]\n"
      "    hiden_sizes: [3]\n";
  EXPECT_EQ(check_error(text),
            "bad.yaml:10:5: base_params.model_params.hiden_sizes: unknown key for model 'mlp'; "
            "did you mean 'hidden_sizes'?");
}

TEST(ConfigPluginParams, WrongValues) {
  EXPECT_EQ(check_error(with_params("    hidden_sizes: [3, x]\n")),
            "bad.yaml:12:23: train_params.model_params.hidden_sizes[1]: expected integer, found "
            "'x' (model 'mlp')");
  EXPECT_EQ(check_error(with_params("    hidden_sizes: []\n")),
            "bad.yaml:12:19: train_params.model_params.hidden_sizes: expected a list of at least "
            "1 items, found 0 (model 'mlp')");
  EXPECT_EQ(check_error(with_params("    activation: gelu\n")),
            "bad.yaml:12:17: train_params.model_params.activation: expected one of [relu, tanh], "
            "found 'gelu' (model 'mlp')");
  EXPECT_EQ(check_error(with_params("    dropout: 1\n")),
            "bad.yaml:12:14: train_params.model_params.dropout: expected number < 1, found '1' "
            "(model 'mlp')");
  EXPECT_EQ(check_error(with_params("    bias: yes\n")),
            "bad.yaml:12:11: train_params.model_params.bias: expected boolean (true or false), "
            "found 'yes' (model 'mlp')");
  EXPECT_EQ(check_error(with_params("    tag: ABC\n")),
            "bad.yaml:12:10: train_params.model_params.tag: expected a string matching "
            "'^[a-z]+$', found 'ABC' (model 'mlp')");
}

TEST(ConfigPluginParams, NumbersAndBooleansAreAccepted) {
  EXPECT_NO_THROW(
      check(with_params("    dropout: 0.5\n    bias: false\n    init: {scale: 1e-3}\n")));
}

TEST(ConfigPluginParams, KeywordsOnlyValijsonKnowsStillFail) {
  EXPECT_EQ(check_error(with_params("    groups: 12\n")),
            "bad.yaml:12:13: train_params.model_params.groups: value should be a multiple of 8 "
            "(model 'mlp')");
  EXPECT_NO_THROW(check(with_params("    groups: 16\n")));
  // uniqueItems goes through valijson too (with our fix for its yaml-cpp adapter).
  EXPECT_EQ(check_error(with_params("    hidden_sizes: [4, 5, 4]\n")),
            "bad.yaml:12:19: train_params.model_params.hidden_sizes: elements at indexes #0 and "
            "#2 violate uniqueness constraint (model 'mlp')");
  EXPECT_NO_THROW(check(with_params("    hidden_sizes: [4, 5, 6]\n")));
}

TEST(ConfigPluginParams, MissingRequiredKey) {
  const std::string text =
      "base_params:\n  batch_size_per_gpu: 4\n  max_steps: 10\n  model: mlp\n  data_layer: d\n"
      "  optimizer: o\n  lr_policy: l\n  model_params:\n    activation: relu\n";
  EXPECT_EQ(check_error(text),
            "bad.yaml:8:3: base_params.model_params: missing required key 'hidden_sizes' for "
            "model 'mlp'");
  // No model_params in the file at all.
  const std::string bare =
      "base_params:\n  batch_size_per_gpu: 4\n  max_steps: 10\n  model: mlp\n  data_layer: d\n"
      "  optimizer: o\n  lr_policy: l\n";
  EXPECT_EQ(user_error_of([&] {
              ResolvedConfig cfg = ExperimentFile::parse(bare, "bad.yaml").resolve("train", {});
              YAML::Node params = cfg.root["model_params"];  // not there yet: non-const lookup
              validate_plugin_params(kMlpSchema, params, cfg, "model_params", "model 'mlp'");
            }),
            "bad.yaml: train mode: missing required key 'model_params.hidden_sizes' for model "
            "'mlp' (set it in base_params or train_params)");
}

TEST(ConfigPluginParams, ErrorsFromTheCommandLine) {
  EXPECT_EQ(check_error(kExperiment, {parse_slash_override("--model_params/activation=gelu")}),
            "command line (--model_params/activation=gelu): model_params.activation: expected one "
            "of [relu, tanh], found 'gelu' (model 'mlp')");
}

TEST(ConfigPluginParams, BrokenSchemas) {
  const ResolvedConfig cfg = ExperimentFile::parse(kExperiment, "bad.yaml").resolve("train", {});
  YAML::Node params = cfg.root["model_params"];
  EXPECT_EQ(user_error_of([&] {
              validate_plugin_params("type: [object\n", params, cfg, "model_params", "model 'x'");
            }).rfind("model 'x': its params schema is not valid YAML (", 0),
            0u);
  EXPECT_EQ(user_error_of([&] {
              validate_plugin_params("type: object\nminProperties: many\n", params, cfg,
                                     "model_params", "model 'x'");
            }).rfind("model 'x': invalid schema: ", 0),
            0u);
  EXPECT_EQ(user_error_of([&] {
              validate_plugin_params("$ref: '#/definitions/nope'\n", params, cfg, "model_params",
                                     "model 'x'");
            }).rfind("model 'x': ", 0),
            0u);
  // An empty schema accepts anything.
  EXPECT_NO_THROW(validate_plugin_params("", params, cfg, "model_params", "model 'x'"));
}

TEST(ConfigPluginParams, SchemaReferencesAndAllOf) {
  const char* schema = R"(
definitions:
  size: {type: integer, minimum: 1}
type: object
additionalProperties: false
properties:
  hidden_sizes: {type: array, items: {$ref: "#/definitions/size"}}
  extra:
    allOf:
      - {$ref: "#/definitions/size"}
      - {maximum: 4}
)";
  const ResolvedConfig cfg =
      ExperimentFile::parse(with_params("    extra: 5\n"), "bad.yaml").resolve("train", {});
  YAML::Node params = cfg.root["model_params"];
  EXPECT_EQ(user_error_of(
                [&] { validate_plugin_params(schema, params, cfg, "model_params", "model 'm'"); }),
            "bad.yaml:12:12: train_params.model_params.extra: expected integer <= 4, found '5' "
            "(model 'm')");
}

}  // namespace
}  // namespace rig::config
