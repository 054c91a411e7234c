// The synthetic_images data layer: image-classification batches in the image
// layers' layout (images f32 [n, C, H, W] of normalised 8-bit pixels, labels
// i64 [n]), reproducible from the seeds and the sample index, sharded and
// resumable.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <set>
#include <string>
#include <vector>

#include "rig/error.hpp"
#include "test_plugins_util.hpp"

namespace {

using rig::Mode;

std::vector<float> floats(const rig::Tensor& t) {
  const auto* p = t.data<float>();
  return {p, p + t.numel()};
}

std::vector<std::int64_t> ids(const rig::Tensor& t) {
  const auto* p = t.data<std::int64_t>();
  return {p, p + t.numel()};
}

// Rows [begin, end) of a batch tensor's values.
template <class T>
std::vector<T> rows(const std::vector<T>& values, std::int64_t row_size, std::int64_t begin,
                    std::int64_t end) {
  return {values.begin() + begin * row_size, values.begin() + end * row_size};
}

class DataSyntheticImages : public ::testing::Test {
 protected:
  rig_test::LoadedPlugin plugin{"data_layer", "synthetic_images"};

  std::unique_ptr<rig::DataLayer> make(const std::string& params, Mode mode,
                                       std::int64_t batch_size, int rank = 0, int world_size = 1,
                                       std::uint64_t run_seed = 3) {
    return plugin.data_layer(plugin.params(params), mode, batch_size, rank, world_size, run_seed);
  }
};

TEST_F(DataSyntheticImages, InfoAndBatchAreThoseOfTheImageLayers) {
  auto data = make("{image_size: 8, num_classes: 10, num_samples: 20}", Mode::train, 4);
  const YAML::Node info = data->info();
  EXPECT_EQ(info["task"].as<std::string>(), "classification");
  EXPECT_EQ(info["num_classes"].as<int>(), 10);
  EXPECT_EQ(info["channels"].as<int>(), 3);
  EXPECT_EQ(info["height"].as<int>(), 8);
  EXPECT_EQ(info["width"].as<int>(), 8);
  EXPECT_EQ(info["num_samples"].as<int>(), 20);
  EXPECT_EQ(data->epoch_size(), 20);
  auto batch = data->next_batch();
  ASSERT_TRUE(batch);
  EXPECT_EQ(batch->tensors.size(), 2U);
  const rig::Tensor& images = batch->at("images");
  const rig::Tensor& labels = batch->at("labels");
  EXPECT_EQ(images.dtype(), rig::DType::f32);
  EXPECT_EQ(images.shape(), (rig::Shape{4, 3, 8, 8}));
  EXPECT_EQ(labels.dtype(), rig::DType::i64);
  EXPECT_EQ(labels.shape(), (rig::Shape{4}));
  EXPECT_EQ(batch->num_objects, 4);
  ASSERT_EQ(batch->indices.size(), 4U);
  for (const auto y : ids(labels)) {
    EXPECT_GE(y, 0);
    EXPECT_LT(y, 10);
  }
  EXPECT_EQ(data->decode_targets(*batch).size(), 4U);
  EXPECT_EQ(data->decode_targets(*batch)[0], std::to_string(ids(labels)[0]));
  // Train mode drops the last incomplete batch: 5 batches of 4, then the end.
  for (int b = 1; b < 5; ++b) ASSERT_TRUE(data->next_batch());
  EXPECT_FALSE(data->next_batch());
}

TEST_F(DataSyntheticImages, PixelsAreNormalisedUniformBytes) {
  // One 1-channel 64x64 image per sample, mean 0.25, std 0.5: every value is
  // (v / 255 - 0.25) / 0.5 for a byte v, and the bytes are uniform.
  auto data = make("{image_size: 64, channels: 1, mean: [0.25], std: [0.5], num_samples: 4}",
                   Mode::eval, 4);
  const auto x = floats(data->next_batch()->at("images"));
  ASSERT_EQ(x.size(), 4U * 64 * 64);
  std::vector<int> count(256, 0);
  double sum = 0;
  for (const float value : x) {
    const double v = (static_cast<double>(value) * 0.5 + 0.25) * 255.0;
    const double level = std::round(v);
    ASSERT_NEAR(v, level, 1e-3);
    ASSERT_GE(level, 0);
    ASSERT_LE(level, 255);
    ++count[static_cast<std::size_t>(level)];
    sum += v;
  }
  for (int v = 0; v < 256; ++v) EXPECT_GT(count[static_cast<std::size_t>(v)], 20) << v;
  EXPECT_NEAR(sum / static_cast<double>(x.size()), 127.5, 2.0);
  // A mean and std per channel: each channel has its own range.
  auto rgb = make("{image_size: 16, num_samples: 2}", Mode::eval, 2);  // ImageNet's
  const auto y = floats(rgb->next_batch()->at("images"));
  const double mean[] = {0.485, 0.456, 0.406};
  const double std[] = {0.229, 0.224, 0.225};
  for (std::size_t i = 0; i < y.size(); ++i) {
    const std::size_t c = (i / 256) % 3;
    EXPECT_GE(y[i], (0 - mean[c]) / std[c] - 1e-5);
    EXPECT_LE(y[i], (1 - mean[c]) / std[c] + 1e-5);
  }
}

TEST_F(DataSyntheticImages, SamplesDependOnTheSeedsAndIndexOnly) {
  const std::string params = "{image_size: 5, num_samples: 8}";
  const std::int64_t size = 3 * 5 * 5;
  auto a = make(params, Mode::eval, 4);
  auto b = make(params, Mode::eval, 4);
  auto seed = make("{image_size: 5, num_samples: 8, seed: 1}", Mode::eval, 4);
  auto run_seed = make(params, Mode::eval, 4, 0, 1, 4);
  const auto first = a->next_batch();
  const auto images = floats(first->at("images"));
  const auto labels = ids(first->at("labels"));
  const auto again = b->next_batch();
  EXPECT_EQ(floats(again->at("images")), images);
  EXPECT_EQ(ids(again->at("labels")), labels);
  EXPECT_NE(floats(seed->next_batch()->at("images")), images);
  EXPECT_NE(floats(run_seed->next_batch()->at("images")), images);
  EXPECT_NE(rows(images, size, 0, 1), rows(images, size, 1, 2));
  // Sample 2 is the same whichever batch, mode or epoch holds it.
  auto one = make(params, Mode::infer, 1);
  one->next_batch();
  one->next_batch();
  const auto alone = one->next_batch();
  EXPECT_EQ(alone->indices, std::vector<std::int64_t>{2});
  EXPECT_EQ(floats(alone->at("images")), rows(images, size, 2, 3));
  EXPECT_EQ(ids(alone->at("labels")), rows(labels, 1, 2, 3));
  auto train = make(params, Mode::train, 8);
  train->start_epoch(5);
  const auto shuffled = train->next_batch();
  const auto train_images = floats(shuffled->at("images"));
  for (std::int64_t r = 0; r < 8; ++r) {
    const std::int64_t i = shuffled->indices[static_cast<std::size_t>(r)];
    if (i >= 4) continue;
    EXPECT_EQ(rows(train_images, size, r, r + 1), rows(images, size, i, i + 1)) << i;
  }
}

TEST_F(DataSyntheticImages, LabelsCoverTheClasses) {
  auto data = make("{image_size: 1, num_classes: 7, num_samples: 200}", Mode::eval, 200);
  const auto labels = ids(data->next_batch()->at("labels"));
  const std::set<std::int64_t> seen(labels.begin(), labels.end());
  EXPECT_EQ(seen, (std::set<std::int64_t>{0, 1, 2, 3, 4, 5, 6}));
}

TEST_F(DataSyntheticImages, TwoRanksSplitTheGlobalBatchesOfOne) {
  const std::string params = "{image_size: 4, num_samples: 22}";
  const std::int64_t size = 3 * 4 * 4;
  auto single = make(params, Mode::train, 6);
  auto rank0 = make(params, Mode::train, 3, 0, 2);
  auto rank1 = make(params, Mode::train, 3, 1, 2);
  std::set<std::int64_t> seen;
  for (auto* data : {single.get(), rank0.get(), rank1.get()}) data->start_epoch(2);
  for (int step = 0; step < 3; ++step) {
    const auto whole = single->next_batch();
    const auto first = rank0->next_batch();
    const auto second = rank1->next_batch();
    ASSERT_TRUE(whole && first && second);
    std::vector<std::int64_t> indices = first->indices;
    indices.insert(indices.end(), second->indices.begin(), second->indices.end());
    EXPECT_EQ(indices, whole->indices);
    seen.insert(indices.begin(), indices.end());
    const auto images = floats(whole->at("images"));
    EXPECT_EQ(floats(first->at("images")), rows(images, size, 0, 3));
    EXPECT_EQ(floats(second->at("images")), rows(images, size, 3, 6));
    const auto labels = ids(whole->at("labels"));
    EXPECT_EQ(ids(first->at("labels")), rows(labels, 1, 0, 3));
    EXPECT_EQ(ids(second->at("labels")), rows(labels, 1, 3, 6));
  }
  EXPECT_EQ(seen.size(), 18U);  // 3 global batches of 6, all different samples
  EXPECT_FALSE(single->next_batch() || rank0->next_batch() || rank1->next_batch());
  // Eval keeps every sample once over the ranks, the last batches short.
  std::vector<std::int64_t> all;
  for (int rank = 0; rank < 2; ++rank) {
    auto data = make(params, Mode::eval, 4, rank, 2);
    const auto mine = rig_test::flatten(rig_test::epoch_indices(*data));
    all.insert(all.end(), mine.begin(), mine.end());
  }
  EXPECT_EQ(all.size(), 22U);
  EXPECT_EQ(std::set<std::int64_t>(all.begin(), all.end()).size(), 22U);
}

TEST_F(DataSyntheticImages, SeekToPositionResumesWithTheNextBatch) {
  const std::string params = "{image_size: 4, num_samples: 40}";
  auto data = make(params, Mode::train, 4);
  data->start_epoch(1);
  data->next_batch();
  data->next_batch();
  const YAML::Node position = YAML::Clone(data->position());
  EXPECT_EQ(position["epoch"].as<int>(), 1);
  EXPECT_EQ(position["offset"].as<int>(), 8);
  const auto next = data->next_batch();
  const auto rest = rig_test::epoch_indices(*data);
  auto resumed = make(params, Mode::train, 4);
  resumed->seek(position);
  const auto again = resumed->next_batch();
  EXPECT_EQ(again->indices, next->indices);
  EXPECT_EQ(floats(again->at("images")), floats(next->at("images")));
  EXPECT_EQ(ids(again->at("labels")), ids(next->at("labels")));
  EXPECT_EQ(rig_test::epoch_indices(*resumed), rest);
  EXPECT_EQ(YAML::Dump(resumed->position()), YAML::Dump(data->position()));
}

TEST_F(DataSyntheticImages, DecodePrintsClassIds) {
  auto data = make("{image_size: 2, num_samples: 3}", Mode::infer, 3);
  const auto batch = data->next_batch();
  const auto predictions = rig::Tensor::from_vector(std::vector<std::int64_t>{7, 0, 999}, {3});
  EXPECT_EQ(data->decode(*batch, predictions), (std::vector<std::string>{"7", "0", "999"}));
  EXPECT_THROW(data->decode(*batch, rig::Tensor::from_vector(std::vector<float>{1, 2, 3}, {3})),
               rig::RunError);
}

TEST_F(DataSyntheticImages, MeanAndStdOnePerChannelOrOneForAll) {
  const auto one =
      make("{image_size: 2, channels: 2, mean: [0.5], std: [0.25], num_samples: 1}", Mode::eval, 1);
  const auto two =
      make("{image_size: 2, channels: 2, mean: [0.5, 0.5], std: [0.25, 0.25], num_samples: 1}",
           Mode::eval, 1);
  EXPECT_EQ(floats(one->next_batch()->at("images")), floats(two->next_batch()->at("images")));
  try {
    make("{channels: 1}", Mode::train, 1);
    FAIL() << "3 ImageNet means for 1 channel were accepted";
  } catch (const rig::UserError& e) {
    EXPECT_EQ(std::string(e.what()),
              "synthetic_images: mean has 3 values but channels is 1; give one value for every "
              "channel or one per channel (the defaults are ImageNet's R, G, B)");
  }
  EXPECT_THROW(make("{channels: 3, std: [0.2, 0.2]}", Mode::train, 1), rig::UserError);
}

// Prefetching changes nothing: the same batches with and without, also when
// the layer is repositioned with a batch in flight.
TEST_F(DataSyntheticImages, PrefetchingGivesTheSameBatches) {
  const std::string params = "{image_size: 6, num_samples: 30, prefetch: ";
  auto ahead = make(params + "true}", Mode::train, 4);
  auto plain = make(params + "false}", Mode::train, 4);
  YAML::Node position;
  const auto same_next = [&] {
    const auto a = ahead->next_batch();
    const auto b = plain->next_batch();
    ASSERT_EQ(a.has_value(), b.has_value());
    if (!a) return;
    EXPECT_EQ(a->indices, b->indices);
    EXPECT_EQ(a->num_objects, b->num_objects);
    EXPECT_EQ(floats(a->at("images")), floats(b->at("images")));
    EXPECT_EQ(ids(a->at("labels")), ids(b->at("labels")));
    EXPECT_EQ(YAML::Dump(ahead->position()), YAML::Dump(plain->position()));
  };
  for (int b = 0; b < 3; ++b) same_next();
  position = YAML::Clone(ahead->position());
  for (int b = 0; b < 5; ++b) same_next();  // to the end of epoch 0 and past it
  for (auto* data : {ahead.get(), plain.get()}) data->start_epoch(1);
  same_next();
  same_next();
  for (auto* data : {ahead.get(), plain.get()}) data->seek(position);  // a batch is in flight
  for (int b = 0; b < 5; ++b) same_next();
  for (auto* data : {ahead.get(), plain.get()}) data->start_epoch(2);
  same_next();  // destroyed with a batch in flight
}

// A 224 x 224 RGB batch, timed without prefetching: the ms per 256 images
// (RIG_BENCH_BATCH sets the batch, 16 by default, to keep the test short).
TEST_F(DataSyntheticImages, ImageNetSizedBatch) {
  const char* env = std::getenv("RIG_BENCH_BATCH");
  const std::int64_t batch_size = env ? std::atoll(env) : 16;
  auto data = make("{num_samples: 100000, prefetch: false}", Mode::train, batch_size);
  data->next_batch();  // warm-up
  const auto start = std::chrono::steady_clock::now();
  constexpr int kBatches = 3;
  for (int b = 0; b < kBatches; ++b) {
    const auto batch = data->next_batch();
    ASSERT_EQ(batch->at("images").shape(), (rig::Shape{batch_size, 3, 224, 224}));
  }
  const double ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count() /
      kBatches;
  std::printf("synthetic_images: %.2f ms per batch of %lld at 224x224 (%.1f ms per 256 images)\n",
              ms, static_cast<long long>(batch_size), ms * 256.0 / static_cast<double>(batch_size));
}

}  // namespace
