// The synthetic data layer: reproducible data, order, sharding and resuming.
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <set>

#include "rig/error.hpp"
#include "test_plugins_util.hpp"
#include "test_tensor_util.hpp"

namespace {

using rig::Tensor;

using rig_test::epoch_indices;
using rig_test::flatten;

class PluginSynthetic : public ::testing::Test {
 protected:
  rig_test::LoadedPlugin plugin{"data_layer", "synthetic"};

  std::unique_ptr<rig::DataLayer> make(const std::string& params, rig::Mode mode,
                                       std::int64_t batch_size, int rank = 0, int world_size = 1,
                                       std::uint64_t run_seed = 5) {
    return plugin.data_layer(plugin.params(params), mode, batch_size, rank, world_size, run_seed);
  }
};

TEST_F(PluginSynthetic, InfoAndBatchLayout) {
  auto data = make("{num_features: 5, num_classes: 3, num_samples: 40}", rig::Mode::train, 8);
  const YAML::Node info = data->info();
  EXPECT_EQ(info["task"].as<std::string>(), "classification");
  EXPECT_EQ(info["num_features"].as<int>(), 5);
  EXPECT_EQ(info["num_classes"].as<int>(), 3);
  EXPECT_EQ(info["num_outputs"].as<int>(), 3);
  EXPECT_EQ(data->epoch_size(), 40);
  auto batch = data->next_batch();
  ASSERT_TRUE(batch);
  EXPECT_EQ(batch->at("features").shape(), (rig::Shape{8, 5}));
  EXPECT_EQ(batch->at("labels").dtype(), rig::DType::i64);
  EXPECT_EQ(batch->num_objects, 8);
  std::set<std::int64_t> classes;
  auto all = make("{num_classes: 3}", rig::Mode::train, 4096);
  auto whole = all->next_batch();
  const auto* y = whole->at("labels").data<std::int64_t>();
  for (std::int64_t i = 0; i < 4096; ++i) classes.insert(y[i]);
  EXPECT_EQ(classes, (std::set<std::int64_t>{0, 1, 2}));  // the teacher uses every class

  auto regression = make("{task: regression, num_outputs: 2}", rig::Mode::train, 4);
  EXPECT_EQ(regression->info()["task"].as<std::string>(), "regression");
  auto rb = regression->next_batch();
  EXPECT_EQ(rb->at("labels").dtype(), rig::DType::f32);
  EXPECT_EQ(rb->at("labels").shape(), (rig::Shape{4, 2}));
}

TEST_F(PluginSynthetic, DeterministicFromTheSeeds) {
  auto a = make("{}", rig::Mode::train, 16);
  auto b = make("{}", rig::Mode::train, 16);
  auto c = make("{seed: 1}", rig::Mode::train, 16);
  auto d = make("{}", rig::Mode::train, 16, 0, 1, /*run_seed=*/6);
  auto ba = a->next_batch();
  auto bb = b->next_batch();
  EXPECT_EQ(ba->indices, bb->indices);
  EXPECT_EQ(ba->at("features").to_vector(), bb->at("features").to_vector());
  EXPECT_NE(ba->at("features").to_vector(), c->next_batch()->at("features").to_vector());
  EXPECT_NE(ba->at("features").to_vector(), d->next_batch()->at("features").to_vector());
}

TEST_F(PluginSynthetic, TrainOrderDependsOnlyOnSeedAndEpoch) {
  const std::string params = "{num_samples: 64}";
  auto data = make(params, rig::Mode::train, 8);
  const auto epoch0 = flatten(epoch_indices(*data));
  data->start_epoch(1);
  const auto epoch1 = flatten(epoch_indices(*data));
  data->start_epoch(0);
  EXPECT_EQ(flatten(epoch_indices(*data)), epoch0);
  EXPECT_NE(epoch0, epoch1);
  // A shuffled permutation of every sample.
  auto sorted = epoch0;
  std::sort(sorted.begin(), sorted.end());
  std::vector<std::int64_t> iota(64);
  std::iota(iota.begin(), iota.end(), 0);
  EXPECT_EQ(sorted, iota);
  EXPECT_NE(epoch0, iota);
  // A different batch size walks the same global order.
  auto other = make(params, rig::Mode::train, 16);
  other->start_epoch(1);
  EXPECT_EQ(flatten(epoch_indices(*other)), epoch1);
}

TEST_F(PluginSynthetic, TwoRanksPartitionEachGlobalBatch) {
  const std::string params = "{num_samples: 100}";
  auto single = make(params, rig::Mode::train, 16);  // global batch 16 on one rank
  auto rank0 = make(params, rig::Mode::train, 8, 0, 2);
  auto rank1 = make(params, rig::Mode::train, 8, 1, 2);
  const auto global = epoch_indices(*single);
  const auto shard0 = epoch_indices(*rank0);
  const auto shard1 = epoch_indices(*rank1);
  ASSERT_EQ(global.size(), 6U);  // 100 / 16, the incomplete last global batch dropped
  ASSERT_EQ(shard0.size(), 6U);
  ASSERT_EQ(shard1.size(), 6U);
  for (std::size_t i = 0; i < global.size(); ++i) {
    auto joined = shard0[i];
    joined.insert(joined.end(), shard1[i].begin(), shard1[i].end());
    EXPECT_EQ(joined, global[i]) << "global batch " << i;
  }
  // Same samples, same features, whichever rank serves them.
  single->start_epoch(0);
  rank1->start_epoch(0);
  const auto whole = single->next_batch()->at("features").to_vector();
  const auto half = rank1->next_batch()->at("features").to_vector();
  EXPECT_TRUE(std::equal(half.begin(), half.end(), whole.begin() + 8 * 8));
}

TEST_F(PluginSynthetic, EvalSeesEverySampleExactlyOnceInOrder) {
  const std::string params = "{num_eval_samples: 10}";
  auto rank0 = make(params, rig::Mode::eval, 4, 0, 2);
  auto rank1 = make(params, rig::Mode::eval, 4, 1, 2);
  EXPECT_EQ(rank0->epoch_size(), 10);
  const auto shard0 = epoch_indices(*rank0);
  const auto shard1 = epoch_indices(*rank1);
  EXPECT_EQ(shard0, (std::vector<std::vector<std::int64_t>>{{0, 1, 2, 3}, {8, 9}}));
  EXPECT_EQ(shard1, (std::vector<std::vector<std::int64_t>>{{4, 5, 6, 7}}));
  auto single = make(params, rig::Mode::infer, 3);
  auto all = flatten(epoch_indices(*single));
  EXPECT_EQ(all, (std::vector<std::int64_t>{0, 1, 2, 3, 4, 5, 6, 7, 8, 9}));
  rank0->start_epoch(3);  // never shuffled
  EXPECT_EQ(epoch_indices(*rank0), shard0);
}

TEST_F(PluginSynthetic, EvalSplitIsHeldOut) {
  auto train = make("{}", rig::Mode::train, 4);
  auto eval = make("{}", rig::Mode::eval, 4);
  train->seek(YAML::Load("{epoch: 0, offset: 0}"));
  EXPECT_EQ(eval->epoch_size(), 1024);
  // Different samples: the first eval features appear nowhere in the first train batch.
  const auto t = train->next_batch()->at("features").to_vector();
  const auto e = eval->next_batch()->at("features").to_vector();
  EXPECT_EQ(std::search(t.begin(), t.end(), e.begin(), e.begin() + 8), t.end());
}

TEST_F(PluginSynthetic, SeekResumesAtTheSameBatch) {
  const std::string params = "{num_samples: 96}";
  auto data = make(params, rig::Mode::train, 8, 1, 2);
  data->start_epoch(2);
  data->next_batch();
  data->next_batch();
  const YAML::Node position = YAML::Clone(data->position());
  EXPECT_EQ(position["epoch"].as<int>(), 2);
  EXPECT_EQ(position["offset"].as<int>(), 32);
  const auto expected = data->next_batch();

  auto resumed = make(params, rig::Mode::train, 8, 1, 2);
  resumed->seek(YAML::Load(YAML::Dump(position)));  // as a checkpoint stores it
  const auto got = resumed->next_batch();
  ASSERT_TRUE(got && expected);
  EXPECT_EQ(got->indices, expected->indices);
  EXPECT_EQ(got->at("features").to_vector(), expected->at("features").to_vector());
  EXPECT_EQ(epoch_indices(*resumed), epoch_indices(*data));

  EXPECT_THROW(resumed->seek(YAML::Load("{epoch: 0}")), rig::UserError);
  EXPECT_THROW(resumed->seek(YAML::Load("{epoch: 0, offset: 97}")), rig::UserError);
}

TEST_F(PluginSynthetic, DecodeOneLinePerSample) {
  auto data = make("{}", rig::Mode::infer, 3);
  auto batch = data->next_batch();
  const auto classes =
      data->decode(*batch, Tensor::from_vector(std::vector<std::int64_t>{2, 0, 3}, {3}));
  EXPECT_EQ(classes, (std::vector<std::string>{"2", "0", "3"}));
  const auto values = data->decode(
      *batch,
      Tensor::from_vector(std::vector<float>{0.5F, -1.0F, 2.0F, 3.25F, 0.0F, 1.0F}, {3, 2}));
  EXPECT_EQ(values, (std::vector<std::string>{"0.5 -1", "2 3.25", "0 1"}));
  EXPECT_THROW(data->decode(*batch, Tensor::zeros({2})), std::invalid_argument);
}

}  // namespace
