// The cifar_binary data layer against small CIFAR-10 / CIFAR-100 files written
// here: pixels, labels, per-channel normalisation, augmentation, sharding,
// resuming, file lists and every bad-input case.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <string>
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

constexpr std::int64_t kPixels = 3 * 32 * 32;
const std::vector<double> kMean = {0.1, 0.2, 0.3};
const std::vector<double> kStd = {0.5, 0.25, 0.2};

// Pixel (c, y, x) of sample i (numbered over all files of a split), and its labels.
std::uint8_t pixel(std::int64_t i, std::int64_t c, std::int64_t y, std::int64_t x) {
  return static_cast<std::uint8_t>((i * 29 + c * 101 + y * 7 + x * 3) % 256);
}
std::int64_t cifar10_label(std::int64_t i) {
  return (i * 3) % 10;
}
std::int64_t coarse_label(std::int64_t i) {
  return (i * 7) % 20;
}
std::int64_t fine_label(std::int64_t i) {
  return (i * 13) % 100;
}

float normalised(std::uint8_t v, std::int64_t c) {
  return static_cast<float>((v / 255.0 - kMean[c]) / kStd[c]);
}

// Records first .. first + n - 1 of a split.
std::vector<std::uint8_t> records(std::int64_t first, std::int64_t n, bool cifar100) {
  std::vector<std::uint8_t> out;
  for (std::int64_t i = first; i < first + n; ++i) {
    if (cifar100) {
      out.push_back(static_cast<std::uint8_t>(coarse_label(i)));
      out.push_back(static_cast<std::uint8_t>(fine_label(i)));
    } else {
      out.push_back(static_cast<std::uint8_t>(cifar10_label(i)));
    }
    for (std::int64_t c = 0; c < 3; ++c)
      for (std::int64_t y = 0; y < 32; ++y)
        for (std::int64_t x = 0; x < 32; ++x) out.push_back(pixel(i, c, y, x));
  }
  return out;
}

using rig_test::epoch_indices;

class CifarBinary : public ::testing::Test {
 protected:
  rig_test::LoadedPlugin plugin{"data_layer", "cifar_binary"};
  fs::path dir;

  void SetUp() override {
    const auto* test = ::testing::UnitTest::GetInstance()->current_test_info();
    dir = fs::temp_directory_path() / fmt::format("rig-cifar-{}-{}", ::getpid(), test->name());
    fs::remove_all(dir);
    fs::create_directories(dir / "c10");
    fs::create_directories(dir / "c100");
    // CIFAR-10: 14 train samples over the five batch files (3, 3, 3, 3, 2), 5 test samples.
    const std::int64_t sizes[] = {3, 3, 3, 3, 2};
    std::int64_t first = 0;
    for (int b = 0; b < 5; ++b) {
      write(fmt::format("c10/data_batch_{}.bin", b + 1), records(first, sizes[b], false));
      first += sizes[b];
    }
    write("c10/test_batch.bin", records(0, 5, false));
    write("c100/train.bin", records(0, 12, true));
    write("c100/test.bin", records(0, 4, true));
  }
  void TearDown() override { fs::remove_all(dir); }

  void write(const std::string& name, const std::vector<std::uint8_t>& bytes) const {
    std::ofstream out(dir / name, std::ios::binary);
    out.write(reinterpret_cast<const char*>(bytes.data()),
              static_cast<std::streamsize>(bytes.size()));
  }
  std::string path(const std::string& name) const { return (dir / name).string(); }

  // Params reading CIFAR-10 from this test's folder, then `extra`.
  std::string c10(const std::string& extra = "") const {
    return fmt::format("{{data_dir: '{}', mean: [{}], std: [{}]{}{}}}", path("c10"),
                       fmt::join(kMean, ", "), fmt::join(kStd, ", "), extra.empty() ? "" : ", ",
                       extra);
  }
  std::string c100(const std::string& extra = "") const {
    return fmt::format("{{data_dir: '{}', dataset: cifar100, mean: [{}], std: [{}]{}{}}}",
                       path("c100"), fmt::join(kMean, ", "), fmt::join(kStd, ", "),
                       extra.empty() ? "" : ", ", extra);
  }

  std::unique_ptr<rig::DataLayer> make(const std::string& params, rig::Mode mode,
                                       std::int64_t batch_size, int rank = 0, int world_size = 1) {
    return plugin.data_layer(plugin.params(params), mode, batch_size, rank, world_size, 11);
  }

  // Checks that each image of `batch` is sample indices[r] + `offset`, unaugmented.
  static void expect_plain_images(const rig::Batch& batch, std::int64_t offset = 0) {
    const float* x = batch.at("images").data<float>();
    for (std::size_t r = 0; r < batch.indices.size(); ++r) {
      const std::int64_t s = batch.indices[r] + offset;
      for (std::int64_t c = 0; c < 3; ++c)
        for (std::int64_t y = 0; y < 32; ++y)
          for (std::int64_t col = 0; col < 32; ++col)
            ASSERT_FLOAT_EQ(x[r * kPixels + (c * 32 + y) * 32 + col],
                            normalised(pixel(s, c, y, col), c))
                << "sample " << s << " channel " << c << " y " << y << " x " << col;
    }
  }
};

TEST_F(CifarBinary, Cifar10InfoPixelsLabelsAndNormalisation) {
  auto data = make(c10(), rig::Mode::train, 4);
  const YAML::Node info = data->info();
  EXPECT_EQ(info["task"].as<std::string>(), "classification");
  EXPECT_EQ(info["num_classes"].as<int>(), 10);
  EXPECT_EQ(info["channels"].as<int>(), 3);
  EXPECT_EQ(info["height"].as<int>(), 32);
  EXPECT_EQ(info["width"].as<int>(), 32);
  EXPECT_EQ(info["num_samples"].as<int>(), 14);
  EXPECT_EQ(data->epoch_size(), 14);
  std::int64_t seen = 0;
  while (auto batch = data->next_batch()) {
    EXPECT_EQ(batch->at("images").shape(), (rig::Shape{4, 3, 32, 32}));
    EXPECT_EQ(batch->num_objects, 4);
    expect_plain_images(*batch);
    for (std::size_t r = 0; r < 4; ++r) {
      EXPECT_EQ(batch->at("labels").data<std::int64_t>()[r], cifar10_label(batch->indices[r]));
    }
    seen += 4;
  }
  EXPECT_EQ(seen, 12);  // train drops the incomplete last batch
  auto eval = make(c10(), rig::Mode::eval, 8);
  EXPECT_EQ(eval->epoch_size(), 5);
  auto batch = eval->next_batch();
  expect_plain_images(*batch);
  EXPECT_EQ(eval->decode_targets(*batch), (std::vector<std::string>{"0", "3", "6", "9", "2"}));
}

TEST_F(CifarBinary, Cifar100FineOrCoarseLabels) {
  auto fine = make(c100(), rig::Mode::train, 12);
  EXPECT_EQ(fine->info()["num_classes"].as<int>(), 100);
  auto coarse = make(c100("label: coarse"), rig::Mode::train, 12);
  EXPECT_EQ(coarse->info()["num_classes"].as<int>(), 20);
  const auto f = fine->next_batch();
  const auto c = coarse->next_batch();
  EXPECT_EQ(f->indices, c->indices);
  expect_plain_images(*f);
  for (std::size_t r = 0; r < 12; ++r) {
    EXPECT_EQ(f->at("labels").data<std::int64_t>()[r], fine_label(f->indices[r]));
    EXPECT_EQ(c->at("labels").data<std::int64_t>()[r], coarse_label(c->indices[r]));
  }
  auto eval = make(c100(), rig::Mode::infer, 10);
  EXPECT_EQ(eval->epoch_size(), 4);
  expect_plain_images(*eval->next_batch());
}

TEST_F(CifarBinary, FileListsAndLimit) {
  // Another order of the files, one of them by absolute path.
  auto data =
      make(c10(fmt::format("train_files: [data_batch_2.bin, '{}']", path("c10/data_batch_1.bin"))),
           rig::Mode::eval, 6);  // eval reads test_files: the lists are per mode
  EXPECT_EQ(data->epoch_size(), 5);
  auto train =
      make(c10(fmt::format("train_files: [data_batch_2.bin, '{}']", path("c10/data_batch_1.bin"))),
           rig::Mode::train, 6);
  EXPECT_EQ(train->epoch_size(), 6);
  auto batch = train->next_batch();
  for (std::size_t r = 0; r < 6; ++r) {
    const auto s = batch->indices[r];  // 0..2 are samples 3..5 of the split, 3..5 are 0..2
    EXPECT_EQ(batch->at("labels").data<std::int64_t>()[r], cifar10_label(s < 3 ? s + 3 : s - 3));
  }
  // limit stops reading in the middle of the second file.
  auto limited = make(c10("limit: 5"), rig::Mode::eval, 10);
  auto eval_limited = limited->next_batch();
  EXPECT_EQ(eval_limited->indices.size(), 5U);
  auto first5 = make(c10("limit: 5"), rig::Mode::train, 5);
  EXPECT_EQ(first5->epoch_size(), 5);
  auto b = first5->next_batch();
  expect_plain_images(*b);
}

TEST_F(CifarBinary, AugmentationIsTheSameWhateverTheRanks) {
  const std::string params = c10("pad: 4, flip: true");
  auto single = make(params, rig::Mode::train, 6);
  auto rank0 = make(params, rig::Mode::train, 3, 0, 2);
  auto rank1 = make(params, rig::Mode::train, 3, 1, 2);
  bool augmented = false;
  for (std::int64_t epoch : {0, 3}) {
    single->start_epoch(epoch);
    rank0->start_epoch(epoch);
    rank1->start_epoch(epoch);
    int batches = 0;
    while (auto whole = single->next_batch()) {
      auto a = rank0->next_batch();
      auto b = rank1->next_batch();
      ASSERT_TRUE(a && b);
      auto images = a->at("images").to_vector();
      const auto second = b->at("images").to_vector();
      images.insert(images.end(), second.begin(), second.end());
      const auto all = whole->at("images").to_vector();
      EXPECT_EQ(images, all);
      // Not the plain images: something was cropped or flipped.
      for (std::size_t r = 0; r < 6 && !augmented; ++r) {
        const auto s = whole->indices[r];
        augmented = all[r * kPixels + 5 * 32 + 5] != normalised(pixel(s, 0, 5, 5), 0);
      }
      ++batches;
    }
    EXPECT_EQ(batches, 2);
  }
  EXPECT_TRUE(augmented);
  // The crop is one shift and one mirroring for the three channels.
  single->start_epoch(1);
  auto batch = single->next_batch();
  const float* x = batch->at("images").data<float>();
  for (std::size_t r = 0; r < 6; ++r) {
    const auto s = batch->indices[r];
    bool found = false;
    for (std::int64_t dy = -4; dy <= 4 && !found; ++dy) {
      for (std::int64_t dx = -4; dx <= 4 && !found; ++dx) {
        for (const bool flip : {false, true}) {
          bool same = true;
          for (std::int64_t c = 0; c < 3 && same; ++c)
            for (std::int64_t y = 0; y < 32 && same; ++y)
              for (std::int64_t col = 0; col < 32 && same; ++col) {
                const std::int64_t sy = y + dy;
                const std::int64_t sx = (flip ? 31 - col : col) + dx;
                const bool inside = sy >= 0 && sy < 32 && sx >= 0 && sx < 32;
                same = x[r * kPixels + (c * 32 + y) * 32 + col] ==
                       normalised(inside ? pixel(s, c, sy, sx) : 0, c);
              }
          if (same) {
            found = true;
            break;
          }
        }
      }
    }
    EXPECT_TRUE(found) << "sample " << s << " is no crop of its padded image";
  }
}

TEST_F(CifarBinary, EvalSeesEverySampleExactlyOnce) {
  std::vector<std::int64_t> all(5);
  std::iota(all.begin(), all.end(), 0);
  for (const std::int64_t batch : {1, 2, 3, 5, 8}) {
    std::vector<std::int64_t> single;
    auto one = make(c10("pad: 4, flip: true"), rig::Mode::eval, batch);
    while (auto b = one->next_batch()) {
      expect_plain_images(*b);  // eval never augments
      single.insert(single.end(), b->indices.begin(), b->indices.end());
    }
    EXPECT_EQ(single, all) << "batch " << batch;
    std::vector<std::int64_t> both;
    for (int rank = 0; rank < 2; ++rank) {
      auto shard = make(c10(), rig::Mode::eval, batch, rank, 2);
      for (const auto& b : epoch_indices(*shard)) both.insert(both.end(), b.begin(), b.end());
    }
    std::sort(both.begin(), both.end());
    EXPECT_EQ(both, all) << "batch " << batch << " on 2 ranks";
  }
}

TEST_F(CifarBinary, SeekResumesMidEpochWithTheSameBatches) {
  const std::string params = c10("pad: 4, flip: true");
  auto data = make(params, rig::Mode::train, 2);
  data->start_epoch(5);
  data->next_batch();
  data->next_batch();
  const YAML::Node position = YAML::Clone(data->position());
  auto resumed = make(params, rig::Mode::train, 2);
  resumed->seek(YAML::Load(YAML::Dump(position)));
  int compared = 0;
  while (auto expected = data->next_batch()) {
    auto got = resumed->next_batch();
    ASSERT_TRUE(got);
    EXPECT_EQ(got->indices, expected->indices);
    EXPECT_EQ(got->at("images").to_vector(), expected->at("images").to_vector());
    ++compared;
  }
  EXPECT_EQ(compared, 5);  // 7 batches of 2 in 14 samples, 2 already taken
  EXPECT_FALSE(resumed->next_batch());
}

TEST_F(CifarBinary, TypedPixelsAndDecode) {
  auto data = make(c10(), rig::Mode::infer, 2);
  std::vector<int> values(kPixels);
  for (std::int64_t i = 0; i < kPixels; ++i) values[i] = static_cast<int>(i % 256);
  const rig::Batch typed = data->encode_lines({fmt::format("{}", fmt::join(values, ","))});
  EXPECT_EQ(typed.at("images").shape(), (rig::Shape{1, 3, 32, 32}));
  const float* x = typed.at("images").data<float>();
  for (std::int64_t i = 0; i < kPixels; ++i) {
    ASSERT_FLOAT_EQ(x[i], normalised(static_cast<std::uint8_t>(i % 256), i / 1024));
  }
  EXPECT_TRUE(rig_test::contains(rig_test::user_error_of([&] { data->encode_lines({"1 2"}); }),
                                 "expected 3072 pixel values (0..255, 3 channel(s) of 32x32)"));
  auto batch = data->next_batch();
  EXPECT_EQ(data->decode(*batch, Tensor::from_vector(std::vector<std::int64_t>{7, 1}, {2})),
            (std::vector<std::string>{"7", "1"}));
}

TEST_F(CifarBinary, BadFilesAreUserErrorsNamingTheFile) {
  auto error = [&](const std::string& params, rig::Mode mode = rig::Mode::train) {
    return rig_test::user_error_of([&] { make(params, mode, 2); });
  };
  // Parameters the schema cannot check.
  EXPECT_TRUE(rig_test::contains(error(c10("label: coarse")), "'coarse' exists only in cifar100"));
  EXPECT_TRUE(rig_test::contains(error(c10("mean: [0.5], std: [0.5]")),
                                 "mean and std have 1 value(s) but the images have 3 channel(s)"));

  // A size that is not a whole number of records: truncated, or the other dataset.
  auto cut = records(0, 3, false);
  cut.resize(cut.size() - 100);
  write("c10/data_batch_3.bin", cut);
  EXPECT_TRUE(rig_test::contains(
      error(c10()), fmt::format("cifar_binary: train_files {}: 9119 bytes is not a whole number "
                                "of 3073-byte CIFAR-10 records (2 records and 2973 bytes over)",
                                path("c10/data_batch_3.bin"))));
  EXPECT_TRUE(rig_test::contains(
      error(fmt::format("{{data_dir: '{}', train_files: [train.bin]}}", path("c100"))),
      fmt::format("train_files {}: 36888 bytes is not a whole number of 3073-byte CIFAR-10 "
                  "records",
                  path("c100/train.bin"))));
  write("c10/empty.bin", {});
  EXPECT_TRUE(rig_test::contains(error(c10("test_files: [empty.bin]"), rig::Mode::eval),
                                 "test_files " + path("c10/empty.bin") + ": 0 bytes"));

  // A label outside the dataset's classes: the file and the record.
  auto bad_label = records(0, 3, false);
  bad_label[2 * 3073] = 12;
  write("c10/test_batch.bin", bad_label);
  EXPECT_TRUE(
      rig_test::contains(error(c10(), rig::Mode::eval),
                         "test_files " + path("c10/test_batch.bin") +
                             ": record 2 has label 12, outside the 10 classes (labels 0..9)"));
  auto bad_coarse = records(0, 4, true);
  bad_coarse[3 * 3074] = 20;
  write("c100/test.bin", bad_coarse);
  EXPECT_TRUE(rig_test::contains(error(c100("label: coarse"), rig::Mode::eval),
                                 "record 3 has label 20, outside the 20 classes"));

  // Missing folder or file: the key and the path.
  auto message = error("{data_dir: /nonexistent/cifar}");
  EXPECT_TRUE(
      rig_test::contains(message, "cifar_binary: data_dir: folder /nonexistent/cifar not found"));
  EXPECT_TRUE(rig_test::contains(message, "cifar-10-binary.tar.gz"));
  EXPECT_TRUE(rig_test::contains(error(c10("test_files: [nope.bin]"), rig::Mode::eval),
                                 "test_files: file " + path("c10/nope.bin") + " not found"));
}

}  // namespace
