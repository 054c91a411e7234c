// make_jpeg_tree: writes an ImageNet-style folder of small JPEGs for the
// image_folder integration test: ROOT/class_<c>/img_<i>.jpg, CLASSES folders
// of PER_CLASS images each. Every class has its own colour (so a model can
// learn it) with per-image noise, and sizes vary around WIDTH x HEIGHT.
// Deterministic: the same arguments give the same bytes.
//
//   make_jpeg_tree ROOT CLASSES PER_CLASS WIDTH HEIGHT
#include <cstdint>
#include <exception>
#include <filesystem>
#include <iostream>
#include <string>
#include <vector>

#include "jpeg_files.hpp"

namespace {

std::vector<std::uint8_t> picture(int cls, int image, int width, int height) {
  std::vector<std::uint8_t> pixels(static_cast<std::size_t>(width) *
                                   static_cast<std::size_t>(height) * 3);
  std::uint32_t state = 2654435761U * static_cast<std::uint32_t>(cls * 1000 + image + 1);
  for (std::size_t p = 0; p < pixels.size(); ++p) {
    state = state * 1664525U + 1013904223U;  // a small LCG: noise, not statistics
    const int channel = static_cast<int>(p % 3);
    const int base = channel == cls % 3 ? 200 : 40 + 30 * (cls / 3);
    pixels[p] = static_cast<std::uint8_t>(base + static_cast<int>(state >> 27));
  }
  return pixels;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 6) {
    std::cerr << "usage: make_jpeg_tree ROOT CLASSES PER_CLASS WIDTH HEIGHT\n";
    return 2;
  }
  try {
    const std::filesystem::path root = argv[1];
    const int classes = std::stoi(argv[2]);
    const int per_class = std::stoi(argv[3]);
    const int width = std::stoi(argv[4]);
    const int height = std::stoi(argv[5]);
    for (int c = 0; c < classes; ++c) {
      const auto dir = root / ("class_" + std::to_string(c));
      std::filesystem::create_directories(dir);
      for (int i = 0; i < per_class; ++i) {
        const int w = width + (i % 3) * 4;
        const int h = height + (i % 2) * 6;
        rig_test::write_bytes((dir / ("img_" + std::to_string(i) + ".jpg")).string(),
                              rig_test::encode_jpeg(picture(c, i, w, h), w, h, 3, 90));
      }
    }
  } catch (const std::exception& e) {
    std::cerr << "make_jpeg_tree: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
