// rig_image_folder_bench: the image_folder training pipeline alone (read, JPEG
// decode, random-resized-crop to 224, flip, normalise) on generated 256x256
// JPEGs, through the real plugin and its worker threads. Prints images per
// second and per worker (= per core), the median of several passes.
//
//   rig_image_folder_bench [--images 512] [--runs 3] [--batch 64] [--workers 1,2]
//                          [--quality 90] [--size 256]
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>
#include <boost/dll/shared_library.hpp>

#include "jpeg_files.hpp"
#include "rig/plugin.hpp"

namespace {

namespace fs = std::filesystem;

struct Options {
  int images = 512;
  int runs = 3;
  int batch = 64;
  int size = 256;
  int quality = 90;
  std::vector<int> workers = {1, 2};
};

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (i + 1 >= argc) throw std::invalid_argument("missing value after " + arg);
    const std::string value = argv[++i];
    if (arg == "--images") {
      o.images = std::stoi(value);
    } else if (arg == "--runs") {
      o.runs = std::stoi(value);
    } else if (arg == "--batch") {
      o.batch = std::stoi(value);
    } else if (arg == "--size") {
      o.size = std::stoi(value);
    } else if (arg == "--quality") {
      o.quality = std::stoi(value);
    } else if (arg == "--workers") {
      o.workers.clear();
      std::stringstream list(value);
      for (std::string w; std::getline(list, w, ',');) o.workers.push_back(std::stoi(w));
    } else {
      throw std::invalid_argument("unknown option " + arg);
    }
  }
  if (o.images < o.batch || o.runs < 1 || o.workers.empty()) {
    throw std::invalid_argument("need --images >= --batch, --runs >= 1 and some --workers");
  }
  return o;
}

// Photo-like content: a few random smooth waves per channel plus grain, so
// the JPEGs have the size and decode cost of natural images rather than of
// flat colour or pure noise.
std::vector<std::uint8_t> picture(int size, unsigned seed) {
  unsigned state = seed * 2654435761U + 12345U;
  auto next = [&] {
    state = state * 1664525U + 1013904223U;
    return static_cast<double>(state >> 8U) / 16777216.0;
  };
  double wave[3][4][3];  // channel, wave, (fx, fy, phase)
  for (auto& channel : wave) {
    for (auto& w : channel) {
      w[0] = next() * 0.12;
      w[1] = next() * 0.12;
      w[2] = next() * 6.28;
    }
  }
  std::vector<std::uint8_t> p;
  p.reserve(static_cast<std::size_t>(size * size * 3));
  for (int y = 0; y < size; ++y) {
    for (int x = 0; x < size; ++x) {
      for (const auto& channel : wave) {
        double v = 128;
        for (const auto& w : channel) v += 28 * std::sin(w[0] * x + w[1] * y + w[2]);
        v += (next() - 0.5) * 24;
        p.push_back(static_cast<std::uint8_t>(std::clamp(v, 0.0, 255.0)));
      }
    }
  }
  return p;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) try {
  const Options o = parse(argc, argv);
  std::string pattern = (fs::temp_directory_path() / "rig-image-folder-bench-XXXXXX").string();
  if (mkdtemp(pattern.data()) == nullptr) throw std::runtime_error("mkdtemp failed");
  const fs::path root = pattern;
  struct Cleanup {
    fs::path dir;
    ~Cleanup() { fs::remove_all(dir); }
  } cleanup{root};

  std::size_t bytes = 0;
  for (int i = 0; i < o.images; ++i) {
    const fs::path dir = root / "train" / fmt::format("class{:02}", i % 10);
    fs::create_directories(dir);
    const auto jpeg = rig_test::encode_jpeg(picture(o.size, static_cast<unsigned>(i)), o.size,
                                            o.size, 3, o.quality, /*subsample_420=*/true);
    bytes += jpeg.size();
    rig_test::write_bytes((dir / fmt::format("{:05}.jpg", i)).string(), jpeg);
  }
  fmt::print(
      "image_folder bench: {} JPEGs {}x{} (quality {}, 4:2:0, {:.1f} KB average), "
      "train pipeline: decode + random-resized-crop to 224 + flip + normalise, batch {}, "
      "{} hardware threads\n",
      o.images, o.size, o.size, o.quality, bytes / 1024.0 / o.images, o.batch,
      std::thread::hardware_concurrency());

  const boost::dll::shared_library library(RIG_IMAGE_FOLDER_PLUGIN);
  const auto& plugin = library.get_alias<const rig::PluginDescriptor>("rig_plugin");
  YAML::Node defaults(YAML::NodeType::Map);
  for (const auto& property : YAML::Load(plugin.schema_text())["properties"]) {
    if (property.second["default"]) {
      defaults[property.first.as<std::string>()] = YAML::Clone(property.second["default"]);
    }
  }
  rig::DataLayerContext ctx;
  ctx.run.mode = rig::Mode::train;
  ctx.batch_size = o.batch;

  for (const int workers : o.workers) {
    YAML::Node params = YAML::Clone(defaults);
    params["train_dir"] = (root / "train").string();
    params["num_workers"] = workers;
    std::vector<double> rates;
    for (int run = 0; run <= o.runs; ++run) {  // pass 0 warms the page cache and the allocator
      const auto start = std::chrono::steady_clock::now();
      auto data = plugin.make_data_layer(params, ctx);
      data->start_epoch(run);
      std::int64_t images = 0;
      while (auto batch = data->next_batch()) images += batch->num_objects;
      const double seconds =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      if (run > 0) rates.push_back(static_cast<double>(images) / seconds);
    }
    const double rate = median(rates);
    fmt::print(
        "num_workers {}: {:8.1f} images/s, {:7.1f} images/s per core (median of {}; "
        "runs {:.1f})\n",
        workers, rate, rate / workers, o.runs, fmt::join(rates, " / "));
  }
  return 0;
} catch (const std::exception& e) {
  std::cerr << "rig_image_folder_bench: " << e.what() << "\n";
  return 1;
}
