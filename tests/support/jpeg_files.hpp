// Writes JPEG files with TurboJPEG's compressor, for the image_folder plugin's
// test, its benchmark and tests/integration. Needs libturbojpeg.
#pragma once

#include <turbojpeg.h>

#include <cstdint>
#include <fstream>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

namespace rig_test {

// Interleaved 8-bit pixels (channels 1: grey, 3: RGB) as JPEG bytes. Colour
// images use 4:4:4 chroma unless `subsample_420`.
inline std::vector<std::uint8_t> encode_jpeg(const std::vector<std::uint8_t>& pixels, int width,
                                             int height, int channels, int quality,
                                             bool subsample_420 = false) {
  const std::unique_ptr<void, int (*)(tjhandle)> handle(tjInitCompress(), &tjDestroy);
  if (!handle) throw std::runtime_error("tjInitCompress failed");
  unsigned char* jpeg = nullptr;
  unsigned long size = 0;
  const int format = channels == 1 ? TJPF_GRAY : TJPF_RGB;
  const int sampling = channels == 1 ? TJSAMP_GRAY : subsample_420 ? TJSAMP_420 : TJSAMP_444;
  if (tjCompress2(handle.get(), pixels.data(), width, 0, height, format, &jpeg, &size, sampling,
                  quality, TJFLAG_ACCURATEDCT) != 0) {
    std::string message = tjGetErrorStr2(handle.get());
    tjFree(jpeg);
    throw std::runtime_error("tjCompress2: " + message);
  }
  std::vector<std::uint8_t> bytes(jpeg, jpeg + size);
  tjFree(jpeg);
  return bytes;
}

inline void write_bytes(const std::string& path, const std::vector<std::uint8_t>& bytes) {
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(bytes.data()),
            static_cast<std::streamsize>(bytes.size()));
  if (!out) throw std::runtime_error("cannot write " + path);
}

// A width x height image of one colour.
inline std::vector<std::uint8_t> solid(int width, int height, std::vector<std::uint8_t> colour) {
  std::vector<std::uint8_t> pixels;
  pixels.reserve(static_cast<std::size_t>(width) * static_cast<std::size_t>(height) *
                 colour.size());
  for (int i = 0; i < width * height; ++i)
    pixels.insert(pixels.end(), colour.begin(), colour.end());
  return pixels;
}

}  // namespace rig_test
