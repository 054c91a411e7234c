// Checkpoints: atomic save / verified load, retention, best models and
// load_model transfer, on a small ParameterStore.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <limits>
#include <map>
#include <string>

#include "engine/checkpoint.hpp"
#include "rig/optimizer.hpp"
#include "rig/parameter_store.hpp"
#include "test_tensor_util.hpp"
#include "user_error_of.hpp"

namespace {

namespace fs = std::filesystem;
using rig::DType;
using rig::Initializer;
using rig::ParameterStore;
using rig::Tensor;
using rig::engine::BestModels;
using rig::engine::TrainingState;
using rig_test::contains;
using rig_test::user_error_of;

// Optimizer state laid out like the parameters, as the real plugins keep it.
class FakeOptimizer : public rig::Optimizer {
 public:
  explicit FakeOptimizer(std::int64_t numel) : momentum_(Tensor::zeros({numel})) {
    for (std::int64_t i = 0; i < numel; ++i) momentum_.data<float>()[i] = 0.25F * float(i) - 1.0F;
  }
  void step(double /*learning_rate*/) override {}
  std::map<std::string, Tensor> state() const override { return {{"momentum", momentum_}}; }
  void load_state(const std::map<std::string, Tensor>& state) override {
    momentum_.copy_from(state.at("momentum"));
  }
  Tensor momentum_;
};

// "layer.weight" [2,3], "layer.bias" [3] and the buffer "norm.running_mean" [3].
void declare_small_model(ParameterStore& store) {
  store.declare("layer.weight", {2, 3}, Initializer::uniform(-1.0F, 1.0F));
  store.declare("layer.bias", {3}, Initializer::normal(0.0F, 0.5F));
  store.declare_buffer("norm.running_mean", {3}, Initializer::uniform(0.0F, 2.0F));
}

TrainingState sample_state(std::int64_t step) {
  TrainingState state;
  state.step = step;
  state.epoch = 3;
  state.data_position = YAML::Load("{epoch: 3, index: 48}");
  state.config_hash = "0123456789abcdef";
  state.random_seed = 18446744073709551557ULL;  // above 2^63: must round-trip unsigned
  state.loss_scale = 1024.0;
  state.loss_scaler = YAML::Load("{scale: 1024.0, good_steps: 7}");
  return state;
}

const char* kConfig = "model: mlp\nmodel_params: {hidden_sizes: [16]}\n";

std::vector<float> values_of(const Tensor& t) {
  return t.to_vector();
}

class Checkpoints : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = fs::path(::testing::TempDir()) / (std::string("rig_ckpt_") + info->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    declare_small_model(store_);
    store_.allocate(11);
  }

  fs::path root() const { return dir_ / "checkpoints"; }
  fs::path save(std::int64_t step, const fs::path& where) {
    FakeOptimizer optimizer(store_.numel());
    return rig::engine::save_checkpoint(where, store_, &optimizer, sample_state(step), kConfig);
  }
  fs::path save(std::int64_t step) { return save(step, root()); }

  fs::path dir_;
  ParameterStore store_;
};

std::vector<std::string> folder_names(const fs::path& root) {
  std::vector<std::string> names;
  for (const auto& entry : fs::directory_iterator(root)) {
    names.push_back(entry.path().filename().string());
  }
  std::sort(names.begin(), names.end());
  return names;
}

void flip_byte(const fs::path& file, std::uintmax_t from_end) {
  std::fstream f(file, std::ios::in | std::ios::out | std::ios::binary);
  const auto pos = static_cast<std::streamoff>(fs::file_size(file) - from_end);
  f.seekg(pos);
  char c = 0;
  f.read(&c, 1);
  c = static_cast<char>(c ^ 0x10);
  f.seekp(pos);
  f.write(&c, 1);
}

TEST_F(Checkpoints, RoundTripKeepsWeightsOptimizerStateAndTrainingState) {
  const fs::path ckpt = save(12);
  EXPECT_EQ(ckpt, root() / "ckpt-12");
  EXPECT_EQ(folder_names(root()), (std::vector<std::string>{"ckpt-12"}));  // no temp folder left

  const auto loaded = rig::engine::load_checkpoint(ckpt);
  EXPECT_EQ(loaded.dir, ckpt);
  EXPECT_EQ(loaded.state.step, 12);
  EXPECT_EQ(loaded.state.epoch, 3);
  EXPECT_EQ(loaded.state.data_position["index"].as<int>(), 48);
  EXPECT_EQ(loaded.state.config_hash, "0123456789abcdef");
  EXPECT_EQ(loaded.state.random_seed, 18446744073709551557ULL);
  EXPECT_EQ(loaded.state.loss_scale, 1024.0);
  EXPECT_EQ(loaded.state.loss_scaler["good_steps"].as<int>(), 7);
  ASSERT_EQ(loaded.model.size(), 3U);
  EXPECT_EQ(values_of(loaded.model.at("layer.weight")),
            values_of(store_.find("layer.weight").value));
  EXPECT_EQ(values_of(loaded.model.at("norm.running_mean")),
            values_of(store_.find("norm.running_mean").value));
  EXPECT_EQ(values_of(loaded.optimizer.at("momentum")),
            values_of(FakeOptimizer(store_.numel()).momentum_));

  // state.yaml is readable on its own: RNG, the files' digests, the config.
  const YAML::Node state = YAML::LoadFile((ckpt / "state.yaml").string());
  EXPECT_EQ(state["rng"]["generator"].as<std::string>(), "philox4x32-10");
  EXPECT_EQ(state["rng"]["step"].as<int>(), 12);
  EXPECT_EQ(state["files"]["model.safetensors"]["bytes"].as<std::uintmax_t>(),
            fs::file_size(ckpt / "model.safetensors"));
  EXPECT_EQ(state["config"]["model"].as<std::string>(), "mlp");

  // Restoring into a differently initialised store gives the same bytes.
  ParameterStore other;
  declare_small_model(other);
  other.allocate(12345);
  EXPECT_NE(values_of(other.values()), values_of(store_.values()));
  rig::engine::restore_parameters(loaded, other);
  EXPECT_EQ(values_of(other.values()), values_of(store_.values()));
  EXPECT_EQ(values_of(other.buffers()), values_of(store_.buffers()));
}

TEST_F(Checkpoints, WithoutLossScalingTheScalerIsNull) {
  TrainingState state = sample_state(4);
  state.loss_scaler = YAML::Node();
  state.data_position = YAML::Node();
  const auto dir = rig::engine::save_checkpoint(root(), store_, nullptr, state, kConfig);
  const auto loaded = rig::engine::load_checkpoint(dir);
  EXPECT_FALSE(loaded.state.loss_scaler.IsDefined() && !loaded.state.loss_scaler.IsNull());
  EXPECT_FALSE(loaded.state.data_position.IsDefined() && !loaded.state.data_position.IsNull());
  EXPECT_TRUE(loaded.optimizer.empty());
  EXPECT_TRUE(YAML::LoadFile((dir / "state.yaml").string())["loss_scaler"].IsNull());
}

TEST_F(Checkpoints, MixedPrecisionSavesTheF32MastersAndRepublishesOnRestore) {
  ParameterStore mixed;
  declare_small_model(mixed);
  mixed.allocate(3, DType::f16);
  const auto& w = mixed.find("layer.weight");
  // Not representable in f16: the checkpoint must keep the exact f32 value.
  Tensor master = w.master;
  master.data<float>()[0] = 0.1234567F;
  mixed.publish_values();
  FakeOptimizer optimizer(mixed.numel());
  const auto dir =
      rig::engine::save_checkpoint(root(), mixed, &optimizer, sample_state(2), kConfig);
  const auto loaded = rig::engine::load_checkpoint(dir);
  EXPECT_EQ(loaded.model.at("layer.weight").dtype(), DType::f32);
  EXPECT_EQ(loaded.model.at("layer.weight").to_vector()[0], 0.1234567F);

  ParameterStore target;
  declare_small_model(target);
  target.allocate(99, DType::f16);
  rig::engine::restore_parameters(loaded, target);
  const auto& tw = target.find("layer.weight");
  EXPECT_EQ(tw.master.to_vector()[0], 0.1234567F);
  // The f16 compute copy was refreshed from the restored master.
  EXPECT_EQ(tw.value.dtype(), DType::f16);
  EXPECT_EQ(values_of(tw.value), values_of(w.value));
  EXPECT_NEAR(tw.value.to_vector()[0], 0.1234567F, 1e-3);
}

TEST_F(Checkpoints, TruncatedFileIsRefusedWithBothSizes) {
  const auto dir = save(7);
  const auto file = dir / "model.safetensors";
  const auto size = fs::file_size(file);
  fs::resize_file(file, size - 5);
  const auto message = user_error_of([&] { rig::engine::load_checkpoint(dir); });
  EXPECT_TRUE(contains(message, file.string() + " is truncated or corrupt: it is " +
                                    std::to_string(size - 5) + " bytes, but state.yaml says " +
                                    std::to_string(size)));
  EXPECT_TRUE(contains(message, "delete " + dir.string()));
}

TEST_F(Checkpoints, FlippedDataByteIsCaughtByTheChecksum) {
  const auto dir = save(7);
  // The last byte lies in the tensor data, which the safetensors header cannot vouch for.
  flip_byte(dir / "optimizer.safetensors", 1);
  EXPECT_TRUE(contains(
      user_error_of([&] { rig::engine::load_checkpoint(dir); }),
      (dir / "optimizer.safetensors").string() + " is truncated or corrupt: its CRC-32C is "));
}

TEST_F(Checkpoints, MissingFilesAndBadStateYamlAreRefused) {
  const auto dir = save(7);
  fs::remove(dir / "model.safetensors");
  EXPECT_TRUE(contains(user_error_of([&] { rig::engine::load_checkpoint(dir); }),
                       (dir / "model.safetensors").string() + " is missing"));

  const auto dir2 = save(8);
  fs::remove(dir2 / "state.yaml");
  EXPECT_TRUE(contains(user_error_of([&] { rig::engine::load_checkpoint(dir2); }),
                       "checkpoint folder " + dir2.string() + " has no state.yaml"));

  const auto dir3 = save(9);
  std::ofstream(dir3 / "state.yaml") << "step: [unclosed\n  {{{";
  EXPECT_TRUE(contains(user_error_of([&] { rig::engine::load_checkpoint(dir3); }),
                       (dir3 / "state.yaml").string() + " is corrupt: it is not valid YAML"));

  std::ofstream(dir3 / "state.yaml") << "just some text\n";
  EXPECT_TRUE(contains(user_error_of([&] { rig::engine::load_checkpoint(dir3); }),
                       (dir3 / "state.yaml").string() + " is corrupt: it should be a map"));

  std::ofstream(dir3 / "state.yaml") << "step: twelve\nepoch: 0\nconfig_hash: x\n";
  EXPECT_TRUE(contains(user_error_of([&] { rig::engine::load_checkpoint(dir3); }),
                       "'step' should be an integer, found 'twelve'"));

  // Nested aliases that stand for billions of nodes are refused before the
  // config is walked.
  std::ofstream(dir3 / "state.yaml")
      << "a: &a [x, x, x, x, x, x, x, x, x, x]\nb: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a, *a]\n"
         "c: &c [*b, *b, *b, *b, *b, *b, *b, *b, *b, *b]\nd: &d [*c, *c, *c, *c, *c, *c, *c, *c, "
         "*c, "
         "*c]\ne: &e [*d, *d, *d, *d, *d, *d, *d, *d, *d, *d]\nconfig: [*e, *e, *e, *e, *e, *e]\n";
  EXPECT_TRUE(contains(user_error_of([&] { rig::engine::load_checkpoint(dir3); }),
                       (dir3 / "state.yaml").string() + ": the YAML expands to more than"));

  EXPECT_TRUE(contains(user_error_of([&] { rig::engine::load_checkpoint(dir_ / "nowhere"); }),
                       "does not exist"));
}

TEST_F(Checkpoints, CheckpointsWithoutDigestsStillLoad) {
  const auto dir = save(5);
  YAML::Node state = YAML::LoadFile((dir / "state.yaml").string());
  state.remove("files");
  state.remove("rng");
  state.remove("loss_scale");
  state.remove("loss_scaler");
  std::ofstream(dir / "state.yaml") << state << "\n";
  const auto loaded = rig::engine::load_checkpoint(dir);
  EXPECT_EQ(loaded.state.step, 5);
  EXPECT_EQ(loaded.state.random_seed, 0U);
  EXPECT_EQ(loaded.state.loss_scale, 1.0);
  EXPECT_EQ(loaded.model.size(), 3U);
}

TEST_F(Checkpoints, LatestIsNumericAndSkipsIncompleteFolders) {
  EXPECT_FALSE(rig::engine::latest_checkpoint(dir_).has_value());
  save(9);
  save(10);  // "ckpt-9" sorts after "ckpt-10" as text
  // A save that stopped half-way, and a folder whose state.yaml never arrived.
  fs::create_directories(root() / ".tmp-ckpt-20");
  std::ofstream(root() / ".tmp-ckpt-20" / "state.yaml") << "step: 20\n";
  fs::create_directories(root() / "ckpt-30");
  std::ofstream(root() / "ckpt-30" / "model.safetensors") << "partial";
  fs::create_directories(root() / "ckpt-abc");
  EXPECT_EQ(rig::engine::latest_checkpoint(dir_), root() / "ckpt-10");
}

TEST_F(Checkpoints, PruningKeepsTheNewestAndClearsTempFolders) {
  for (int step = 1; step <= 6; ++step) save(step * 10);
  fs::create_directories(root() / ".tmp-ckpt-70");
  rig::engine::prune_checkpoints(root(), 0);  // keeps every checkpoint
  EXPECT_EQ(folder_names(root()).size(), 6U);
  rig::engine::prune_checkpoints(root(), 3);
  EXPECT_EQ(folder_names(root()), (std::vector<std::string>{"ckpt-40", "ckpt-50", "ckpt-60"}));
  rig::engine::prune_checkpoints(root(), 5);
  EXPECT_EQ(folder_names(root()).size(), 3U);
  rig::engine::prune_checkpoints(dir_ / "absent", 2);  // nothing to do, no error
}

TEST_F(Checkpoints, SavingAStepAgainReplacesIt) {
  save(5);
  store_.values().data<float>()[0] = 42.0F;
  save(5);
  EXPECT_EQ(folder_names(root()), (std::vector<std::string>{"ckpt-5"}));
  const auto loaded = rig::engine::load_checkpoint(root() / "ckpt-5");
  EXPECT_EQ(loaded.model.at("layer.weight").to_vector()[0], 42.0F);
}

// One evaluation as the trainer does it: save only when the value ranks.
void evaluate(BestModels& best, const fs::path& logdir, ParameterStore& store, std::int64_t step,
              double value) {
  if (!best.improves(value)) return;
  TrainingState state = sample_state(step);
  rig::engine::save_checkpoint(logdir / "best_models", store, nullptr, state, kConfig);
  best.record(step, value);
}

std::vector<std::int64_t> index_steps(const fs::path& logdir) {
  std::vector<std::int64_t> steps;
  for (const auto& m : YAML::LoadFile((logdir / "best_models" / "index.yaml").string())["models"]) {
    steps.push_back(m["step"].as<std::int64_t>());
  }
  return steps;
}

TEST_F(Checkpoints, BestModelsKeepTheLowestLossesBestFirst) {
  BestModels best(dir_, "loss", "min", 2);
  EXPECT_EQ(best.metric(), "loss");
  evaluate(best, dir_, store_, 10, 0.5);
  evaluate(best, dir_, store_, 20, 0.7);
  evaluate(best, dir_, store_, 30, 0.4);
  EXPECT_FALSE(best.improves(0.7));  // ties the worst kept: the earlier stays
  evaluate(best, dir_, store_, 40, 0.9);
  EXPECT_FALSE(best.improves(std::numeric_limits<double>::quiet_NaN()));
  EXPECT_EQ(index_steps(dir_), (std::vector<std::int64_t>{30, 10}));
  EXPECT_EQ(folder_names(dir_ / "best_models"),
            (std::vector<std::string>{"ckpt-10", "ckpt-30", "index.yaml"}));
  EXPECT_EQ(rig::engine::best_checkpoint(dir_), dir_ / "best_models" / "ckpt-30");
  EXPECT_EQ(rig::engine::load_checkpoint(*rig::engine::best_checkpoint(dir_)).state.step, 30);

  // A resumed run continues the ranking from index.yaml.
  BestModels resumed(dir_, "loss", "min", 2);
  EXPECT_TRUE(resumed.improves(0.45));
  EXPECT_FALSE(resumed.improves(0.55));
  evaluate(resumed, dir_, store_, 50, 0.45);
  EXPECT_EQ(index_steps(dir_), (std::vector<std::int64_t>{30, 50}));
  EXPECT_FALSE(fs::exists(dir_ / "best_models" / "ckpt-10"));
}

TEST_F(Checkpoints, BestModelsMaxModeAndTies) {
  BestModels best(dir_, "accuracy", "max", 1);
  evaluate(best, dir_, store_, 10, 0.6);
  evaluate(best, dir_, store_, 20, 0.8);
  evaluate(best, dir_, store_, 30, 0.7);
  EXPECT_FALSE(best.improves(0.8));
  EXPECT_EQ(index_steps(dir_), (std::vector<std::int64_t>{20}));
  EXPECT_EQ(folder_names(dir_ / "best_models"),
            (std::vector<std::string>{"ckpt-20", "index.yaml"}));

  // Equal values rank by age: the earlier first.
  const fs::path other = dir_ / "ties";
  BestModels tied(other, "loss", "min", 3);
  evaluate(tied, other, store_, 10, 0.5);
  evaluate(tied, other, store_, 20, 0.5);
  evaluate(tied, other, store_, 30, 0.3);
  EXPECT_EQ(index_steps(other), (std::vector<std::int64_t>{30, 10, 20}));
  EXPECT_FALSE(tied.improves(0.5));
}

TEST_F(Checkpoints, BestModelsWithKeepZeroNeverSave) {
  BestModels none(dir_, "loss", "min", 0);
  EXPECT_FALSE(none.improves(0.1));
  none.record(10, 0.1);
  EXPECT_FALSE(fs::exists(dir_ / "best_models"));
  EXPECT_FALSE(rig::engine::best_checkpoint(dir_).has_value());
}

TEST_F(Checkpoints, BestModelsRefuseAnotherMetricOrACorruptIndex) {
  BestModels best(dir_, "loss", "min", 1);
  evaluate(best, dir_, store_, 10, 0.5);
  EXPECT_TRUE(contains(user_error_of([&] { BestModels(dir_, "accuracy", "max", 1); }),
                       "ranks checkpoints by loss (min), but this run's best_model_metric / "
                       "best_model_mode are accuracy (max)"));
  std::ofstream(dir_ / "best_models" / "index.yaml") << "metric: [broken\n";
  const auto message = user_error_of([&] { BestModels(dir_, "loss", "min", 1); });
  EXPECT_TRUE(contains(message, (dir_ / "best_models" / "index.yaml").string() + " is corrupt"));
}

TEST_F(Checkpoints, TransferCopiesMatchingNamesAndShapes) {
  ParameterStore source;
  source.declare("enc.weight", {2, 3}, Initializer::uniform(-1.0F, 1.0F));
  source.declare("enc.bias", {3}, Initializer::constant(0.5F));
  source.declare("head.weight", {4, 3}, Initializer::constant(2.0F));
  source.declare("extra.scale", {1}, Initializer::constant(3.0F));
  source.declare_buffer("norm.mean", {3}, Initializer::constant(7.0F));
  source.allocate(5);
  const fs::path logdir = dir_ / "pretrained";
  const auto ckpt = rig::engine::save_checkpoint(logdir / "checkpoints", source, nullptr,
                                                 sample_state(100), kConfig);

  auto make_target = [](ParameterStore& target) {
    target.declare("enc.weight", {2, 3}, Initializer::zeros());
    target.declare("enc.bias", {3}, Initializer::zeros());
    target.declare("head.weight", {5, 3}, Initializer::constant(-1.0F));
    target.declare("new.weight", {2}, Initializer::constant(-2.0F));
    target.declare_buffer("norm.mean", {3}, Initializer::zeros());
    target.allocate(6);
  };
  // A logdir (its latest checkpoint), a checkpoint folder, the file itself.
  for (const fs::path& from : {logdir, ckpt, ckpt / "model.safetensors"}) {
    SCOPED_TRACE(from.string());
    ParameterStore target;
    make_target(target);
    const auto report = rig::engine::load_matching_parameters(from, target);
    EXPECT_EQ(report.source, ckpt / "model.safetensors");
    EXPECT_EQ(report.loaded, (std::vector<std::string>{"enc.weight", "enc.bias", "norm.mean"}));
    EXPECT_EQ(report.mismatched,
              (std::vector<std::string>{"head.weight: checkpoint [4,3] vs model [5,3]"}));
    EXPECT_EQ(report.missing, (std::vector<std::string>{"new.weight"}));
    EXPECT_EQ(report.unused, (std::vector<std::string>{"extra.scale"}));
    EXPECT_EQ(values_of(target.find("enc.weight").value),
              values_of(source.find("enc.weight").value));
    EXPECT_EQ(values_of(target.find("norm.mean").value), std::vector<float>(3, 7.0F));
    EXPECT_EQ(values_of(target.find("head.weight").value), std::vector<float>(15, -1.0F));
    EXPECT_EQ(values_of(target.find("new.weight").value), std::vector<float>(2, -2.0F));
  }
}

TEST_F(Checkpoints, TransferWidensHalfPrecisionFiles) {
  const fs::path file = dir_ / "half.safetensors";
  const Tensor weight = Tensor::from_vector(std::vector<float>{0.5F, -1.25F, 3.0F}, {3});
  rig::formats::write_safetensors(
      file, {{"layer.bias", weight.to(DType::bf16)}, {"norm.running_mean", weight.to(DType::f16)}});
  ParameterStore target;
  declare_small_model(target);
  target.allocate(1);
  const auto report = rig::engine::load_matching_parameters(file, target);
  EXPECT_EQ(report.loaded, (std::vector<std::string>{"layer.bias", "norm.running_mean"}));
  EXPECT_EQ(report.missing, (std::vector<std::string>{"layer.weight"}));
  EXPECT_EQ(values_of(target.find("layer.bias").value), values_of(weight));
  EXPECT_EQ(values_of(target.find("norm.running_mean").value), values_of(weight));
}

TEST_F(Checkpoints, TransferNamesABadSource) {
  ParameterStore target;
  declare_small_model(target);
  target.allocate(1);
  EXPECT_TRUE(contains(
      user_error_of([&] { rig::engine::load_matching_parameters(dir_ / "missing", target); }),
      "load_model: " + (dir_ / "missing").string() + " does not exist"));
  fs::create_directories(dir_ / "empty");
  EXPECT_TRUE(contains(
      user_error_of([&] { rig::engine::load_matching_parameters(dir_ / "empty", target); }),
      "load_model: " + (dir_ / "empty").string() + " has no model.safetensors"));
  const auto ckpt = save(3);
  flip_byte(ckpt / "model.safetensors", 2);
  EXPECT_TRUE(contains(user_error_of([&] { rig::engine::load_matching_parameters(ckpt, target); }),
                       "model.safetensors is truncated or corrupt"));
}

}  // namespace
