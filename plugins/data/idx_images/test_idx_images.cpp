// The idx_images data layer against small IDX files written here (plain and
// gzipped): pixels, labels, normalisation, augmentation, sharding, resuming
// and every bad-input case.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <optional>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include <unistd.h>

#include <fmt/format.h>

#include "rig/error.hpp"
#include "test_plugins_util.hpp"
#include "test_tensor_util.hpp"
#include "user_error_of.hpp"

namespace {

namespace fs = std::filesystem;
using rig::Tensor;

constexpr float kMean = 0.25F;
constexpr float kStd = 0.5F;

// Pixel (y, x) of image i of a set, and its label.
std::uint8_t pixel(std::int64_t i, std::int64_t y, std::int64_t x) {
  return static_cast<std::uint8_t>((i * 37 + y * 11 + x * 3) % 256);
}
std::uint8_t label(std::int64_t i) {
  return static_cast<std::uint8_t>((i * 7) % 10);
}

void put32(std::vector<std::uint8_t>& out, std::uint32_t v) {
  for (int shift = 24; shift >= 0; shift -= 8) out.push_back(static_cast<std::uint8_t>(v >> shift));
}

std::vector<std::uint8_t> idx_images(std::int64_t n, std::int64_t rows, std::int64_t cols,
                                     std::uint32_t magic = 0x803) {
  std::vector<std::uint8_t> out;
  put32(out, magic);
  put32(out, static_cast<std::uint32_t>(n));
  put32(out, static_cast<std::uint32_t>(rows));
  put32(out, static_cast<std::uint32_t>(cols));
  for (std::int64_t i = 0; i < n; ++i)
    for (std::int64_t y = 0; y < rows; ++y)
      for (std::int64_t x = 0; x < cols; ++x) out.push_back(pixel(i, y, x));
  return out;
}

std::vector<std::uint8_t> idx_labels(std::int64_t n) {
  std::vector<std::uint8_t> out;
  put32(out, 0x801);
  put32(out, static_cast<std::uint32_t>(n));
  for (std::int64_t i = 0; i < n; ++i) out.push_back(label(i));
  return out;
}

// The normalised value of a raw pixel.
float normalised(std::uint8_t v) {
  return static_cast<float>((v / 255.0 - kMean) / kStd);
}

using rig_test::epoch_indices;
using rig_test::flatten;

class IdxImages : public ::testing::Test {
 protected:
  rig_test::LoadedPlugin plugin{"data_layer", "idx_images"};
  fs::path dir;

  void SetUp() override {
    const auto* test = ::testing::UnitTest::GetInstance()->current_test_info();
    dir = fs::temp_directory_path() / fmt::format("rig-idx-{}-{}", ::getpid(), test->name());
    fs::remove_all(dir);
    fs::create_directories(dir);
    // train: 24 images of 6 x 5; test: 10 images of 6 x 5; both also gzipped.
    write("train-images", idx_images(24, 6, 5));
    write("train-labels", idx_labels(24));
    write("test-images", idx_images(10, 6, 5));
    write("test-labels", idx_labels(10));
    for (const char* name : {"train-images", "train-labels", "test-images", "test-labels"}) {
      fs::copy_file(dir / name, dir / (std::string(name) + ".copy"));
      ASSERT_EQ(std::system(fmt::format("gzip -n -f '{}'", (dir / name).string()).c_str()), 0);
      fs::rename(dir / (std::string(name) + ".copy"), dir / name);
    }
  }
  void TearDown() override { fs::remove_all(dir); }

  void write(const std::string& name, const std::vector<std::uint8_t>& bytes) const {
    std::ofstream out(dir / name, std::ios::binary);
    out.write(reinterpret_cast<const char*>(bytes.data()),
              static_cast<std::streamsize>(bytes.size()));
  }
  std::string path(const std::string& name) const { return (dir / name).string(); }

  // Params naming this test's files (gzipped ones with gz = true), then `extra`.
  std::string files(bool gz, const std::string& extra = "") const {
    const std::string ext = gz ? ".gz" : "";
    return fmt::format(
        "{{train_images: '{}', train_labels: '{}', test_images: '{}', test_labels: '{}', "
        "mean: {}, std: {}{}{}}}",
        path("train-images" + ext), path("train-labels" + ext), path("test-images" + ext),
        path("test-labels" + ext), kMean, kStd, extra.empty() ? "" : ", ", extra);
  }

  std::unique_ptr<rig::DataLayer> make(const std::string& params, rig::Mode mode,
                                       std::int64_t batch_size, int rank = 0, int world_size = 1) {
    return plugin.data_layer(plugin.params(params), mode, batch_size, rank, world_size, 3);
  }
};

TEST_F(IdxImages, InfoPixelsLabelsAndNormalisation) {
  auto data = make(files(false), rig::Mode::train, 4);
  const YAML::Node info = data->info();
  EXPECT_EQ(info["task"].as<std::string>(), "classification");
  EXPECT_EQ(info["num_classes"].as<int>(), 10);
  EXPECT_EQ(info["channels"].as<int>(), 1);
  EXPECT_EQ(info["height"].as<int>(), 6);
  EXPECT_EQ(info["width"].as<int>(), 5);
  EXPECT_EQ(info["num_samples"].as<int>(), 24);
  EXPECT_EQ(data->epoch_size(), 24);
  auto batch = data->next_batch();
  ASSERT_TRUE(batch);
  EXPECT_EQ(batch->num_objects, 4);
  const Tensor& images = batch->at("images");
  EXPECT_EQ(images.shape(), (rig::Shape{4, 1, 6, 5}));
  EXPECT_EQ(images.dtype(), rig::DType::f32);
  EXPECT_EQ(batch->at("labels").dtype(), rig::DType::i64);
  const float* x = images.data<float>();
  for (std::int64_t r = 0; r < 4; ++r) {
    const auto s = batch->indices[r];
    EXPECT_EQ(batch->at("labels").data<std::int64_t>()[r], label(s));
    for (std::int64_t y = 0; y < 6; ++y)
      for (std::int64_t c = 0; c < 5; ++c)
        EXPECT_FLOAT_EQ(x[(r * 6 + y) * 5 + c], normalised(pixel(s, y, c))) << s << " " << y;
  }
  // Eval reads the test files.
  auto eval = make(files(false), rig::Mode::eval, 4);
  EXPECT_EQ(eval->epoch_size(), 10);
  EXPECT_EQ(eval->info()["num_samples"].as<int>(), 10);
}

TEST_F(IdxImages, GzippedAndPlainFilesGiveTheSameBatches) {
  for (const auto mode : {rig::Mode::train, rig::Mode::eval}) {
    auto plain = make(files(false, "pad: 2, flip: true"), mode, 5);
    auto gz = make(files(true, "pad: 2, flip: true"), mode, 5);
    while (auto a = plain->next_batch()) {
      auto b = gz->next_batch();
      ASSERT_TRUE(b);
      EXPECT_EQ(a->indices, b->indices);
      EXPECT_EQ(a->at("images").to_vector(), b->at("images").to_vector());
      EXPECT_EQ(a->at("labels").data<std::int64_t>()[0], b->at("labels").data<std::int64_t>()[0]);
    }
    EXPECT_FALSE(gz->next_batch());
  }
}

// The shift (dy, dx in [-pad, pad]) and mirroring that turn sample s into
// `image` (H x W floats), or nullopt when none does.
struct Crop {
  std::int64_t dy, dx;
  bool flip;
  bool operator<(const Crop& o) const {
    return std::tie(dy, dx, flip) < std::tie(o.dy, o.dx, o.flip);
  }
};
std::optional<Crop> find_crop(const float* image, std::int64_t s, std::int64_t h, std::int64_t w,
                              std::int64_t pad) {
  for (std::int64_t dy = -pad; dy <= pad; ++dy) {
    for (std::int64_t dx = -pad; dx <= pad; ++dx) {
      for (const bool flip : {false, true}) {
        bool same = true;
        for (std::int64_t y = 0; y < h && same; ++y) {
          for (std::int64_t x = 0; x < w && same; ++x) {
            const std::int64_t sy = y + dy;
            const std::int64_t sx = (flip ? w - 1 - x : x) + dx;
            const bool inside = sy >= 0 && sy < h && sx >= 0 && sx < w;
            same = image[y * w + x] == normalised(inside ? pixel(s, sy, sx) : 0);
          }
        }
        if (same) return Crop{dy, dx, flip};
      }
    }
  }
  return std::nullopt;
}

TEST_F(IdxImages, TrainImagesAreCropsOfThePaddedImageAndFlips) {
  auto data = make(files(true, "pad: 2, flip: true"), rig::Mode::train, 24);
  std::set<Crop> seen;
  std::set<bool> flips;
  for (std::int64_t epoch = 0; epoch < 3; ++epoch) {
    data->start_epoch(epoch);
    auto batch = data->next_batch();
    ASSERT_TRUE(batch);
    const float* x = batch->at("images").data<float>();
    for (std::int64_t r = 0; r < 24; ++r) {
      const auto crop = find_crop(x + r * 30, batch->indices[r], 6, 5, 2);
      ASSERT_TRUE(crop) << "sample " << batch->indices[r] << " is no crop of its padded image";
      seen.insert(*crop);
      flips.insert(crop->flip);
    }
  }
  EXPECT_GT(seen.size(), 20U);  // of 50 possible, over 72 draws
  EXPECT_EQ(flips.size(), 2U);

  // Eval never augments: the images are the normalised pixels as they are.
  auto eval = make(files(true, "pad: 2, flip: true"), rig::Mode::eval, 10);
  auto batch = eval->next_batch();
  for (std::int64_t r = 0; r < 10; ++r) {
    const auto crop = find_crop(batch->at("images").data<float>() + r * 30, r, 6, 5, 0);
    ASSERT_TRUE(crop);
    EXPECT_FALSE(crop->flip);
  }
}

TEST_F(IdxImages, AugmentationDependsOnSeedEpochAndIndexNotOnRanks) {
  const std::string params = files(false, "pad: 2, flip: true");
  auto single = make(params, rig::Mode::train, 8);
  auto rank0 = make(params, rig::Mode::train, 4, 0, 2);
  auto rank1 = make(params, rig::Mode::train, 4, 1, 2);
  for (std::int64_t epoch : {0, 1}) {
    single->start_epoch(epoch);
    rank0->start_epoch(epoch);
    rank1->start_epoch(epoch);
    int batches = 0;
    while (auto whole = single->next_batch()) {
      auto a = rank0->next_batch();
      auto b = rank1->next_batch();
      ASSERT_TRUE(a && b);
      auto indices = a->indices;
      indices.insert(indices.end(), b->indices.begin(), b->indices.end());
      EXPECT_EQ(indices, whole->indices);
      auto images = a->at("images").to_vector();
      const auto second = b->at("images").to_vector();
      images.insert(images.end(), second.begin(), second.end());
      EXPECT_EQ(images, whole->at("images").to_vector()) << "epoch " << epoch;
      ++batches;
    }
    EXPECT_EQ(batches, 3);
    EXPECT_FALSE(rank0->next_batch());
  }
  // Another epoch or another seed draws other crops for the same sample.
  auto crops_of = [&](const std::string& p, std::int64_t epoch) {
    auto data = make(p, rig::Mode::train, 24);
    data->start_epoch(epoch);
    auto batch = data->next_batch();
    std::vector<std::pair<std::int64_t, Crop>> crops;
    for (std::int64_t r = 0; r < 24; ++r) {
      crops.emplace_back(batch->indices[r], *find_crop(batch->at("images").data<float>() + r * 30,
                                                       batch->indices[r], 6, 5, 2));
    }
    std::sort(crops.begin(), crops.end(),
              [](const auto& a, const auto& b) { return a.first < b.first; });
    std::vector<Crop> by_index;
    for (const auto& [s, c] : crops) by_index.push_back(c);
    return by_index;
  };
  auto same = [](const std::vector<Crop>& a, const std::vector<Crop>& b) {
    return std::equal(a.begin(), a.end(), b.begin(), b.end(),
                      [](const Crop& x, const Crop& y) { return !(x < y) && !(y < x); });
  };
  const auto e0 = crops_of(params, 0);
  EXPECT_TRUE(same(e0, crops_of(params, 0)));
  EXPECT_FALSE(same(e0, crops_of(params, 1)));
  EXPECT_FALSE(same(e0, crops_of(files(false, "pad: 2, flip: true, seed: 9"), 0)));
}

TEST_F(IdxImages, EvalSeesEverySampleExactlyOnce) {
  std::vector<std::int64_t> all(10);
  std::iota(all.begin(), all.end(), 0);
  for (const std::int64_t batch : {4, 3, 10, 16}) {
    for (const auto mode : {rig::Mode::eval, rig::Mode::infer}) {
      auto single = make(files(true), mode, batch);
      EXPECT_EQ(flatten(epoch_indices(*single)), all) << "batch " << batch;
      auto rank0 = make(files(true), mode, batch, 0, 2);
      auto rank1 = make(files(true), mode, batch, 1, 2);
      auto both = flatten(epoch_indices(*rank0));
      const auto second = flatten(epoch_indices(*rank1));
      both.insert(both.end(), second.begin(), second.end());
      std::sort(both.begin(), both.end());
      EXPECT_EQ(both, all) << "batch " << batch << " on 2 ranks";
    }
  }
  // And the labels that come with them are the file's.
  auto data = make(files(false), rig::Mode::eval, 3);
  while (auto batch = data->next_batch()) {
    for (std::size_t r = 0; r < batch->indices.size(); ++r) {
      EXPECT_EQ(batch->at("labels").data<std::int64_t>()[r], label(batch->indices[r]));
    }
  }
}

TEST_F(IdxImages, SeekResumesMidEpochWithTheSameBatches) {
  const std::string params = files(true, "pad: 1, flip: true");
  auto data = make(params, rig::Mode::train, 3, 1, 2);
  data->start_epoch(2);
  data->next_batch();
  data->next_batch();
  const YAML::Node position = YAML::Clone(data->position());
  EXPECT_EQ(position["epoch"].as<int>(), 2);
  EXPECT_EQ(position["offset"].as<int>(), 12);
  auto resumed = make(params, rig::Mode::train, 3, 1, 2);
  resumed->seek(YAML::Load(YAML::Dump(position)));
  int compared = 0;
  while (auto expected = data->next_batch()) {
    auto got = resumed->next_batch();
    ASSERT_TRUE(got);
    EXPECT_EQ(got->indices, expected->indices);
    EXPECT_EQ(got->at("images").to_vector(), expected->at("images").to_vector());
    ++compared;
  }
  EXPECT_EQ(compared, 2);
  EXPECT_FALSE(resumed->next_batch());
}

TEST_F(IdxImages, LimitKeepsTheFirstSamples) {
  auto data = make(files(true, "limit: 7"), rig::Mode::eval, 100);
  EXPECT_EQ(data->epoch_size(), 7);
  EXPECT_EQ(data->next_batch()->indices, (std::vector<std::int64_t>{0, 1, 2, 3, 4, 5, 6}));
  EXPECT_EQ(make(files(true, "limit: 50"), rig::Mode::train, 4)->epoch_size(), 24);
}

TEST_F(IdxImages, DecodeTargetsAndTypedPixels) {
  auto data = make(files(false), rig::Mode::infer, 3);
  auto batch = data->next_batch();
  EXPECT_EQ(data->decode(*batch, Tensor::from_vector(std::vector<std::int64_t>{4, 0, 9}, {3})),
            (std::vector<std::string>{"4", "0", "9"}));
  EXPECT_EQ(data->decode_targets(*batch), (std::vector<std::string>{"0", "7", "4"}));
  EXPECT_THROW(data->decode(*batch, Tensor::zeros({3, 10})), std::invalid_argument);

  EXPECT_EQ(data->encode_lines({}).num_objects, 0);  // the interactive_infer probe
  std::vector<std::string> values;
  for (int i = 0; i < 30; ++i) values.push_back(std::to_string(i * 8));
  const std::string spaces = fmt::format("{}", fmt::join(values, " "));
  const std::string commas = fmt::format("{}", fmt::join(values, ", "));
  const rig::Batch typed = data->encode_lines({spaces, commas});
  EXPECT_EQ(typed.at("images").shape(), (rig::Shape{2, 1, 6, 5}));
  const float* x = typed.at("images").data<float>();
  for (int i = 0; i < 30; ++i) {
    EXPECT_FLOAT_EQ(x[i], normalised(static_cast<std::uint8_t>(i * 8)));
    EXPECT_FLOAT_EQ(x[30 + i], x[i]);
  }
  EXPECT_TRUE(data->decode_targets(typed).empty());
  EXPECT_TRUE(rig_test::contains(rig_test::user_error_of([&] { data->encode_lines({"1 2 3"}); }),
                                 "expected 30 pixel values (0..255, 1 channel(s) of 6x5)"));
  EXPECT_TRUE(rig_test::contains(
      rig_test::user_error_of([&] { data->encode_lines({spaces + " 7"}); }), "got more"));
  values[4] = "256";
  EXPECT_TRUE(rig_test::contains(rig_test::user_error_of([&] {
                                   data->encode_lines({fmt::format("{}", fmt::join(values, " "))});
                                 }),
                                 "'256' is not a pixel value"));
}

TEST_F(IdxImages, BadFilesAreUserErrorsNamingTheFile) {
  auto error = [&](const std::string& params, rig::Mode mode = rig::Mode::train) {
    return rig_test::user_error_of([&] { make(params, mode, 4); });
  };
  const auto train_labels = path("train-labels");
  // Missing file: the key, the path and where the default comes from.
  auto message = error("{train_images: /nonexistent/images.gz}");
  EXPECT_TRUE(rig_test::contains(
      message, "idx_images: train_images: file /nonexistent/images.gz not found"));
  EXPECT_TRUE(rig_test::contains(message, "apt-get install dataset-fashion-mnist"));
  EXPECT_TRUE(
      rig_test::contains(error(files(false, "test_labels: /nonexistent/l"), rig::Mode::eval),
                         "test_labels: file /nonexistent/l not found"));

  // Wrong magic numbers: images and labels swapped, or another file entirely.
  message = error(fmt::format("{{train_images: '{}', train_labels: '{}'}}", train_labels,
                              path("train-images")));
  EXPECT_TRUE(rig_test::contains(message, "train_images " + train_labels +
                                              ": wrong magic number 0x00000801 (that of an IDX "
                                              "label file); expected 0x00000803"));
  write("bad-magic", idx_images(24, 6, 5, 0x0C03));
  EXPECT_TRUE(
      rig_test::contains(error(files(false, fmt::format("train_images: '{}'", path("bad-magic")))),
                         "train_images " + path("bad-magic") +
                             ": wrong magic number 0x00000C03; expected 0x00000803"));

  // Image and label files of different lengths.
  write("labels-20", idx_labels(20));
  EXPECT_TRUE(rig_test::contains(
      error(files(false, fmt::format("train_labels: '{}'", path("labels-20")))),
      fmt::format("train_images {} holds 24 images but train_labels {} holds 20 labels",
                  path("train-images"), path("labels-20"))));

  // Truncated: plain, gzipped (the gzip stream cut), a header alone, trailing bytes.
  auto cut = idx_images(24, 6, 5);
  cut.resize(cut.size() - 7);
  write("cut", cut);
  EXPECT_TRUE(rig_test::contains(
      error(files(false, fmt::format("train_images: '{}'", path("cut")))),
      "train_images " + path("cut") + ": truncated: its header says 24 x 30 bytes but only 713"));
  std::ifstream gz_in(dir / "train-images.gz", std::ios::binary);
  std::vector<char> gz((std::istreambuf_iterator<char>(gz_in)), std::istreambuf_iterator<char>());
  gz.resize(gz.size() / 2);
  write("cut.gz", std::vector<std::uint8_t>(gz.begin(), gz.end()));
  EXPECT_TRUE(rig_test::contains(
      error(files(false, fmt::format("train_images: '{}'", path("cut.gz")))),
      "train_images " + path("cut.gz") + ": the gzip stream ends early (a truncated .gz file)"));
  write("header-only", std::vector<std::uint8_t>{0, 0, 8, 3, 0, 0});
  EXPECT_TRUE(rig_test::contains(
      error(files(false, fmt::format("train_images: '{}'", path("header-only")))),
      "truncated: 6 bytes, shorter than its 16-byte header"));
  auto longer = idx_labels(24);
  longer.push_back(1);
  write("longer", longer);
  EXPECT_TRUE(rig_test::contains(
      error(files(false, fmt::format("train_labels: '{}'", path("longer")))),
      "train_labels " + path("longer") + ": 1 bytes follow the 24 x 1 bytes its header announces"));
  // A small header, then 64 MiB of zeros as a 64 KiB .gz (a gzip bomb; also in
  // tests/fuzz/corpus/idx_images): refused after the bytes its header announces, without
  // decompressing, or holding, the rest.
  auto bomb = idx_labels(24);
  bomb.resize(bomb.size() + (64U << 20U));
  write("bomb", bomb);
  ASSERT_EQ(std::system(fmt::format("gzip -n -f '{}'", path("bomb")).c_str()), 0);
  ASSERT_LT(fs::file_size(dir / "bomb.gz"), 1U << 20U);
  EXPECT_TRUE(rig_test::contains(
      error(files(false, fmt::format("train_labels: '{}'", path("bomb.gz")))),
      "train_labels " + path("bomb.gz") +
          ": more bytes follow the 24 x 1 bytes its header announces (reading stopped there)"));

  // A label outside num_classes: the file and the record.
  EXPECT_TRUE(
      rig_test::contains(error(files(false, "num_classes: 5")),
                         "train_labels " + train_labels +
                             ": record 1 has label 7, outside the 5 classes (labels 0..4)"));
}

TEST_F(IdxImages, BatchAssemblyIsFast) {
  // 128 images of 28 x 28 with pad 2 and flip: well under a millisecond each.
  write("big-images", idx_images(512, 28, 28));
  write("big-labels", idx_labels(512));
  auto data = make(fmt::format("{{train_images: '{}', train_labels: '{}', pad: 2, flip: true}}",
                               path("big-images"), path("big-labels")),
                   rig::Mode::train, 128);
  const auto start = std::chrono::steady_clock::now();
  int batches = 0;
  for (int epoch = 0; epoch < 25; ++epoch) {
    data->start_epoch(epoch);
    while (data->next_batch()) ++batches;
  }
  const double ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count() /
      batches;
  std::printf("idx_images: %.3f ms per batch of 128 28x28 images (pad 2, flip)\n", ms);
  EXPECT_EQ(batches, 100);
  EXPECT_LT(ms, 5.0);  // a generous bound for a loaded machine or a sanitizer build
}

// Debian's Fashion-MNIST, where it is installed.
TEST_F(IdxImages, ReadsDebiansFashionMnist) {
  if (!fs::exists("/usr/share/datasets/fashion-mnist/t10k-images-idx3-ubyte.gz")) {
    GTEST_SKIP() << "dataset-fashion-mnist is not installed";
  }
  auto data = make("{}", rig::Mode::eval, 10000);
  EXPECT_EQ(data->epoch_size(), 10000);
  EXPECT_EQ(data->info()["height"].as<int>(), 28);
  EXPECT_EQ(data->info()["width"].as<int>(), 28);
  auto batch = data->next_batch();
  // Normalised with Fashion-MNIST's own mean and std: close to mean 0, std 1.
  const auto x = batch->at("images").to_vector();
  double sum = 0.0;
  double squares = 0.0;
  for (const float v : x) {
    sum += v;
    squares += static_cast<double>(v) * v;
  }
  const double mean = sum / static_cast<double>(x.size());
  EXPECT_NEAR(mean, 0.0, 0.02);
  EXPECT_NEAR(std::sqrt(squares / static_cast<double>(x.size()) - mean * mean), 1.0, 0.02);
  std::vector<int> per_class(10);
  const auto* y = batch->at("labels").data<std::int64_t>();
  for (int i = 0; i < 10000; ++i) ++per_class[y[i]];
  EXPECT_EQ(per_class, std::vector<int>(10, 1000));  // the test split is balanced
}

}  // namespace
