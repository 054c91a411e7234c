// JPEG decoding with libjpeg-turbo's TurboJPEG API, optionally at a reduced
// size (libjpeg's DCT scaling: M/8), which is far cheaper than decoding at full
// size and resizing.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <stdexcept>
#include <vector>

namespace image_folder {

// A JPEG that cannot be decoded. The message is libjpeg's.
class CorruptJpeg : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct JpegHeader {
  int width = 0;
  int height = 0;
  bool gray = false;  // one channel; else decoded to RGB
};

// Interleaved 8-bit pixels, rows without padding.
struct Pixels {
  std::vector<std::uint8_t> data;
  int width = 0;
  int height = 0;
  int channels = 0;  // 1 (gray) or 3 (RGB)
};

// One TurboJPEG decompressor: not thread-safe, so each worker owns one.
class JpegDecoder {
 public:
  JpegDecoder();

  JpegHeader header(const std::uint8_t* jpeg, std::size_t size);

  // The smallest scaling factor <= 1 at which a w x h region of the full
  // image still covers at least min_w x min_h pixels (1 when none does),
  // as num / denom.
  static std::pair<int, int> scale_for(const JpegHeader& header, double w, double h, int min_w,
                                       int min_h);

  // Decodes at num/denom of the full size (a factor scale_for returned).
  // CMYK / YCCK JPEGs are converted to RGB.
  void decode(const std::uint8_t* jpeg, std::size_t size, const JpegHeader& header,
              std::pair<int, int> scale, Pixels& out);

 private:
  struct Destroy {
    void operator()(void* handle) const;
  };
  // Throws CorruptJpeg for an error, and for a warning that means lost image
  // data (a truncated file); other warnings (e.g. extraneous bytes) pass.
  void check(int status);
  // Throws CorruptJpeg after replacing the decompressor: one that failed
  // mid-file can stay in a state that makes the next, good file fail too.
  [[noreturn]] void fail(const std::string& message);

  std::unique_ptr<void, Destroy> handle_;
  int colorspace_ = 0;
  std::vector<std::uint8_t> cmyk_;
};

}  // namespace image_folder
