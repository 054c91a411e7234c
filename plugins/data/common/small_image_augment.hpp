// Per-channel mean / std normalisation and the small-image augmentations
// (random crop from a zero-padded image, horizontal flip), fused into one
// pass from uint8 pixels [C, H, W] to floats. The random draws of a sample
// depend only on (seed, epoch, data-set index), never on the rank, the world
// size or a thread, so every sharding of a global batch sees the same crops.
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "epoch_sampler.hpp"
#include "rig/error.hpp"

namespace rig_data {

// Pixel value v in 0..255 -> (v / 255 - mean[c]) / std[c], as a table per channel.
class PixelNormaliser {
 public:
  PixelNormaliser(const std::string& plugin, std::vector<double> mean, std::vector<double> std)
      : mean_(std::move(mean)), std_(std::move(std)) {
    if (mean_.size() != std_.size() || mean_.empty()) {
      throw rig::UserError(
          fmt::format("{}: mean has {} value(s) but std has {}; give one per channel", plugin,
                      mean_.size(), std_.size()));
    }
    for (std::size_t c = 0; c < std_.size(); ++c) {
      if (!(std_[c] > 0.0)) {
        throw rig::UserError(fmt::format("{}: std[{}] must be > 0, got {}", plugin, c, std_[c]));
      }
    }
    table_.resize(mean_.size() * 256);
    for (std::size_t c = 0; c < mean_.size(); ++c) {
      for (int v = 0; v < 256; ++v) table_[c * 256 + v] = (*this)(static_cast<std::int64_t>(c), v);
    }
  }

  std::int64_t channels() const { return static_cast<std::int64_t>(mean_.size()); }
  // The 256 normalised values of channel c.
  const float* table(std::int64_t c) const { return table_.data() + c * 256; }
  // Any value in [0, 255] (interactive input may hold non-integers).
  float operator()(std::int64_t c, double value) const {
    return static_cast<float>((value / 255.0 - mean_[c]) / std_[c]);
  }

 private:
  std::vector<double> mean_;
  std::vector<double> std_;
  std::vector<float> table_;  // [channels, 256]
};

// Training augmentations of the small image sets.
struct Augment {
  std::int64_t pad = 0;  // random crop of H x W from the image zero-padded by `pad` on every side
  bool flip = false;     // mirror left-right with probability 1/2
};

// Where a sample's H x W window starts in its padded image, and whether it is
// mirrored. Without augmentation the window is the image itself.
struct CropFlip {
  std::int64_t dy = 0;  // in [0, 2 pad]; pad means no shift
  std::int64_t dx = 0;
  bool flip = false;
};

// The draws of sample `index` in `epoch`: draws 3 index .. 3 index + 2 of the
// (seed, kAugment, epoch) stream.
inline CropFlip draw_crop_flip(const Augment& augment, std::uint64_t seed, std::int64_t epoch,
                               std::int64_t index) {
  constexpr std::uint64_t kDraws = 3;
  CropFlip draw{augment.pad, augment.pad, false};
  const Stream stream(seed, kAugment, static_cast<std::uint64_t>(epoch));
  const std::uint64_t base = static_cast<std::uint64_t>(index) * kDraws;
  if (augment.pad > 0) {
    const auto span = static_cast<std::uint64_t>(2 * augment.pad + 1);
    draw.dy = static_cast<std::int64_t>(stream.below(base, span));
    draw.dx = static_cast<std::int64_t>(stream.below(base + 1, span));
  }
  if (augment.flip) draw.flip = (stream.bits(base + 2) >> 63U) != 0;
  return draw;
}

// out(c, y, x) = normalised in(c, y + dy - pad, x' + dx - pad) with x' = W-1-x
// when mirrored, else x; a pixel outside the image is 0 (black) before
// normalisation, as torchvision's RandomCrop(padding) does.
inline void render_image(const std::uint8_t* in, std::int64_t channels, std::int64_t height,
                         std::int64_t width, const PixelNormaliser& norm, std::int64_t pad,
                         const CropFlip& draw, float* out) {
  const std::int64_t oy = draw.dy - pad;  // output (y, x) reads input (y + oy, x + ox)
  const std::int64_t ox = draw.dx - pad;
  const std::int64_t x0 = std::clamp<std::int64_t>(-ox, 0, width);  // first x with a source pixel
  const std::int64_t x1 = std::clamp<std::int64_t>(width - ox, x0, width);  // one past the last
  for (std::int64_t c = 0; c < channels; ++c) {
    const float* lut = norm.table(c);
    const float zero = lut[0];
    const std::uint8_t* plane = in + c * height * width;
    for (std::int64_t y = 0; y < height; ++y) {
      float* row = out + (c * height + y) * width;
      const std::int64_t sy = y + oy;
      if (sy < 0 || sy >= height) {
        std::fill(row, row + width, zero);
        continue;
      }
      const std::uint8_t* src = plane + sy * width;  // src[x + ox] for x in [x0, x1)
      if (!draw.flip) {
        std::fill(row, row + x0, zero);
        for (std::int64_t x = x0; x < x1; ++x) row[x] = lut[src[x + ox]];
        std::fill(row + x1, row + width, zero);
      } else {  // column x of the crop lands in column W-1-x
        std::fill(row, row + (width - x1), zero);
        for (std::int64_t x = x0; x < x1; ++x) row[width - 1 - x] = lut[src[x + ox]];
        std::fill(row + (width - x0), row + width, zero);
      }
    }
  }
}

}  // namespace rig_data
