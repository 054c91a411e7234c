// image_folder's JPEG path, as a worker runs it on one file: the header
// (TurboJPEG), the eval and the train crop box, the DCT scale for it, the
// decode, and the resample into the batch. Input: the .jpg file's bytes.
#include <cstddef>
#include <cstdint>
#include <vector>

#include "../../plugins/data/image_folder/jpeg_decoder.hpp"
#include "../../plugins/data/image_folder/transforms.hpp"

namespace {

constexpr int kImageSize = 32;
constexpr std::int64_t kMaxDecodedPixels = std::int64_t{1} << 22;

void crop(image_folder::JpegDecoder& decoder, const std::uint8_t* data, std::size_t size,
          bool train) {
  const auto header = decoder.header(data, size);
  // Headers claiming many megapixels (legal, and checked above) decode for
  // tenths of a second each at any scale; decoding them would slow the search
  // tenfold without reaching more of rig's code.
  if (std::int64_t{header.width} * header.height > kMaxDecodedPixels) return;
  const rig_data::Stream stream(7, rig_data::kAugment, 0);
  const image_folder::Box box =
      train ? image_folder::random_resized_crop(header.width, header.height, {}, stream, 0)
            : image_folder::resize_center_crop(header.width, header.height, kImageSize + 4,
                                               kImageSize);
  const auto scale =
      image_folder::JpegDecoder::scale_for(header, box.w, box.h, kImageSize, kImageSize);
  image_folder::Pixels pixels;
  decoder.decode(data, size, header, scale, pixels);
  const double fx = static_cast<double>(pixels.width) / header.width;
  const double fy = static_cast<double>(pixels.height) / header.height;
  std::vector<float> out(3 * kImageSize * kImageSize);
  image_folder::resample(pixels.data.data(), pixels.width, pixels.height, pixels.channels,
                         {box.x * fx, box.y * fy, box.w * fx, box.h * fy}, kImageSize, train,
                         {{0.5F, 0.5F, 0.5F}, {0.25F, 0.25F, 0.25F}}, out.data());
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  // One decoder for the process, as each worker keeps one across files.
  static image_folder::JpegDecoder decoder;
  for (const bool train : {false, true}) {
    try {
      crop(decoder, data, size, train);
    } catch (const image_folder::CorruptJpeg&) {
    }
  }
  return 0;
}
