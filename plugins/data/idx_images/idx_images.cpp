// idx_images: MNIST-style IDX files (images 0x00000803: uint8 [N, rows, cols];
// labels 0x00000801: uint8 [N]), gzipped or not, held in memory. Train mode
// reads train_images / train_labels, eval and infer read test_images /
// test_labels. The defaults are Debian's dataset-fashion-mnist package.
#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <zlib.h>

#include "../common/image_set.hpp"
#include "rig/error.hpp"
#include "rig/plugin.hpp"

namespace {

constexpr const char* kPlugin = "idx_images";
constexpr std::uint32_t kImagesMagic = 0x00000803;  // unsigned bytes, 3 dimensions
constexpr std::uint32_t kLabelsMagic = 0x00000801;  // unsigned bytes, 1 dimension
constexpr const char* kDefaultHint =
    "the default paths come with Debian's Fashion-MNIST: apt-get install dataset-fashion-mnist";

// A named data file, for messages: "train_images /path".
struct Source {
  std::string key;
  std::string path;
  std::string name() const { return fmt::format("{} {}", key, path); }
};

std::uint32_t big_endian32(const std::uint8_t* p) {
  return (std::uint32_t{p[0]} << 24U) | (std::uint32_t{p[1]} << 16U) | (std::uint32_t{p[2]} << 8U) |
         std::uint32_t{p[3]};
}

// A file's bytes; `cut` when reading stopped before its end.
struct FileBytes {
  std::vector<std::uint8_t> bytes;
  bool cut = false;
};

// The file, decompressed when it is gzipped (zlib reads plain files as they
// are), but no more than its header announces plus two bytes: a small header
// followed by gigabytes (a gzip bomb) is refused after those two bytes instead
// of filling memory.
FileBytes read_file(const Source& source, std::uint32_t magic) {
  rig_data::require_file(kPlugin, source.key, source.path, kDefaultHint);
  const std::unique_ptr<gzFile_s, int (*)(gzFile)> file(gzopen(source.path.c_str(), "rb"),
                                                        &gzclose);
  if (!file) throw rig::UserError(fmt::format("{}: {}: cannot open", kPlugin, source.name()));
  gzbuffer(file.get(), 1U << 20U);
  FileBytes result;
  std::vector<std::uint8_t>& bytes = result.bytes;
  // Appends up to `count` more bytes; false at the end of the file (or an error).
  auto read = [&](std::uint64_t count) {
    constexpr std::uint64_t kChunk = 1U << 22U;
    const std::size_t used = bytes.size();
    const auto want = static_cast<unsigned>(std::min(count, kChunk));
    bytes.resize(used + want);
    const int got = gzread(file.get(), bytes.data() + used, want);
    bytes.resize(used + static_cast<std::size_t>(std::max(got, 0)));
    return got == static_cast<int>(want);
  };
  const std::size_t header = 4 + 4 * (magic & 0xFFU);
  bool more = read(header);
  // What the header announces, in 128 bits (3 dimensions of 32 bits each
  // overflow 64); nothing past the header when it is not this file's.
  unsigned __int128 limit = bytes.size();
  if (more && big_endian32(bytes.data()) == magic) {
    unsigned __int128 payload = 1;
    for (std::size_t at = 4; at < header; at += 4) payload *= big_endian32(bytes.data() + at);
    limit = header + payload + 1;
  }
  while (more && bytes.size() < limit) {
    more = read(static_cast<std::uint64_t>(
        std::min<unsigned __int128>(limit - bytes.size(), ~std::uint64_t{0})));
  }
  // One byte past the limit tells a file of exactly one byte too many from a longer one.
  if (more) {
    std::uint8_t next = 0;
    result.cut = gzread(file.get(), &next, 1) == 1;
  }
  int code = Z_OK;
  const char* message = gzerror(file.get(), &code);
  if (code == Z_BUF_ERROR) {
    throw rig::UserError(fmt::format("{}: {}: the gzip stream ends early (a truncated .gz file)",
                                     kPlugin, source.name()));
  }
  if (code != Z_OK) {
    throw rig::UserError(fmt::format("{}: {}: cannot read: {}", kPlugin, source.name(), message));
  }
  return result;
}

// The dimensions of an IDX file after checking its magic number and that its
// payload is exactly as long as they say.
std::vector<std::uint64_t> idx_dims(const FileBytes& file, const Source& source,
                                    std::uint32_t magic, const char* what) {
  const std::vector<std::uint8_t>& bytes = file.bytes;
  const std::size_t ndims = magic & 0xFFU;
  const std::size_t header = 4 + 4 * ndims;
  if (bytes.size() < 4) {
    throw rig::UserError(fmt::format("{}: {}: truncated: {} byte(s), not even a magic number",
                                     kPlugin, source.name(), bytes.size()));
  }
  const std::uint32_t found = big_endian32(bytes.data());
  if (found != magic) {
    const std::string hint = found == kImagesMagic   ? " (that of an IDX image file)"
                             : found == kLabelsMagic ? " (that of an IDX label file)"
                             : bytes.size() >= 2 && bytes[0] == 0x1F && bytes[1] == 0x8B
                                 ? " (a gzip stream inside the gzip stream?)"
                                 : "";
    throw rig::UserError(
        fmt::format("{}: {}: wrong magic number 0x{:08X}{}; expected 0x{:08X}, an IDX {} file",
                    kPlugin, source.name(), found, hint, magic, what));
  }
  if (bytes.size() < header) {
    throw rig::UserError(fmt::format("{}: {}: truncated: {} bytes, shorter than its {}-byte header",
                                     kPlugin, source.name(), bytes.size(), header));
  }
  std::vector<std::uint64_t> dims(ndims);
  for (std::size_t d = 0; d < ndims; ++d) dims[d] = big_endian32(bytes.data() + 4 + 4 * d);
  std::uint64_t record = 1;  // bytes per item of the first dimension
  for (std::size_t d = 1; d < ndims; ++d) record *= dims[d];
  const std::uint64_t payload = bytes.size() - header;
  if (record == 0 || dims[0] == 0) {
    throw rig::UserError(fmt::format("{}: {}: its header announces no data ({})", kPlugin,
                                     source.name(), fmt::join(dims, " x ")));
  }
  if (dims[0] > payload / record) {
    throw rig::UserError(
        fmt::format("{}: {}: truncated: its header says {} x {} bytes but only {} bytes follow it",
                    kPlugin, source.name(), dims[0], record, payload));
  }
  if (file.cut) {
    throw rig::UserError(
        fmt::format("{}: {}: more bytes follow the {} x {} bytes its header announces (reading "
                    "stopped there); not an IDX {} file?",
                    kPlugin, source.name(), dims[0], record, what));
  }
  if (dims[0] * record != payload) {
    throw rig::UserError(fmt::format(
        "{}: {}: {} bytes follow the {} x {} bytes its header announces; not an IDX {} file?",
        kPlugin, source.name(), payload - dims[0] * record, dims[0], record, what));
  }
  return dims;
}

rig_data::ImageSet load(const Source& images_source, const Source& labels_source,
                        std::int64_t num_classes, std::int64_t limit) {
  FileBytes image_file = read_file(images_source, kImagesMagic);
  const auto image_dims = idx_dims(image_file, images_source, kImagesMagic, "image");
  const FileBytes label_file = read_file(labels_source, kLabelsMagic);
  const auto label_dims = idx_dims(label_file, labels_source, kLabelsMagic, "label");
  std::vector<std::uint8_t>& images = image_file.bytes;
  const std::vector<std::uint8_t>& labels = label_file.bytes;
  if (image_dims[0] != label_dims[0]) {
    throw rig::UserError(fmt::format(
        "{}: {} holds {} images but {} holds {} labels; they must be of the same set", kPlugin,
        images_source.name(), image_dims[0], labels_source.name(), label_dims[0]));
  }
  rig_data::ImageSet set;
  set.channels = 1;
  set.height = static_cast<std::int64_t>(image_dims[1]);
  set.width = static_cast<std::int64_t>(image_dims[2]);
  images.erase(images.begin(), images.begin() + 16);
  set.pixels = std::move(images);
  set.labels.reserve(label_dims[0]);
  for (std::uint64_t i = 0; i < label_dims[0]; ++i) {
    const std::int64_t label = labels[8 + i];
    rig_data::check_label(kPlugin, labels_source.name(), static_cast<std::int64_t>(i), label,
                          num_classes);
    set.labels.push_back(label);
  }
  set.keep_first(limit);
  return set;
}

class IdxImages final : public rig_data::ImageSetLayer {
 public:
  IdxImages(const YAML::Node& params, const rig::DataLayerContext& ctx)
      : ImageSetLayer(
            kPlugin, load_split(params, ctx), params["num_classes"].as<std::int64_t>(),
            rig_data::PixelNormaliser(kPlugin, {params["mean"].as<double>()},
                                      {params["std"].as<double>()}),
            rig_data::Augment{params["pad"].as<std::int64_t>(), params["flip"].as<bool>()},
            rig_data::mix(params["seed"].as<std::uint64_t>()) ^ ctx.run.seed, ctx) {}

 private:
  static rig_data::ImageSet load_split(const YAML::Node& params, const rig::DataLayerContext& ctx) {
    const std::string split = ctx.run.mode == rig::Mode::train ? "train" : "test";
    const std::string images = split + "_images";
    const std::string labels = split + "_labels";
    return load({images, params[images].as<std::string>()},
                {labels, params[labels].as<std::string>()},
                params["num_classes"].as<std::int64_t>(), params["limit"].as<std::int64_t>());
  }
};

}  // namespace

RIG_PLUGIN(data_layer, "idx_images", "0.1.0",
           "MNIST / Fashion-MNIST IDX images (gzipped or not), with random crop and flip",
           IdxImages)
