// The geometry of the augmentations (torchvision's RandomResizedCrop and
// Resize + CenterCrop) and one bilinear resampling pass that crops, resizes,
// flips and normalises into the planar float output.
#pragma once

#include <array>
#include <cstdint>

#include "../common/epoch_sampler.hpp"

namespace image_folder {

// A region of the source image, in source pixels (left, top, width, height).
struct Box {
  double x = 0;
  double y = 0;
  double w = 0;
  double h = 0;
};

struct CropRange {
  double scale_min = 0.08, scale_max = 1.0;             // of the image's area
  double ratio_min = 3.0 / 4.0, ratio_max = 4.0 / 3.0;  // width / height
};

// Draws used per sample from its augmentation stream: 4 per attempt, then the flip.
inline constexpr int kCropAttempts = 10;
inline constexpr std::uint64_t kFlipDraw = 4 * kCropAttempts;
inline constexpr std::uint64_t kDrawsPerSample = 64;

// torchvision's RandomResizedCrop.get_params: 10 tries at a random area and
// log-uniform aspect ratio, else the largest centred crop within the ratio
// range. Draws base + 4k .. base + 4k + 3 of `stream` for attempt k.
Box random_resized_crop(int width, int height, const CropRange& range,
                        const rig_data::Stream& stream, std::uint64_t base);

// torchvision's Resize(resize) (shorter side to `resize`, the longer one
// truncated) then CenterCrop(size), as a region of the source image.
Box resize_center_crop(int width, int height, int resize, int size);

struct Normalise {
  std::array<float, 3> mean{};  // on the [0, 1] scale
  std::array<float, 3> std{};
};

// Bilinear sampling of `box` of the src image (interleaved 8-bit, 1 or 3
// channels) to size x size, like a half-pixel-centred resize (PyTorch's
// align_corners=False), without antialiasing; mirrored when `flip`; written as
// (x / 255 - mean) / std to 3 planes of size x size floats at dst. A grey
// source fills all three planes.
void resample(const std::uint8_t* src, int width, int height, int channels, const Box& box,
              int size, bool flip, const Normalise& normalise, float* dst);

}  // namespace image_folder
