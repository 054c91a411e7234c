// The synthetic_text data layer: fixed-length random rows ending in EOS, ids
// in [4, vocab_size), reproducible from the seed, sharded and resumable.
#include <gtest/gtest.h>

#include <set>
#include <string>
#include <vector>

#include "test_plugins_util.hpp"

namespace {

using rig::Mode;

std::vector<std::int64_t> ids(const rig::Tensor& t) {
  const auto* p = t.data<std::int64_t>();
  return {p, p + t.numel()};
}

class DataSyntheticText : public ::testing::Test {
 protected:
  rig_test::LoadedPlugin plugin{"data_layer", "synthetic_text"};

  std::unique_ptr<rig::DataLayer> make(const std::string& params, Mode mode,
                                       std::int64_t batch_size, int rank = 0, int world_size = 1) {
    return plugin.data_layer(plugin.params(params), mode, batch_size, rank, world_size, 3);
  }
};

TEST_F(DataSyntheticText, FixedLengthRowsOfValidIds) {
  auto data =
      make("{vocab_size: 9, source_length: 5, target_length: 7, num_samples: 10}", Mode::train, 4);
  const YAML::Node info = data->info();
  EXPECT_EQ(info["task"].as<std::string>(), "text2text");
  EXPECT_EQ(info["src_vocab_size"].as<int>(), 9);
  EXPECT_EQ(info["tgt_vocab_size"].as<int>(), 9);
  EXPECT_EQ(info["eos_id"].as<int>(), 1);
  EXPECT_EQ(data->epoch_size(), 10);
  auto batch = data->next_batch();
  ASSERT_TRUE(batch);
  EXPECT_EQ(batch->at("source_ids").shape(), (rig::Shape{4, 5}));
  EXPECT_EQ(batch->at("target_ids").shape(), (rig::Shape{4, 7}));
  EXPECT_EQ(ids(batch->at("source_lengths")), (std::vector<std::int64_t>{5, 5, 5, 5}));
  EXPECT_EQ(ids(batch->at("target_lengths")), (std::vector<std::int64_t>{7, 7, 7, 7}));
  EXPECT_EQ(batch->num_objects, 28);  // target tokens
  std::set<std::int64_t> seen;
  for (const auto& name : {"source_ids", "target_ids"}) {
    const auto& t = batch->at(name);
    const auto v = ids(t);
    for (std::int64_t r = 0; r < t.size(0); ++r) {
      for (std::int64_t c = 0; c < t.size(1); ++c) {
        const auto id = v[static_cast<std::size_t>(r * t.size(1) + c)];
        if (c + 1 == t.size(1)) {
          EXPECT_EQ(id, 1);
        } else {
          EXPECT_GE(id, 4);
          EXPECT_LT(id, 9);
          seen.insert(id);
        }
      }
    }
  }
  EXPECT_EQ(seen.size(), 5U);  // 40 draws from 5 ids hit each one
  EXPECT_EQ(make("{num_samples: 10}", Mode::infer, 4)->next_batch()->num_objects, 4 * 64);
}

TEST_F(DataSyntheticText, SamplesDependOnTheSeedAndIndexOnly) {
  auto a = make("{num_samples: 8}", Mode::eval, 4);
  auto b = make("{num_samples: 8}", Mode::eval, 4);
  auto c = make("{num_samples: 8, seed: 1}", Mode::eval, 4);
  const auto first = a->next_batch();
  EXPECT_EQ(ids(first->at("target_ids")), ids(b->next_batch()->at("target_ids")));
  EXPECT_NE(ids(first->at("target_ids")), ids(c->next_batch()->at("target_ids")));
  // Pair 2 is the same whichever batch holds it.
  auto two = make("{num_samples: 8}", Mode::eval, 1);
  two->next_batch();
  two->next_batch();
  const auto alone = ids(two->next_batch()->at("source_ids"));
  const auto all = ids(first->at("source_ids"));
  EXPECT_EQ(alone, std::vector<std::int64_t>(all.begin() + 2 * 64, all.begin() + 3 * 64));
}

TEST_F(DataSyntheticText, ShardsAndResumes) {
  std::set<std::int64_t> seen;
  std::size_t count = 0;
  for (int rank = 0; rank < 2; ++rank) {
    auto data = make("{num_samples: 21}", Mode::eval, 4, rank, 2);
    const auto mine = rig_test::flatten(rig_test::epoch_indices(*data));
    seen.insert(mine.begin(), mine.end());
    count += mine.size();
  }
  EXPECT_EQ(seen.size(), 21U);
  EXPECT_EQ(count, 21U);
  auto data = make("{num_samples: 40}", Mode::train, 4);
  data->start_epoch(1);
  data->next_batch();
  const YAML::Node position = YAML::Clone(data->position());
  const auto rest = rig_test::epoch_indices(*data);
  auto resumed = make("{num_samples: 40}", Mode::train, 4);
  resumed->seek(position);
  EXPECT_EQ(rig_test::epoch_indices(*resumed), rest);
}

TEST_F(DataSyntheticText, DecodePrintsIdsUpToEos) {
  auto data = make("{vocab_size: 20, target_length: 3, num_samples: 2}", Mode::eval, 2);
  auto batch = data->next_batch();
  const auto predictions =
      rig::Tensor::from_vector(std::vector<std::int64_t>{2, 7, 19, 1, 5, 0, 9, 0, 0, 0}, {2, 5});
  EXPECT_EQ(data->decode(*batch, predictions), (std::vector<std::string>{"7 19", "9"}));
  const auto targets = data->decode_targets(*batch);
  const auto t = ids(batch->at("target_ids"));
  ASSERT_EQ(targets.size(), 2U);
  EXPECT_EQ(targets[0], std::to_string(t[0]) + " " + std::to_string(t[1]));
}

}  // namespace
