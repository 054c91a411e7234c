// Resolving an experiment file for a mode: merge, overrides, defaults,
// per-mode requirements, source locations, stable output.
#include <gtest/gtest.h>

#include <string>

#include "config/experiment_file.hpp"
#include "rig/error.hpp"
#include "user_error_of.hpp"

namespace rig::config {
namespace {

using rig_test::user_error_of;

const char* kExperiment = R"(base_params:
  batch_size_per_gpu: 32
  max_steps: 100
  logdir: runs/base
  model: mlp
  model_params:
    hidden_sizes: [64, 32]
    activation: relu
    init: {scale: 0.1, kind: normal}
  data_layer: synthetic
  data_layer_params:
    num_samples: 1024
    shuffle: false
train_params:
  optimizer: sgd
  optimizer_params:
    momentum: 0.9
  lr_policy: fixed
  lr_policy_params:
    learning_rate: 0.1
  model_params:
    hidden_sizes: [128]
    init: {scale: 0.5}
  data_layer_params:
    shuffle: true
eval_params:
  batch_size_per_gpu: 64
  print_loss_steps: 7
infer_params:
  model_params: {activation: tanh}
)";

ResolvedConfig resolve(const std::string& text, const std::string& mode,
                       const std::vector<Override>& overrides = {}) {
  return ExperimentFile::parse(text, "exp.yaml").resolve(mode, overrides);
}

std::string resolve_error(const std::string& text, const std::string& mode,
                          const std::vector<Override>& overrides = {}) {
  return user_error_of([&] { resolve(text, mode, overrides); });
}

TEST(ConfigResolve, TrainMergesTrainParamsOverBase) {
  const ResolvedConfig cfg = resolve(kExperiment, "train");
  EXPECT_EQ(cfg.mode, "train");
  EXPECT_EQ(cfg.experiment_file, "exp.yaml");
  const YAML::Node& r = cfg.root;
  EXPECT_EQ(r["batch_size_per_gpu"].as<int>(), 32);
  EXPECT_EQ(r["optimizer"].as<std::string>(), "sgd");
  // Lists replace, they do not concatenate.
  ASSERT_EQ(r["model_params"]["hidden_sizes"].size(), 1u);
  EXPECT_EQ(r["model_params"]["hidden_sizes"][0].as<int>(), 128);
  // Maps merge recursively: keys from both sections survive.
  EXPECT_EQ(r["model_params"]["activation"].as<std::string>(), "relu");
  EXPECT_DOUBLE_EQ(r["model_params"]["init"]["scale"].as<double>(), 0.5);
  EXPECT_EQ(r["model_params"]["init"]["kind"].as<std::string>(), "normal");
  EXPECT_EQ(r["data_layer_params"]["num_samples"].as<int>(), 1024);
  EXPECT_TRUE(r["data_layer_params"]["shuffle"].as<bool>());
}

TEST(ConfigResolve, EvalAndInferUseTheirOwnSections) {
  const ResolvedConfig eval = resolve(kExperiment, "eval");
  EXPECT_EQ(eval.root["batch_size_per_gpu"].as<int>(), 64);
  EXPECT_EQ(eval.root["print_loss_steps"].as<int>(), 7);
  EXPECT_FALSE(eval.root["optimizer"]);
  EXPECT_EQ(eval.root["model_params"]["hidden_sizes"].size(), 2u);
  EXPECT_FALSE(eval.root["data_layer_params"]["shuffle"].as<bool>());

  const ResolvedConfig infer = resolve(kExperiment, "infer");
  EXPECT_EQ(infer.root["batch_size_per_gpu"].as<int>(), 32);
  EXPECT_EQ(infer.root["model_params"]["activation"].as<std::string>(), "tanh");
  EXPECT_EQ(infer.root["model_params"]["hidden_sizes"].size(), 2u);
}

TEST(ConfigResolve, ResolvingDoesNotChangeTheFile) {
  const ExperimentFile file = ExperimentFile::parse(kExperiment, "exp.yaml");
  const ResolvedConfig train = file.resolve("train", {parse_set_override("model_params.x=1")});
  EXPECT_FALSE(file.root()["base_params"]["model_params"]["x"]);
  EXPECT_EQ(file.root()["base_params"]["model_params"]["hidden_sizes"].size(), 2u);
  const ResolvedConfig eval = file.resolve("eval");
  EXPECT_FALSE(eval.root["model_params"]["x"]);
}

TEST(ConfigResolve, DefaultsFillWhatIsAbsent) {
  const ResolvedConfig cfg = resolve(kExperiment, "train");
  EXPECT_EQ(cfg.root["print_loss_steps"].as<int>(), 100);
  EXPECT_EQ(cfg.root["eval_steps"].as<int>(), 1000);
  EXPECT_EQ(cfg.root["save_checkpoint_steps"].as<int>(), 0);
  EXPECT_EQ(cfg.root["random_seed"].as<int>(), 0);
  EXPECT_EQ(cfg.root["iter_size"].as<int>(), 1);
  EXPECT_EQ(cfg.root["dtype"].as<std::string>(), "float32");
  EXPECT_EQ(cfg.root["device"].as<std::string>(), "auto");
  EXPECT_EQ(cfg.root["communicator"].as<std::string>(), "local");
  EXPECT_EQ(cfg.root["logdir"].as<std::string>(), "runs/base");
  EXPECT_FALSE(cfg.root["max_grad_norm"]);
  EXPECT_FALSE(cfg.root["target_loss"]);
  EXPECT_FALSE(cfg.root["num_epochs"]);
  EXPECT_EQ(cfg.where("communicator").describe(), "schema default");
}

TEST(ConfigResolve, PrecedenceDefaultThenFileThenCommandLine) {
  const char* text = R"(base_params:
  batch_size_per_gpu: 4
  max_steps: 10
  model: m
  data_layer: d
  optimizer: o
  lr_policy: l
  eval_steps: 50
train_params:
  eval_steps: 60
)";
  const ResolvedConfig plain = resolve(text, "train");
  EXPECT_EQ(plain.root["print_loss_steps"].as<int>(), 100);  // default
  EXPECT_EQ(plain.root["eval_steps"].as<int>(), 60);         // mode section over base
  const ResolvedConfig cli =
      resolve(text, "train",
              {parse_set_override("eval_steps=70"), parse_slash_override("--print_loss_steps=5")});
  EXPECT_EQ(cli.root["eval_steps"].as<int>(), 70);
  EXPECT_EQ(cli.root["print_loss_steps"].as<int>(), 5);
  EXPECT_EQ(cli.where("eval_steps").describe(), "command line (--set eval_steps=70)");
  EXPECT_EQ(cli.where("print_loss_steps").describe(), "command line (--print_loss_steps=5)");
  // Later overrides win over earlier ones.
  const ResolvedConfig twice = resolve(
      text, "train", {parse_set_override("eval_steps=70"), parse_set_override("eval_steps=80")});
  EXPECT_EQ(twice.root["eval_steps"].as<int>(), 80);
}

TEST(ConfigResolve, OverridesCreateNestedKeysAndReplaceValues) {
  const ResolvedConfig cfg = resolve(kExperiment, "train",
                                     {parse_slash_override("--lr_policy_params/learning_rate=0.5"),
                                      parse_set_override("optimizer_params.nesterov=true"),
                                      parse_set_override("model_params.hidden_sizes=[8, 8, 8]"),
                                      parse_set_override("communicator_params.timeout_s=30")});
  EXPECT_DOUBLE_EQ(cfg.root["lr_policy_params"]["learning_rate"].as<double>(), 0.5);
  EXPECT_TRUE(cfg.root["optimizer_params"]["nesterov"].as<bool>());
  EXPECT_DOUBLE_EQ(cfg.root["optimizer_params"]["momentum"].as<double>(), 0.9);
  EXPECT_EQ(cfg.root["model_params"]["hidden_sizes"].size(), 3u);
  EXPECT_EQ(cfg.root["communicator_params"]["timeout_s"].as<int>(), 30);
  EXPECT_EQ(cfg.where("lr_policy_params.learning_rate").describe(),
            "command line (--lr_policy_params/learning_rate=0.5)");
  EXPECT_EQ(cfg.where("model_params.hidden_sizes[1]").describe(),
            "command line (--set model_params.hidden_sizes=[8, 8, 8])");
}

TEST(ConfigResolve, NullOverrideRemovesAKey) {
  const ResolvedConfig cfg =
      resolve(kExperiment, "train",
              {parse_set_override("max_steps=null"), parse_set_override("num_epochs=3")});
  EXPECT_FALSE(cfg.root["max_steps"]);
  EXPECT_EQ(cfg.root["num_epochs"].as<int>(), 3);
}

TEST(ConfigResolve, SourcesPointIntoTheFile) {
  const ResolvedConfig cfg = resolve(kExperiment, "train");
  Location loc = cfg.where("max_steps");
  EXPECT_EQ(loc.describe(), "exp.yaml:3:14");
  EXPECT_EQ(loc.key_path, "base_params.max_steps");
  loc = cfg.where("model_params.hidden_sizes");
  EXPECT_EQ(loc.describe(), "exp.yaml:22:19");
  EXPECT_EQ(loc.key_path, "train_params.model_params.hidden_sizes");
  loc = cfg.where("model_params.hidden_sizes[0]");
  EXPECT_EQ(loc.describe(), "exp.yaml:22:20");
  EXPECT_EQ(loc.key_path, "train_params.model_params.hidden_sizes[0]");
  // A merged map keeps the place of the map it merged into; its keys keep their own.
  EXPECT_EQ(cfg.where("model_params").key_path, "base_params.model_params");
  EXPECT_EQ(cfg.where("model_params.activation").key_path, "base_params.model_params.activation");
  EXPECT_EQ(cfg.where("model_params.init.kind").describe(), "exp.yaml:9:30");
  EXPECT_EQ(cfg.where("model_params.init.scale").key_path, "train_params.model_params.init.scale");
  // An unknown path answers with its nearest known ancestor, at its key.
  loc = cfg.where("model_params.activation.deeper");
  EXPECT_EQ(loc.key_path, "base_params.model_params.activation.deeper");
  EXPECT_EQ(loc.describe(), "exp.yaml:8:5");
  loc = cfg.where("nothing_here");
  EXPECT_EQ(loc.describe(), "exp.yaml");
  EXPECT_EQ(loc.key_path, "nothing_here");
}

TEST(ConfigResolve, OverridesThatAreNotUtf8AreRefused) {
  // What the file's own text must be (ConfigLoad.TextThatIsNotUtf8IsRefused), an override must be.
  EXPECT_EQ(resolve_error(kExperiment, "train", {parse_set_override("model=ml\xFF")}),
            "command line (--set model=ml\xFF):1:1: byte 0xFF (byte 3 of this value) is not "
            "UTF-8; YAML text must be UTF-8");
  EXPECT_EQ(resolve_error(kExperiment, "train",
                          {parse_set_override("mo\xE9"
                                              "del=mlp")}),
            "command line (--set mo\xE9"
            "del=mlp): byte 0xE9 of the key is not UTF-8");
}

TEST(ConfigResolve, UnknownMode) {
  EXPECT_EQ(resolve_error(kExperiment, "training"),
            "unknown mode 'training' (expected train, eval or infer)");
}

TEST(ConfigResolve, MissingRequiredKey) {
  const char* text = R"(base_params:
  batch_size_per_gpu: 4
  data_layer: d
train_params:
  max_steps: 5
  optimizer: o
  lr_policy: l
)";
  EXPECT_EQ(resolve_error(text, "train"),
            "exp.yaml: train mode: missing required key 'model' (set it in base_params or "
            "train_params)");
  EXPECT_EQ(resolve_error(text, "eval"),
            "exp.yaml: eval mode: missing required key 'model' (set it in base_params or "
            "eval_params)");
}

TEST(ConfigResolve, TrainNeedsOptimizerAndLrPolicyOthersDoNot) {
  const char* text = R"(base_params:
  batch_size_per_gpu: 4
  model: m
  data_layer: d
train_params:
  max_steps: 5
  lr_policy: l
)";
  EXPECT_EQ(resolve_error(text, "train"),
            "exp.yaml: train mode: missing required key 'optimizer' (set it in base_params or "
            "train_params)");
  EXPECT_NO_THROW(resolve(text, "eval"));
  EXPECT_NO_THROW(resolve(text, "infer"));
}

TEST(ConfigResolve, BatchSizeRequiredInEveryMode) {
  const char* text = "base_params:\n  model: m\n  data_layer: d\n";
  EXPECT_EQ(resolve_error(text, "infer"),
            "exp.yaml: infer mode: missing required key 'batch_size_per_gpu' (set it in "
            "base_params or infer_params)");
}

TEST(ConfigResolve, ExactlyOneOfMaxStepsAndNumEpochs) {
  const char* both = R"(base_params:
  batch_size_per_gpu: 4
  max_steps: 10
  model: m
  data_layer: d
  optimizer: o
  lr_policy: l
train_params:
  num_epochs: 2
)";
  EXPECT_EQ(resolve_error(both, "train"),
            "exp.yaml: train mode: set exactly one of 'max_steps', 'num_epochs'; found both: "
            "base_params.max_steps at exp.yaml:3:14, train_params.num_epochs at exp.yaml:9:15");
  const char* neither = R"(base_params:
  batch_size_per_gpu: 4
  model: m
  data_layer: d
  optimizer: o
  lr_policy: l
)";
  EXPECT_EQ(resolve_error(neither, "train"),
            "exp.yaml: train mode: set exactly one of 'max_steps', 'num_epochs'; found none (set "
            "one in base_params or train_params)");
  // Only train mode needs a length.
  EXPECT_NO_THROW(resolve(neither, "eval"));
  EXPECT_NO_THROW(resolve(both, "eval"));
  // The command line can fix it.
  EXPECT_NO_THROW(resolve(neither, "train", {parse_set_override("max_steps=3")}));
  EXPECT_EQ(resolve_error(both, "train", {parse_set_override("max_steps=3")}),
            "exp.yaml: train mode: set exactly one of 'max_steps', 'num_epochs'; found both: "
            "max_steps at command line (--set max_steps=3), train_params.num_epochs at "
            "exp.yaml:9:15");
}

TEST(ConfigResolve, RequireExactlyOneHelper) {
  ResolvedConfig cfg = resolve(kExperiment, "eval");
  EXPECT_EQ(user_error_of([&] {
              require_exactly_one(cfg, {"max_steps", "num_epochs"});
            }),
            "<no error>");
  EXPECT_EQ(user_error_of([&] {
              require_exactly_one(cfg, {"max_grad_norm", "num_epochs"});
            }),
            "exp.yaml: eval mode: set exactly one of 'max_grad_norm', 'num_epochs'; found none "
            "(set one in base_params or eval_params)");
}

TEST(ConfigResolve, PluginParamsWithoutPlugin) {
  const char* text = R"(base_params:
  batch_size_per_gpu: 4
  model: m
  data_layer: d
train_params:
  max_steps: 5
  lr_policy: l
  optimizer_params:
    momentum: 0.9
)";
  EXPECT_EQ(resolve_error(text, "train"),
            "exp.yaml:8:3: train_params.optimizer_params: given without 'optimizer' (set "
            "'optimizer' in base_params or train_params)");
  // communicator has a default, so its params alone are fine.
  EXPECT_NO_THROW(resolve(text, "eval", {parse_set_override("communicator_params.x=1")}));
}

TEST(ConfigResolve, OverrideErrorsPointAtTheCommandLine) {
  EXPECT_EQ(resolve_error(kExperiment, "train", {parse_set_override("max_step=5")}),
            "command line (--set max_step=5): max_step: unknown key; did you mean 'max_steps'?");
  EXPECT_EQ(resolve_error(kExperiment, "train", {parse_set_override("base_params.max_steps=5")}),
            "command line (--set base_params.max_steps=5): base_params.max_steps: overrides name "
            "keys of the resolved config; leave out 'base_params.'");
  EXPECT_EQ(resolve_error(kExperiment, "train", {parse_slash_override("--max_steps=abc")}),
            "command line (--max_steps=abc): max_steps: expected integer, found 'abc'");
  EXPECT_EQ(
      resolve_error(kExperiment, "train", {parse_set_override("dtype=float8")}),
      "command line (--set dtype=float8): dtype: expected one of [float32, float16, bfloat16, "
      "mixed], found 'float8'");
  EXPECT_EQ(resolve_error(kExperiment, "train", {parse_set_override("max_steps.x=1")}),
            "command line (--set max_steps.x=1): max_steps: cannot set 'x' inside '100' (set at "
            "exp.yaml:3:14): it is not a map");
  EXPECT_EQ(resolve_error(kExperiment, "train", {parse_set_override("model_params=[1,")})
                .rfind("command line (--set model_params=[1,): the value is not valid YAML: ", 0),
            0u);
}

TEST(ConfigResolve, ToYamlIsOrderedAndStable) {
  const ResolvedConfig cfg = resolve(kExperiment, "train");
  const std::string expected = R"(batch_size_per_gpu: 32
max_steps: 100
print_loss_steps: 100
eval_steps: 1000
save_checkpoint_steps: 0
checkpoint_every_s: 0
logdir: runs/base
random_seed: 0
iter_size: 1
bucket_cap_mb: 25
gradient_compression: none
dtype: float32
mixed_dtype: float16
matmul_precision: float32
cudnn_benchmark: false
num_checkpoints: 5
save_summaries_steps: 100
best_model_metric: loss
best_model_mode: auto
eval_bleu: true
eval_bleu_samples: 3
num_best_models: 1
device: auto
model: mlp
model_params:
  activation: relu
  hidden_sizes: [128]
  init:
    kind: normal
    scale: 0.5
data_layer: synthetic
data_layer_params:
  num_samples: 1024
  shuffle: true
optimizer: sgd
optimizer_params:
  momentum: 0.9
lr_policy: fixed
lr_policy_params:
  learning_rate: 0.1
communicator: local
)";
  EXPECT_EQ(cfg.to_yaml(), expected);
  // The output reads back as the same config.
  const YAML::Node back = YAML::Load(cfg.to_yaml());
  EXPECT_EQ(back["model_params"]["init"]["scale"].as<double>(), 0.5);
}

TEST(ConfigResolve, HashIsStable) {
  const ResolvedConfig a = resolve(kExperiment, "train");
  const ResolvedConfig b = resolve(kExperiment, "train");
  EXPECT_EQ(a.hash(), b.hash());
  EXPECT_EQ(a.hash().size(), 16u);
  EXPECT_EQ(a.hash().find_first_not_of("0123456789abcdef"), std::string::npos);
  EXPECT_EQ(a.hash(), fnv1a64_hex(a.to_yaml()));
  // FNV-1a 64 reference values.
  EXPECT_EQ(fnv1a64_hex(""), "cbf29ce484222325");
  EXPECT_EQ(fnv1a64_hex("a"), "af63dc4c8601ec8c");
  // Key order in the file does not matter; values do.
  const char* reordered = R"(train_params:
  lr_policy_params:
    learning_rate: 0.1
  lr_policy: fixed
  optimizer_params:
    momentum: 0.9
  optimizer: sgd
base_params:
  data_layer_params: {shuffle: false, num_samples: 1024}
  data_layer: synthetic
  model: mlp
  max_steps: 100
  batch_size_per_gpu: 32
  model_params:
    hidden_sizes: [64, 32]
    activation: relu
    init: {scale: 0.1, kind: normal}
  logdir: runs/base
)";
  const std::string h = resolve(reordered, "train",
                                {parse_set_override("model_params.hidden_sizes=[128]"),
                                 parse_set_override("model_params.init.scale=0.5"),
                                 parse_set_override("data_layer_params.shuffle=true")})
                            .hash();
  EXPECT_EQ(h, a.hash());
  EXPECT_NE(resolve(kExperiment, "train", {parse_set_override("random_seed=1")}).hash(), a.hash());
  EXPECT_NE(resolve(kExperiment, "eval").hash(), a.hash());
}

TEST(ConfigResolve, QuotedStringsStayStrings) {
  const char* text = R"(base_params:
  batch_size_per_gpu: 4
  model: m
  data_layer: d
  data_layer_params: {vocab: "100", flag: "true"}
)";
  const ResolvedConfig cfg = resolve(text, "eval");
  const std::string yaml = cfg.to_yaml();
  EXPECT_NE(yaml.find("vocab: \"100\""), std::string::npos) << yaml;
  EXPECT_NE(yaml.find("flag: \"true\""), std::string::npos) << yaml;
}

TEST(ConfigResolve, EmptyMapsPrintInline) {
  const ResolvedConfig cfg =
      resolve(kExperiment, "train", {parse_set_override("communicator_params={}")});
  const std::string yaml = cfg.to_yaml();
  EXPECT_NE(yaml.find("\ncommunicator_params: {}\n"), std::string::npos) << yaml;
}

}  // namespace
}  // namespace rig::config
