// The image_folder data layer on small JPEG folders the tests write: labels,
// decoding, crop geometry, sharding, resuming, prefetch order and bad input.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <set>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "jpeg_files.hpp"
#include "rig/error.hpp"
#include "test_plugins_util.hpp"
#include "user_error_of.hpp"

namespace {

namespace fs = std::filesystem;
using rig::Tensor;

constexpr float kMean[3] = {0.485F, 0.456F, 0.406F};
constexpr float kStd[3] = {0.229F, 0.224F, 0.225F};

// Pixel value v (0..255) of channel c after the default normalisation.
float normalised(double v, int c) {
  return static_cast<float>((v / 255.0 - kMean[c]) / kStd[c]);
}
// And back.
double pixel(float x, int c) {
  return (x * kStd[c] + kMean[c]) * 255.0;
}

// A noisy image: JPEG-compressible, but every crop looks different.
std::vector<std::uint8_t> noise(int width, int height, unsigned seed) {
  std::vector<std::uint8_t> p(static_cast<std::size_t>(width * height * 3));
  unsigned x = seed * 2654435761U + 1;
  for (std::size_t i = 0; i < p.size(); ++i) {
    x = x * 1664525U + 1013904223U;
    p[i] = static_cast<std::uint8_t>((x >> 24U) / 2 + 64 + (i / 3 % width));
  }
  return p;
}

class DataImageFolder : public ::testing::Test {
 protected:
  rig_test::LoadedPlugin plugin{"data_layer", "image_folder"};
  fs::path root;

  void SetUp() override {
    std::string pattern = (fs::temp_directory_path() / "rig-image-folder-XXXXXX").string();
    ASSERT_NE(mkdtemp(pattern.data()), nullptr);
    root = pattern;
  }
  void TearDown() override { fs::remove_all(root); }

  // Writes split/cls/name with the given pixels.
  fs::path write(const std::string& split, const std::string& cls, const std::string& name,
                 const std::vector<std::uint8_t>& pixels, int width, int height, int channels = 3,
                 int quality = 95) {
    fs::create_directories(root / split / cls);
    const fs::path path = root / split / cls / name;
    rig_test::write_bytes(path.string(),
                          rig_test::encode_jpeg(pixels, width, height, channels, quality));
    return path;
  }

  std::unique_ptr<rig::DataLayer> make(const std::string& params, rig::Mode mode,
                                       std::int64_t batch_size, int rank = 0, int world_size = 1) {
    // train_dir only when the test wrote one: when set, it must exist in every mode.
    std::string dirs = fmt::format("eval_dir: '{}'", (root / "val").string());
    if (fs::exists(root / "train"))
      dirs += fmt::format(", train_dir: '{}'", (root / "train").string());
    std::string all = params;
    all.insert(params.find('{') + 1, dirs + (params == "{}" ? "" : ", "));
    return plugin.data_layer(plugin.params(all), mode, batch_size, rank, world_size, 11);
  }

  // `count` noisy images of about 40x30 over classes c0..c2.
  void noisy_set(int count, const std::string& split = "train") {
    for (int i = 0; i < count; ++i) {
      write(split, fmt::format("c{}", i % 3), fmt::format("img{:02}.jpg", i),
            noise(40 + i % 5, 30 + i % 7, static_cast<unsigned>(i)), 40 + i % 5, 30 + i % 7, 3, 90);
    }
  }
};

std::vector<float> values(const Tensor& t) {
  const auto* p = t.data<float>();
  return {p, p + t.numel()};
}

std::vector<std::int64_t> labels(const rig::Batch& batch) {
  const auto* p = batch.at("labels").data<std::int64_t>();
  return {p, p + batch.num_objects};
}

std::vector<rig::Batch> epoch(rig::DataLayer& data) {
  std::vector<rig::Batch> batches;
  while (auto batch = data.next_batch()) batches.push_back(std::move(*batch));
  return batches;
}

// Sample r of a batch: its 3 x size x size floats.
std::vector<float> sample(const rig::Batch& batch, std::int64_t r) {
  const Tensor& images = batch.at("images");
  const auto per = images.numel() / images.size(0);
  const float* p = images.data<float>() + r * per;
  return {p, p + per};
}

TEST_F(DataImageFolder, LabelsAreSortedClassFolders) {
  // Folder names out of order on disk; each class has its own colour.
  const std::map<std::string, std::vector<std::uint8_t>> colours = {
      {"zebra", {250, 10, 10}}, {"ant", {10, 250, 10}}, {"moth", {10, 10, 250}}};
  int n = 0;
  for (const auto& [cls, colour] : colours) {
    for (int i = 0; i < 2 + n; ++i) {
      write("val", cls, fmt::format("{}.{}", i, i % 2 ? "JPEG" : "jpg"),
            rig_test::solid(20, 20, colour), 20, 20);
    }
    ++n;
  }
  fs::create_directories(root / "val" / ".hidden");                                  // not a class
  rig_test::write_bytes((root / "val" / "ant" / "notes.txt").string(), {'h', 'i'});  // not an image
  auto data = make("{image_size: 8, resize_size: 10}", rig::Mode::eval, 4);
  EXPECT_EQ(data->info()["num_classes"].as<int>(), 3);
  EXPECT_EQ(data->info()["num_samples"].as<int>(), 2 + 3 + 4);
  EXPECT_EQ(data->info()["channels"].as<int>(), 3);
  EXPECT_EQ(data->info()["height"].as<int>(), 8);
  EXPECT_EQ(data->info()["task"].as<std::string>(), "classification");
  EXPECT_EQ(data->epoch_size(), 9);
  const std::vector<std::string> sorted = {"ant", "moth", "zebra"};
  std::vector<std::int64_t> seen_labels;
  for (const auto& batch : epoch(*data)) {
    ASSERT_EQ(batch.at("labels").dtype(), rig::DType::i64);
    for (std::int64_t r = 0; r < batch.num_objects; ++r) {
      const auto label = batch.at("labels").data<std::int64_t>()[r];
      seen_labels.push_back(label);
      const auto& colour = colours.at(sorted[static_cast<std::size_t>(label)]);
      const auto s = sample(batch, r);
      for (int c = 0; c < 3; ++c)
        EXPECT_NEAR(pixel(s[static_cast<std::size_t>(c * 64)], c), colour[c], 4);
    }
    EXPECT_EQ(data->decode_targets(batch).size(), batch.indices.size());
  }
  // Eval order is file order: class by class.
  EXPECT_EQ(seen_labels, (std::vector<std::int64_t>{0, 0, 1, 1, 1, 2, 2, 2, 2}));
}

TEST_F(DataImageFolder, SolidColoursDecodeToTheirNormalisedValues) {
  write("val", "a", "rgb.jpg", rig_test::solid(64, 48, {200, 100, 50}), 64, 48);
  write("val", "b", "grey.jpg", rig_test::solid(40, 60, {120}), 40, 60, 1);
  // Large enough to be decoded at 1/8 of its size for a 28-pixel crop.
  write("val", "c", "large.jpg", rig_test::solid(1024, 768, {30, 160, 220}), 1024, 768);
  auto data = make("{image_size: 28, resize_size: 32}", rig::Mode::eval, 3);
  auto batch = data->next_batch();
  ASSERT_TRUE(batch);
  EXPECT_EQ(batch->at("images").shape(), (rig::Shape{3, 3, 28, 28}));
  EXPECT_EQ(batch->at("images").dtype(), rig::DType::f32);
  const std::vector<std::vector<double>> expected = {
      {200, 100, 50}, {120, 120, 120}, {30, 160, 220}};
  for (std::int64_t r = 0; r < 3; ++r) {
    const auto s = sample(*batch, r);
    for (int c = 0; c < 3; ++c) {
      for (int i = 0; i < 28 * 28; ++i) {
        // JPEG of a flat colour is off by a level or two.
        ASSERT_NEAR(
            s[static_cast<std::size_t>(c * 784 + i)],
            normalised(expected[static_cast<std::size_t>(r)][static_cast<std::size_t>(c)], c),
            2.5 / 255 / kStd[c])
            << "image " << r << " channel " << c << " pixel " << i;
      }
    }
  }
}

// Eval: shorter side to resize_size, centre crop; a gradient image shows where
// each output pixel was sampled from.
TEST_F(DataImageFolder, EvalCropGeometry) {
  auto gradient = [](int width, int height, double sx, double sy) {
    std::vector<std::uint8_t> p;
    for (int y = 0; y < height; ++y) {
      for (int x = 0; x < width; ++x) {
        p.push_back(static_cast<std::uint8_t>(std::lround(sx * x)));
        p.push_back(static_cast<std::uint8_t>(std::lround(sy * y)));
        p.push_back(128);
      }
    }
    return p;
  };
  // 80x40 at 3 levels per pixel in x, 5 in y; and 640x320 (decoded at 1/8).
  write("val", "a", "small.jpg", gradient(80, 40, 3.0, 5.0), 80, 40, 3, 100);
  write("val", "a", "wide.jpg", gradient(640, 320, 0.375, 0.625), 640, 320, 3, 100);
  // Shorter side 40 -> 20: 40x20, centre crop 16 starts at x = 12, y = 2. Output
  // pixel (ox, oy) samples source ((12 + ox + 0.5) * 2 - 0.5, (2 + oy + 0.5) * 2 - 0.5).
  auto data = make("{image_size: 16, resize_size: 20}", rig::Mode::eval, 2);
  auto batch = data->next_batch();
  ASSERT_TRUE(batch);
  for (std::int64_t r = 0; r < 2; ++r) {
    const double unit = r == 0 ? 1.0 : 8.0;  // source pixels per small-image pixel
    const auto s = sample(*batch, r);
    for (int oy = 0; oy < 16; ++oy) {
      for (int ox = 0; ox < 16; ++ox) {
        const double sx = ((12 + ox + 0.5) * 2 - 0.5) * unit + (unit - 1) / 2;
        const double sy = ((2 + oy + 0.5) * 2 - 0.5) * unit + (unit - 1) / 2;
        const auto at = static_cast<std::size_t>(oy * 16 + ox);
        ASSERT_NEAR(pixel(s[at], 0), 3.0 / unit * sx, 3.0) << r << " " << ox << "," << oy;
        ASSERT_NEAR(pixel(s[256 + at], 1), 5.0 / unit * sy, 3.0) << r << " " << ox << "," << oy;
      }
    }
  }
}

// Training crops with scale and ratio pinned to the whole image: each output
// is the resized image, or exactly its mirror image.
TEST_F(DataImageFolder, FlipMirrorsTheResizedImage) {
  for (int i = 0; i < 16; ++i) {
    write("train", "a", fmt::format("{:02}.jpg", i), noise(30, 20, 7), 30, 20);
  }
  auto plain =
      make("{image_size: 12, crop_scale: [1.0, 1.0], crop_ratio: [1.5, 1.5], random_flip: false}",
           rig::Mode::train, 16);
  auto flipping = make("{image_size: 12, crop_scale: [1.0, 1.0], crop_ratio: [1.5, 1.5]}",
                       rig::Mode::train, 16);
  const auto reference = sample(*plain->next_batch(), 0);
  auto mirror = reference;
  for (int c = 0; c < 3; ++c) {
    for (int y = 0; y < 12; ++y) {
      auto* row = mirror.data() + (c * 12 + y) * 12;
      std::reverse(row, row + 12);
    }
  }
  ASSERT_NE(mirror, reference);
  auto batch = flipping->next_batch();
  int flipped = 0;
  for (std::int64_t r = 0; r < 16; ++r) {
    const auto s = sample(*batch, r);
    ASSERT_TRUE(s == reference || s == mirror) << r;
    flipped += s == mirror;
  }
  EXPECT_GT(flipped, 0);
  EXPECT_LT(flipped, 16);
  // Another data seed, another draw.
  auto reseeded = make("{image_size: 12, crop_scale: [1.0, 1.0], crop_ratio: [1.5, 1.5], seed: 3}",
                       rig::Mode::train, 16);
  EXPECT_NE(values(reseeded->next_batch()->at("images")), values(batch->at("images")));
}

TEST_F(DataImageFolder, RandomCropsDependOnlyOnSeedEpochAndIndex) {
  noisy_set(17);
  auto one = make("{image_size: 16}", rig::Mode::train, 4);
  auto r0 = make("{image_size: 16}", rig::Mode::train, 2, 0, 2);
  auto r1 = make("{image_size: 16}", rig::Mode::train, 2, 1, 2);
  for (std::int64_t e = 0; e < 2; ++e) {
    one->start_epoch(e);
    r0->start_epoch(e);
    r1->start_epoch(e);
    const auto all = epoch(*one);
    const auto a = epoch(*r0);
    const auto b = epoch(*r1);
    ASSERT_EQ(all.size(), 4U);  // 17 samples: the last incomplete global batch is dropped
    ASSERT_EQ(a.size(), 4U);
    ASSERT_EQ(b.size(), 4U);
    for (std::size_t k = 0; k < all.size(); ++k) {
      std::vector<std::int64_t> joined = a[k].indices;
      joined.insert(joined.end(), b[k].indices.begin(), b[k].indices.end());
      EXPECT_EQ(joined, all[k].indices);
      for (std::int64_t r = 0; r < 4; ++r) {
        EXPECT_EQ(sample(r < 2 ? a[k] : b[k], r % 2), sample(all[k], r)) << "batch " << k;
      }
    }
  }
  // A sample's crop changes with the epoch.
  one->start_epoch(0);
  const auto first = one->next_batch();
  one->start_epoch(5);
  std::map<std::int64_t, std::vector<float>> later;
  while (auto batch = one->next_batch()) {
    for (std::int64_t r = 0; r < batch->num_objects; ++r)
      later[batch->indices[r]] = sample(*batch, r);
  }
  for (std::int64_t r = 0; r < first->num_objects; ++r) {
    const auto it = later.find(first->indices[r]);
    if (it != later.end()) {
      EXPECT_NE(it->second, sample(*first, r));
    }
  }
}

TEST_F(DataImageFolder, EvalSeesEverySampleOnceWithTwoRanks) {
  for (int i = 0; i < 11; ++i) {
    write("val", fmt::format("k{}", i % 4), fmt::format("{}.jpg", i), noise(24, 24, i), 24, 24);
  }
  auto one = make("{image_size: 8, resize_size: 12}", rig::Mode::eval, 6);
  std::map<std::int64_t, std::vector<float>> single;
  for (const auto& batch : epoch(*one)) {
    for (std::int64_t r = 0; r < batch.num_objects; ++r)
      single[batch.indices[r]] = sample(batch, r);
  }
  ASSERT_EQ(single.size(), 11U);
  std::multiset<std::int64_t> seen;
  for (int rank = 0; rank < 2; ++rank) {
    auto data = make("{image_size: 8, resize_size: 12}", rig::Mode::eval, 3, rank, 2);
    for (int pass = 0; pass < 2; ++pass) {  // and again after start_epoch
      data->start_epoch(0);
      for (const auto& batch : epoch(*data)) {
        for (std::int64_t r = 0; r < batch.num_objects; ++r) {
          if (pass == 0) seen.insert(batch.indices[r]);
          EXPECT_EQ(sample(batch, r), single.at(batch.indices[r]));
        }
      }
    }
  }
  std::multiset<std::int64_t> every;
  for (std::int64_t i = 0; i < 11; ++i) every.insert(i);
  EXPECT_EQ(seen, every);
}

TEST_F(DataImageFolder, ResumesMidEpochExactly) {
  noisy_set(20);
  auto data = make("{image_size: 12, prefetch_batches: 4}", rig::Mode::train, 3);
  data->start_epoch(1);
  for (int i = 0; i < 2; ++i) ASSERT_TRUE(data->next_batch());
  const YAML::Node position = data->position();
  // The position counts the batches handed out, not the ones prefetched.
  EXPECT_EQ(position["epoch"].as<int>(), 1);
  EXPECT_EQ(position["offset"].as<int>(), 6);
  const auto rest = epoch(*data);
  ASSERT_EQ(rest.size(), 4U);

  auto resumed = make("{image_size: 12, num_workers: 3, prefetch_batches: 1}", rig::Mode::train, 3);
  resumed->seek(position);
  const auto again = epoch(*resumed);
  ASSERT_EQ(again.size(), rest.size());
  for (std::size_t k = 0; k < rest.size(); ++k) {
    EXPECT_EQ(again[k].indices, rest[k].indices);
    EXPECT_EQ(values(again[k].at("images")), values(rest[k].at("images")));
    EXPECT_EQ(labels(again[k]), labels(rest[k]));
  }
  // Seeking back within the epoch after reading ahead works too.
  resumed->seek(position);
  EXPECT_EQ(resumed->next_batch()->indices, rest[0].indices);
  EXPECT_THROW(resumed->seek(YAML::Load("{epoch: 0, offset: 99}")), rig::UserError);
}

TEST_F(DataImageFolder, PrefetchingNeverChangesTheBatches) {
  noisy_set(24);
  auto serial = make("{image_size: 16, num_workers: 1, prefetch_batches: 1}", rig::Mode::train, 5);
  auto parallel =
      make("{image_size: 16, num_workers: 4, prefetch_batches: 3}", rig::Mode::train, 5);
  for (std::int64_t e = 0; e < 2; ++e) {
    serial->start_epoch(e);
    parallel->start_epoch(e);
    const auto a = epoch(*serial);
    const auto b = epoch(*parallel);
    ASSERT_EQ(a.size(), 4U);
    ASSERT_EQ(b.size(), a.size());
    for (std::size_t k = 0; k < a.size(); ++k) {
      EXPECT_EQ(a[k].indices, b[k].indices);
      EXPECT_EQ(values(a[k].at("images")), values(b[k].at("images")))
          << "epoch " << e << " batch " << k;
    }
  }
}

TEST_F(DataImageFolder, CorruptJpegIsAnErrorNamingItOrSkipped) {
  noisy_set(6, "val");
  rig_test::write_bytes((root / "val" / "c1" / "garbage.jpg").string(),
                        {0xFF, 0xD8, 0xFF, 0xE0, 'n', 'o', 't', ' ', 'a', ' ', 'j', 'p', 'e', 'g'});
  // A real JPEG cut off in the middle of its data.
  auto truncated = rig_test::encode_jpeg(noise(40, 30, 99), 40, 30, 3, 90);
  truncated.resize(truncated.size() / 2);
  rig_test::write_bytes((root / "val" / "c2" / "truncated.jpg").string(), truncated);

  auto strict = make("{image_size: 8, resize_size: 8}", rig::Mode::eval, 8);
  const std::string message = rig_test::user_error_of([&] { epoch(*strict); });
  EXPECT_NE(message.find("corrupt JPEG"), std::string::npos) << message;
  EXPECT_NE(message.find("garbage.jpg"), std::string::npos) << message;  // the first in the batch
  EXPECT_NE(message.find("skip_corrupt"), std::string::npos) << message;

  // Batches of 3 over 8 files, two of them corrupt: those two are left out
  // of their batches, every good image is handed out once.
  auto skipping = make("{image_size: 8, resize_size: 8, skip_corrupt: true}", rig::Mode::eval, 3);
  testing::internal::CaptureStderr();
  std::int64_t count = 0;
  std::set<std::int64_t> seen;
  std::int64_t short_batches = 0;
  for (const auto& batch : epoch(*skipping)) {
    EXPECT_EQ(batch.at("images").shape()[0], batch.num_objects);
    EXPECT_EQ(batch.at("labels").numel(), batch.num_objects);
    EXPECT_EQ(static_cast<std::int64_t>(batch.indices.size()), batch.num_objects);
    short_batches += batch.num_objects < 3 ? 1 : 0;
    for (std::int64_t r = 0; r < batch.num_objects; ++r) {
      const auto s = sample(batch, r);
      EXPECT_FALSE(std::all_of(s.begin(), s.end(), [](float v) { return v == 0.0F; }));
      seen.insert(batch.indices[static_cast<std::size_t>(r)]);
      ++count;
    }
  }
  const std::string log = testing::internal::GetCapturedStderr();
  EXPECT_EQ(count, 6);
  EXPECT_EQ(seen.size(), 6U);
  EXPECT_GE(short_batches, 1);
  EXPECT_NE(log.find("image_folder: skipped 2 corrupt images in epoch 0 of eval_dir: first "),
            std::string::npos)
      << log;
  EXPECT_NE(log.find("garbage.jpg"), std::string::npos) << log;
}

TEST_F(DataImageFolder, AJpegOfEndlessScansIsCorruptNotAHang) {
  // 37 KB claiming 16384 x 16384 pixels with 301 progressive scans (also in
  // tests/fuzz/corpus/jpeg): each scan passes over every block, which kept a
  // worker decoding for seconds per image; refused from its header now.
  noisy_set(6, "val");
  fs::copy_file(fs::path(RIG_SOURCE_DIR) / "tests/fuzz/corpus/jpeg/regression-300-scans.jpg",
                root / "val" / "c1" / "scans.jpg");
  auto strict = make("{image_size: 8, resize_size: 8}", rig::Mode::eval, 8);
  const auto start = std::chrono::steady_clock::now();
  const std::string message = rig_test::user_error_of([&] { epoch(*strict); });
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
  EXPECT_NE(message.find("corrupt JPEG '" + (root / "val" / "c1" / "scans.jpg").string() +
                         "': 301 scans of a 16384x16384 image"),
            std::string::npos)
      << message;
}

TEST_F(DataImageFolder, BadFoldersAreUserErrorsNamingThem) {
  noisy_set(3);
  fs::create_directories(root / "train" / "empty");
  std::string message = rig_test::user_error_of([&] { make("{}", rig::Mode::train, 2); });
  EXPECT_NE(message.find((root / "train" / "empty").string()), std::string::npos) << message;
  EXPECT_NE(message.find("no JPEG images"), std::string::npos) << message;
  fs::remove(root / "train" / "empty");

  // eval_dir missing, and a class eval_dir has that train_dir has not.
  message = rig_test::user_error_of([&] { make("{}", rig::Mode::eval, 2); });
  EXPECT_NE(message.find("eval_dir '" + (root / "val").string() + "' does not exist"),
            std::string::npos)
      << message;
  write("val", "c9", "x.jpg", noise(20, 20, 1), 20, 20);
  message = rig_test::user_error_of([&] { make("{}", rig::Mode::eval, 2); });
  EXPECT_NE(message.find((root / "val" / "c9").string()), std::string::npos) << message;
  fs::remove_all(root / "val" / "c9");
  write("val", "c1", "x.jpg", noise(20, 20, 1), 20, 20);
  auto eval = make("{}", rig::Mode::eval, 2);
  EXPECT_EQ(eval->info()["num_classes"].as<int>(), 3);  // the classes of train_dir
  EXPECT_EQ(eval->next_batch()->at("labels").data<std::int64_t>()[0], 1);

  message = rig_test::user_error_of(
      [&] { make("{image_size: 64, resize_size: 32}", rig::Mode::train, 2); });
  EXPECT_NE(message.find("resize_size"), std::string::npos) << message;
  message = rig_test::user_error_of([&] { make("{crop_scale: [0.9, 0.2]}", rig::Mode::train, 2); });
  EXPECT_NE(message.find("crop_scale"), std::string::npos) << message;
}

TEST_F(DataImageFolder, DecodePrintsClassIds) {
  noisy_set(3);
  auto data = make("{image_size: 8}", rig::Mode::train, 3);
  auto batch = data->next_batch();
  const auto lines =
      data->decode(*batch, Tensor::from_vector(std::vector<std::int64_t>{2, 0, 1}, {3}));
  EXPECT_EQ(lines, (std::vector<std::string>{"2", "0", "1"}));
  EXPECT_THROW(data->decode(*batch, Tensor::zeros({3, 4})), std::exception);
}

}  // namespace
