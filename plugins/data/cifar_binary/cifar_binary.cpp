// cifar_binary: the binary versions of CIFAR-10 (records of 1 label byte and
// 3072 pixel bytes) and CIFAR-100 (a coarse and a fine label byte, then 3072
// pixel bytes), held in memory. Pixels are stored channel-major (1024 red,
// 1024 green, 1024 blue, rows of 32), which is already [C, H, W].
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <limits>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "../common/image_set.hpp"
#include "rig/error.hpp"
#include "rig/plugin.hpp"

namespace {

namespace fs = std::filesystem;

constexpr const char* kPlugin = "cifar_binary";
constexpr std::int64_t kSide = 32;
constexpr std::int64_t kChannels = 3;
constexpr std::int64_t kImageBytes = kChannels * kSide * kSide;

struct Format {
  std::string name;           // for messages: CIFAR-10 / CIFAR-100
  std::int64_t label_bytes;   // before the pixels of each record
  std::int64_t label_offset;  // which label byte is used
  std::int64_t num_classes;
  std::vector<std::string> train_files;  // standard names in the extracted archive
  std::vector<std::string> test_files;
  std::string download;  // where the set comes from
  std::int64_t record_bytes() const { return label_bytes + kImageBytes; }
};

Format format_of(const YAML::Node& params) {
  const auto dataset = params["dataset"].as<std::string>();
  const auto label = params["label"].as<std::string>();
  if (dataset == "cifar10") {
    if (label != "fine") {
      throw rig::UserError(fmt::format(
          "{}: label: '{}' exists only in cifar100; CIFAR-10 has one label (use label: fine)",
          kPlugin, label));
    }
    return {"CIFAR-10",
            1,
            0,
            10,
            {"data_batch_1.bin", "data_batch_2.bin", "data_batch_3.bin", "data_batch_4.bin",
             "data_batch_5.bin"},
            {"test_batch.bin"},
            "cifar-10-binary.tar.gz (extracts to cifar-10-batches-bin) from "
            "https://www.cs.toronto.edu/~kriz/cifar.html"};
  }
  const bool coarse = label == "coarse";
  return {"CIFAR-100",
          2,
          coarse ? 0 : 1,
          coarse ? 20 : 100,
          {"train.bin"},
          {"test.bin"},
          "cifar-100-binary.tar.gz (extracts to cifar-100-binary) from "
          "https://www.cs.toronto.edu/~kriz/cifar.html"};
}

// Appends the records of one file (at most `wanted` of them) to `set`.
void read_records(const Format& format, const std::string& key, const fs::path& path,
                  std::int64_t wanted, rig_data::ImageSet& set) {
  rig_data::require_file(kPlugin, key, path.string(),
                         fmt::format("{} comes as {}", format.name, format.download));
  const auto size = static_cast<std::int64_t>(fs::file_size(path));
  const std::int64_t record = format.record_bytes();
  if (size == 0 || size % record != 0) {
    throw rig::UserError(fmt::format(
        "{}: {} {}: {} bytes is not a whole number of {}-byte {} records ({} records and {} "
        "bytes over); a truncated file, or the wrong dataset?",
        kPlugin, key, path.string(), size, record, format.name, size / record, size % record));
  }
  const std::int64_t records = std::min(size / record, wanted);
  std::vector<char> bytes(static_cast<std::size_t>(records * record));
  std::ifstream in(path, std::ios::binary);
  if (!in.read(bytes.data(), static_cast<std::streamsize>(bytes.size()))) {
    throw rig::UserError(fmt::format("{}: {} {}: cannot read", kPlugin, key, path.string()));
  }
  const std::size_t first = set.pixels.size();
  set.pixels.resize(first + static_cast<std::size_t>(records * kImageBytes));
  for (std::int64_t r = 0; r < records; ++r) {
    const auto* rec = reinterpret_cast<const std::uint8_t*>(bytes.data() + r * record);
    const std::int64_t label = rec[format.label_offset];
    rig_data::check_label(kPlugin, fmt::format("{} {}", key, path.string()), r, label,
                          format.num_classes);
    set.labels.push_back(label);
    std::copy_n(rec + format.label_bytes, kImageBytes,
                set.pixels.begin() + first + r * kImageBytes);
  }
}

rig_data::ImageSet load(const YAML::Node& params, const Format& format, bool train) {
  const fs::path dir = params["data_dir"].as<std::string>();
  std::error_code error;
  if (!fs::is_directory(dir, error)) {
    throw rig::UserError(fmt::format("{}: data_dir: folder {} not found; {} comes as {}", kPlugin,
                                     dir.string(), format.name, format.download));
  }
  const std::string key = train ? "train_files" : "test_files";
  auto files = params[key].as<std::vector<std::string>>();
  if (files.empty()) files = train ? format.train_files : format.test_files;
  const std::int64_t limit = params["limit"].as<std::int64_t>();
  rig_data::ImageSet set;
  set.channels = kChannels;
  set.height = kSide;
  set.width = kSide;
  for (const auto& file : files) {
    const std::int64_t wanted =
        limit > 0 ? limit - set.size() : std::numeric_limits<std::int64_t>::max();
    if (wanted <= 0) break;
    read_records(format, key, dir / file, wanted, set);  // dir / an absolute path is that path
  }
  return set;
}

std::vector<double> numbers(const YAML::Node& node) {
  return node.as<std::vector<double>>();
}

class CifarBinary final : public rig_data::ImageSetLayer {
 public:
  CifarBinary(const YAML::Node& params, const rig::DataLayerContext& ctx)
      : CifarBinary(params, ctx, format_of(params)) {}

 private:
  CifarBinary(const YAML::Node& params, const rig::DataLayerContext& ctx, const Format& format)
      : ImageSetLayer(
            kPlugin, load(params, format, ctx.run.mode == rig::Mode::train), format.num_classes,
            rig_data::PixelNormaliser(kPlugin, numbers(params["mean"]), numbers(params["std"])),
            rig_data::Augment{params["pad"].as<std::int64_t>(), params["flip"].as<bool>()},
            rig_data::mix(params["seed"].as<std::uint64_t>()) ^ ctx.run.seed, ctx) {}
};

}  // namespace

RIG_PLUGIN(data_layer, "cifar_binary", "0.1.0",
           "CIFAR-10 / CIFAR-100 binary batches, with random crop and flip", CifarBinary)
