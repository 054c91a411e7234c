#include "jpeg_decoder.hpp"

#include <turbojpeg.h>

#include <climits>
#include <cstring>
#include <string>

#include "rig/error.hpp"

namespace image_folder {

namespace {

// Larger claims are taken for corrupt headers (and would not fit in memory).
constexpr std::int64_t kMaxPixels = std::int64_t{1} << 28;

// A progressive JPEG may repeat scans without end, each a pass over every
// block of the full-size image (whatever the output scale): 70 KB claiming
// 16384 x 16384 with 600 scans kept the decoder busy for 14 s per image. So
// scans x pixels is bounded (2^32: a 2^28-pixel image may have 16 scans, the
// default progressions have at most 10; about 3 s of decoding), and
// libjpeg-turbo itself stops at 500 scans.
constexpr std::int64_t kMaxScanPixels = std::int64_t{1} << 32;
constexpr int kDecodeFlags = TJFLAG_LIMITSCANS;

// The number of scans (SOS markers) of a JPEG, walking its marker segments by
// their lengths (so an embedded EXIF thumbnail's are not counted) and the
// entropy-coded data after each SOS byte by byte (a 0xFF there is followed by
// 0x00 or a restart marker).
std::int64_t count_scans(const std::uint8_t* jpeg, std::size_t size) {
  std::int64_t scans = 0;
  std::size_t i = 2;  // after SOI
  while (i + 1 < size) {
    if (jpeg[i] != 0xFF) {
      ++i;  // entropy-coded data
      continue;
    }
    const std::uint8_t marker = jpeg[i + 1];
    if (marker == 0xFF || marker == 0x00 || marker == 0x01 || (marker >= 0xD0 && marker <= 0xD7)) {
      i += marker == 0xFF ? 1 : 2;  // fill byte, stuffed 0xFF, TEM, restart marker
      continue;
    }
    if (marker == 0xD9 || i + 3 >= size) break;  // EOI, or cut off
    if (marker == 0xDA) ++scans;
    i += 2 + ((std::size_t{jpeg[i + 2]} << 8U) | jpeg[i + 3]);
  }
  return scans;
}

}  // namespace

void JpegDecoder::Destroy::operator()(void* handle) const {
  tjDestroy(handle);
}

JpegDecoder::JpegDecoder() : handle_(tjInitDecompress()) {
  if (!handle_) throw rig::RunError("image_folder: cannot create a TurboJPEG decompressor");
}

void JpegDecoder::check(int status) {
  if (status == 0) return;
  const std::string message = tjGetErrorStr2(handle_.get());
  // libjpeg reports a truncated file as a warning and fills the rest with grey.
  if (tjGetErrorCode(handle_.get()) == TJERR_WARNING &&
      message.find("Premature end") == std::string::npos) {
    return;
  }
  fail(message);
}

void JpegDecoder::fail(const std::string& message) {
  handle_.reset(tjInitDecompress());
  if (!handle_) throw rig::RunError("image_folder: cannot create a TurboJPEG decompressor");
  throw CorruptJpeg(message);
}

JpegHeader JpegDecoder::header(const std::uint8_t* jpeg, std::size_t size) {
  if (size == 0) fail("empty file");
  if (size > ULONG_MAX) fail("file too large");
  int width = 0;
  int height = 0;
  int subsampling = 0;
  check(tjDecompressHeader3(handle_.get(), jpeg, static_cast<unsigned long>(size), &width, &height,
                            &subsampling, &colorspace_));
  if (width == 0 || height == 0)
    fail("the header holds no image size (a truncated or damaged file)");
  if (width < 0 || height < 0 || static_cast<std::int64_t>(width) * height > kMaxPixels) {
    fail("implausible image size " + std::to_string(width) + "x" + std::to_string(height));
  }
  // Divided, not multiplied: scans x pixels of a huge file could overflow.
  if (const std::int64_t scans = count_scans(jpeg, size);
      scans > kMaxScanPixels / (std::int64_t{width} * height)) {
    fail(std::to_string(scans) + " scans of a " + std::to_string(width) + "x" +
         std::to_string(height) +
         " image: far more decoding work than a real JPEG needs (a damaged or hostile file)");
  }
  return {width, height, colorspace_ == TJCS_GRAY};
}

std::pair<int, int> JpegDecoder::scale_for(const JpegHeader& header, double w, double h, int min_w,
                                           int min_h) {
  int count = 0;
  const tjscalingfactor* factors = tjGetScalingFactors(&count);
  std::pair<int, int> best{1, 1};
  double best_value = 1.0;
  for (int i = 0; i < count; ++i) {
    const auto f = factors[i];
    const double value = static_cast<double>(f.num) / f.denom;
    if (value >= best_value) continue;
    // The region's size once the image is decoded at this factor.
    const double sw = w * TJSCALED(header.width, f) / header.width;
    const double sh = h * TJSCALED(header.height, f) / header.height;
    if (sw >= min_w && sh >= min_h) {
      best = {f.num, f.denom};
      best_value = value;
    }
  }
  return best;
}

void JpegDecoder::decode(const std::uint8_t* jpeg, std::size_t size, const JpegHeader& header,
                         std::pair<int, int> scale, Pixels& out) {
  const tjscalingfactor factor{scale.first, scale.second};
  out.width = TJSCALED(header.width, factor);
  out.height = TJSCALED(header.height, factor);
  const bool cmyk = colorspace_ == TJCS_CMYK || colorspace_ == TJCS_YCCK;
  out.channels = header.gray ? 1 : 3;
  const auto pixels = static_cast<std::size_t>(out.width) * static_cast<std::size_t>(out.height);
  out.data.resize(pixels * static_cast<std::size_t>(out.channels));
  if (!cmyk) {
    check(tjDecompress2(handle_.get(), jpeg, static_cast<unsigned long>(size), out.data.data(),
                        out.width, 0, out.height, header.gray ? TJPF_GRAY : TJPF_RGB,
                        kDecodeFlags));
    return;
  }
  // libjpeg hands Adobe's (inverted) CMYK through: R = C x K / 255, as OpenCV does.
  cmyk_.resize(pixels * 4);
  check(tjDecompress2(handle_.get(), jpeg, static_cast<unsigned long>(size), cmyk_.data(),
                      out.width, 0, out.height, TJPF_CMYK, kDecodeFlags));
  for (std::size_t p = 0; p < pixels; ++p) {
    const unsigned k = cmyk_[4 * p + 3];
    for (std::size_t c = 0; c < 3; ++c) {
      out.data[3 * p + c] = static_cast<std::uint8_t>((cmyk_[4 * p + c] * k + 127) / 255);
    }
  }
}

}  // namespace image_folder
