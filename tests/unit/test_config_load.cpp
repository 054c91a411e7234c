// Loading an experiment file: syntax, shape and the file-level schema.
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <string>

#include "config/experiment_file.hpp"
#include "rig/error.hpp"
#include "user_error_of.hpp"

namespace rig::config {
namespace {

namespace fs = std::filesystem;

using rig_test::user_error_of;

std::string parse_error(const std::string& text) {
  return user_error_of([&] { ExperimentFile::parse(text, "bad.yaml"); });
}

fs::path temp_dir() {
  fs::path dir = fs::path(testing::TempDir()) / "rig_config_load";
  fs::create_directories(dir);
  return dir;
}

std::string write_file(const std::string& name, const std::string& text) {
  const fs::path path = temp_dir() / name;
  std::ofstream(path) << text;
  return path.string();
}

const char* kGood = R"(base_params:
  batch_size_per_gpu: 32
  max_steps: 100
  model: mlp
  data_layer: synthetic
train_params:
  optimizer: sgd
  lr_policy: fixed
)";

TEST(ConfigLoad, LoadsAValidFile) {
  const std::string path = write_file("good.yaml", kGood);
  const ExperimentFile file = ExperimentFile::load(path);
  EXPECT_EQ(file.path(), path);
  EXPECT_EQ(file.root()["base_params"]["max_steps"].as<int>(), 100);
  const Location loc = file.sources().at("base_params.max_steps");
  EXPECT_EQ(loc.file, path);
  EXPECT_EQ(loc.line, 3);
  EXPECT_EQ(loc.column, 14);
  EXPECT_EQ(loc.key_line, 3);
  EXPECT_EQ(loc.key_column, 3);
  EXPECT_EQ(loc.describe(), path + ":3:14");
  EXPECT_EQ(loc.describe_key(), path + ":3:3");
}

// Nested aliases that expand to 10^9 nodes are refused at once, not walked.
TEST(ConfigLoad, AliasBombIsRefusedQuickly) {
  std::string text = "a0: &a0 [x, x, x, x, x, x, x, x, x, x]\n";
  for (int i = 1; i < 10; ++i) {
    const std::string prev = "*a" + std::to_string(i - 1);
    text += "a" + std::to_string(i) + ": &a" + std::to_string(i) + " [";
    for (int k = 0; k < 10; ++k) text += (k > 0 ? ", " : "") + prev;
    text += "]\n";
  }
  text += "base_params: {model: mlp, bomb: *a9}\n";
  const auto start = std::chrono::steady_clock::now();
  const std::string error = parse_error(text);
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(1));
  EXPECT_NE(error.find("bad.yaml: the YAML expands to more than 100000 nodes"), std::string::npos)
      << error;
}

TEST(ConfigLoad, TextThatIsNotUtf8IsRefused) {
  // Found by tests/fuzz (fuzz_experiment, tests/fuzz/corpus/experiment/regression-not-utf8.yaml):
  // a string of continuation bytes made the schema validator's minLength check
  // (valijson's UTF-8 length) read past the end of its table.
  std::string error =
      parse_error("base_params:\n  model: \"ml\xFE\x80\x80\x80\x80\x80\x80\x80p\"\n");
  EXPECT_EQ(error,
            "bad.yaml:2:10: byte 0xFE (byte 3 of this value) is not UTF-8; YAML text must "
            "be UTF-8");
  error = parse_error(
      "base_params:\n  mod\xC0\x80"
      "el: mlp\n");
  EXPECT_NE(error.find("bad.yaml:2:3: byte 0xC0 (byte 4 of this value) is not UTF-8"),
            std::string::npos)
      << error;
}

TEST(ConfigLoad, DeepNestingIsRefused) {
  const std::string error =
      parse_error("base_params: " + std::string(100, '[') + std::string(100, ']') + "\n");
  EXPECT_NE(error.find("nests deeper than 64 levels"), std::string::npos) << error;
}

TEST(ConfigLoad, MissingFile) {
  EXPECT_EQ(user_error_of([] { ExperimentFile::load("experiments/nope.yaml"); }),
            "experiments/nope.yaml: experiment file not found");
}

TEST(ConfigLoad, Directory) {
  const std::string dir = temp_dir().string();
  EXPECT_EQ(user_error_of([&] { ExperimentFile::load(dir); }),
            dir + ": is a directory, not an experiment file");
}

TEST(ConfigLoad, UnreadableFile) {
  if (geteuid() == 0) GTEST_SKIP() << "root reads any file";
  const std::string path = write_file("unreadable.yaml", kGood);
  fs::permissions(path, fs::perms::none);
  EXPECT_EQ(user_error_of([&] { ExperimentFile::load(path); }),
            path + ": cannot read experiment file: Permission denied");
  fs::permissions(path, fs::perms::owner_all);
}

TEST(ConfigLoad, EmptyFile) {
  const std::string expected =
      ": experiment file is empty; expected a map with base_params (and optionally "
      "train_params, eval_params, infer_params)";
  const std::string path = write_file("empty.yaml", "");
  EXPECT_EQ(user_error_of([&] { ExperimentFile::load(path); }), path + expected);
  EXPECT_EQ(parse_error("# only a comment\n\n"), "bad.yaml" + expected);
}

TEST(ConfigLoad, NotAMap) {
  EXPECT_EQ(parse_error("- base_params\n- train_params\n"),
            "bad.yaml:1:1: an experiment file must be a map with base_params (and optionally "
            "train_params, eval_params, infer_params), found a list");
  EXPECT_EQ(parse_error("hello\n"),
            "bad.yaml:1:1: an experiment file must be a map with base_params (and optionally "
            "train_params, eval_params, infer_params), found 'hello'");
}

TEST(ConfigLoad, YamlSyntaxError) {
  const std::string path =
      write_file("syntax.yaml", "base_params:\n  max_steps: 1\n  model: [a, b\n");
  const std::string message = user_error_of([&] { ExperimentFile::load(path); });
  EXPECT_EQ(message.rfind(path + ":4:1: YAML syntax error: ", 0), 0u) << message;
  EXPECT_EQ(parse_error("base_params:\n  a: 1\n   b: 2\n"),
            "bad.yaml:3:5: YAML syntax error: illegal map value");
}

TEST(ConfigLoad, UnknownKeySuggestsTheClosest) {
  EXPECT_EQ(parse_error("base_params:\n  batch_size_per_gpu: 8\n  max_step: 5\n"),
            "bad.yaml:3:3: base_params.max_step: unknown key; did you mean 'max_steps'?");
  EXPECT_EQ(parse_error("base_params:\n  Max_Steps: 5\n"),
            "bad.yaml:2:3: base_params.Max_Steps: unknown key; did you mean 'max_steps'?");
}

TEST(ConfigLoad, UnknownTopLevelKey) {
  EXPECT_EQ(parse_error("base_params:\n  max_steps: 5\ntrian_params:\n  max_steps: 6\n"),
            "bad.yaml:3:1: trian_params: unknown key; did you mean 'train_params'?");
}

TEST(ConfigLoad, UnknownKeyListsAllowedKeysWhenNothingIsClose) {
  EXPECT_EQ(parse_error("base_params: {}\nzzz: 1\n"),
            "bad.yaml:2:1: zzz: unknown key; allowed keys: base_params, train_params, "
            "eval_params, infer_params");
  const std::string message = parse_error("base_params:\n  qqqqqqqq: 1\n");
  EXPECT_EQ(message.rfind("bad.yaml:2:3: base_params.qqqqqqqq: unknown key; allowed keys: "
                          "batch_size_per_gpu, max_steps, num_epochs, ",
                          0),
            0u)
      << message;
}

TEST(ConfigLoad, WrongTypes) {
  EXPECT_EQ(parse_error("base_params:\n  max_steps: abc\n"),
            "bad.yaml:2:14: base_params.max_steps: expected integer, found 'abc'");
  EXPECT_EQ(parse_error("base_params:\n  max_steps: 1.5\n"),
            "bad.yaml:2:14: base_params.max_steps: expected integer, found '1.5'");
  EXPECT_EQ(parse_error("base_params:\n  max_steps: \"100\"\n"),
            "bad.yaml:2:14: base_params.max_steps: expected integer, found string '100'");
  EXPECT_EQ(parse_error("base_params:\n  num_epochs: many\n"),
            "bad.yaml:2:15: base_params.num_epochs: expected number, found 'many'");
  EXPECT_EQ(parse_error("base_params:\n  logdir: [a, b]\n"),
            "bad.yaml:2:11: base_params.logdir: expected string, found a list");
  EXPECT_EQ(parse_error("base_params:\n  model_params: 3\n"),
            "bad.yaml:2:17: base_params.model_params: expected a map, found '3'");
  EXPECT_EQ(parse_error("base_params:\n  model_params:\n"),
            "bad.yaml:2:3: base_params.model_params: expected a map, found nothing");
  EXPECT_EQ(parse_error("base_params: 5\n"),
            "bad.yaml:1:14: base_params: expected a map, found '5'");
}

TEST(ConfigLoad, NumbersAndIntegersThatAreFine) {
  EXPECT_NO_THROW(ExperimentFile::parse(
      "base_params:\n  max_steps: 100\n  num_epochs: 2\n  max_grad_norm: 1e-1\n"
      "  target_loss: -0.5\ntrain_params:\n  num_epochs: 0.5\n",
      "ok.yaml"));
}

TEST(ConfigLoad, RangeViolations) {
  EXPECT_EQ(parse_error("base_params:\n  batch_size_per_gpu: 0\n"),
            "bad.yaml:2:23: base_params.batch_size_per_gpu: expected integer >= 1, found '0'");
  EXPECT_EQ(parse_error("base_params:\n  save_checkpoint_steps: -1\n"),
            "bad.yaml:2:26: base_params.save_checkpoint_steps: expected integer >= 0, found '-1'");
  EXPECT_EQ(parse_error("train_params:\n  num_epochs: 0\nbase_params: {}\n"),
            "bad.yaml:2:15: train_params.num_epochs: expected number > 0, found '0'");
  EXPECT_EQ(parse_error("base_params:\n  model: \"\"\n"),
            "bad.yaml:2:10: base_params.model: expected a non-empty string, found string ''");
}

TEST(ConfigLoad, EnumViolationListsAllowedValues) {
  EXPECT_EQ(parse_error("base_params:\n  dtype: float8\n"),
            "bad.yaml:2:10: base_params.dtype: expected one of [float32, float16, bfloat16, "
            "mixed], found 'float8'");
  // With the schema's hint (x-enum-hint): how to choose a GPU.
  EXPECT_EQ(parse_error("base_params:\n  device: cuda:1\n"),
            "bad.yaml:2:11: base_params.device: expected one of [auto, cpu, cuda, sim], found "
            "'cuda:1'; a process uses one GPU, the visible one of its local rank: choose it with "
            "CUDA_VISIBLE_DEVICES (CUDA_VISIBLE_DEVICES=1 rig run EXP runs on GPU 1; docs/gpu.md)");
}

TEST(ConfigLoad, BaseParamsIsRequired) {
  EXPECT_EQ(parse_error("train_params:\n  max_steps: 5\n"),
            "bad.yaml: missing required key 'base_params'");
}

TEST(ConfigLoad, DuplicateKey) {
  EXPECT_EQ(parse_error("base_params:\n  max_steps: 5\n  model: a\n  max_steps: 6\n"),
            "bad.yaml:4:3: base_params.max_steps: duplicate key (first set at line 2)");
}

TEST(ConfigLoad, NonScalarKey) {
  EXPECT_EQ(parse_error("base_params:\n  ? [a, b]\n  : 1\n"),
            "bad.yaml:2:5: base_params: keys must be plain names, found a list");
}

TEST(ConfigLoad, NestedPluginParamsAreFreeForm) {
  EXPECT_NO_THROW(ExperimentFile::parse(
      "base_params:\n  model_params:\n    anything: [1, {x: 2}]\n    nested: {deep: {er: true}}\n",
      "ok.yaml"));
}

}  // namespace
}  // namespace rig::config
