#include "transforms.hpp"

#include <algorithm>
#include <cmath>
#include <vector>

namespace image_folder {

Box random_resized_crop(int width, int height, const CropRange& range,
                        const rig_data::Stream& stream, std::uint64_t base) {
  const double area = static_cast<double>(width) * height;
  const double log_min = std::log(range.ratio_min);
  const double log_max = std::log(range.ratio_max);
  for (std::uint64_t k = 0; k < kCropAttempts; ++k) {
    const std::uint64_t draw = base + 4 * k;
    const double target =
        area * (range.scale_min + (range.scale_max - range.scale_min) * stream.uniform(draw));
    const double ratio = std::exp(log_min + (log_max - log_min) * stream.uniform(draw + 1));
    // Python's round() is round-half-even, as nearbyint in the default mode.
    const auto w = static_cast<std::int64_t>(std::nearbyint(std::sqrt(target * ratio)));
    const auto h = static_cast<std::int64_t>(std::nearbyint(std::sqrt(target / ratio)));
    if (w > 0 && w <= width && h > 0 && h <= height) {
      const auto top = stream.below(draw + 2, static_cast<std::uint64_t>(height - h + 1));
      const auto left = stream.below(draw + 3, static_cast<std::uint64_t>(width - w + 1));
      return {static_cast<double>(left), static_cast<double>(top), static_cast<double>(w),
              static_cast<double>(h)};
    }
  }
  const double in_ratio = static_cast<double>(width) / height;
  std::int64_t w = width;
  std::int64_t h = height;
  if (in_ratio < range.ratio_min) {
    h = static_cast<std::int64_t>(std::nearbyint(w / range.ratio_min));
  } else if (in_ratio > range.ratio_max) {
    w = static_cast<std::int64_t>(std::nearbyint(h * range.ratio_max));
  }
  return {static_cast<double>((width - w) / 2), static_cast<double>((height - h) / 2),
          static_cast<double>(w), static_cast<double>(h)};
}

Box resize_center_crop(int width, int height, int resize, int size) {
  const bool portrait = width <= height;
  const double shorter = portrait ? width : height;
  const double longer = portrait ? height : width;
  const auto resized_long = static_cast<std::int64_t>(resize * longer / shorter);
  const double rw = portrait ? resize : static_cast<double>(resized_long);
  const double rh = portrait ? static_cast<double>(resized_long) : resize;
  const double left = std::nearbyint((rw - size) / 2.0);
  const double top = std::nearbyint((rh - size) / 2.0);
  const double sx = width / rw;
  const double sy = height / rh;
  return {left * sx, top * sy, size * sx, size * sy};
}

namespace {

// For each output coordinate: the two source coordinates and the second's weight.
struct Taps {
  std::vector<int> lo, hi;
  std::vector<float> weight;
};

Taps taps(double start, double extent, int source, int size) {
  Taps t;
  t.lo.resize(static_cast<std::size_t>(size));
  t.hi.resize(static_cast<std::size_t>(size));
  t.weight.resize(static_cast<std::size_t>(size));
  const double step = extent / size;
  for (int o = 0; o < size; ++o) {
    const double s = std::clamp(start + (o + 0.5) * step - 0.5, 0.0, source - 1.0);
    const int lo = std::min(static_cast<int>(s), std::max(source - 2, 0));
    const auto k = static_cast<std::size_t>(o);
    t.lo[k] = lo;
    t.hi[k] = std::min(lo + 1, source - 1);
    t.weight[k] = static_cast<float>(s - lo);
  }
  return t;
}

}  // namespace

void resample(const std::uint8_t* src, int width, int height, int channels, const Box& box,
              int size, bool flip, const Normalise& normalise, float* dst) {
  Taps cols = taps(box.x, box.w, width, size);
  const Taps rows = taps(box.y, box.h, height, size);
  if (flip) {
    std::reverse(cols.lo.begin(), cols.lo.end());
    std::reverse(cols.hi.begin(), cols.hi.end());
    std::reverse(cols.weight.begin(), cols.weight.end());
  }
  // Columns [first, last] are the only ones read.
  const int first = *std::min_element(cols.lo.begin(), cols.lo.end());
  const int last = *std::max_element(cols.hi.begin(), cols.hi.end());
  const int span = last - first + 1;
  for (auto& x : cols.lo) x -= first;
  for (auto& x : cols.hi) x -= first;

  // (x / 255 - mean) / std = x * a + b.
  std::array<float, 3> a{};
  std::array<float, 3> b{};
  for (int c = 0; c < 3; ++c) {
    a[c] = 1.0F / (255.0F * normalise.std[c]);
    b[c] = -normalise.mean[c] / normalise.std[c];
  }
  const auto plane = static_cast<std::size_t>(size) * static_cast<std::size_t>(size);
  const auto stride = static_cast<std::size_t>(width) * static_cast<std::size_t>(channels);
  // Offsets of the taps in the interleaved row below.
  for (auto& x : cols.lo) x *= channels;
  for (auto& x : cols.hi) x *= channels;
  // The vertically interpolated source row (interleaved, columns first..last):
  // a contiguous loop the compiler vectorises.
  const auto row_size = static_cast<std::size_t>(span) * static_cast<std::size_t>(channels);
  const std::size_t row_begin =
      static_cast<std::size_t>(first) * static_cast<std::size_t>(channels);
  std::vector<float> row(row_size);
  for (int oy = 0; oy < size; ++oy) {
    const auto ky = static_cast<std::size_t>(oy);
    const std::uint8_t* r0 = src + static_cast<std::size_t>(rows.lo[ky]) * stride + row_begin;
    const std::uint8_t* r1 = src + static_cast<std::size_t>(rows.hi[ky]) * stride + row_begin;
    const float wy = rows.weight[ky];
    float* tmp = row.data();
    for (std::size_t i = 0; i < row_size; ++i) {
      const float v0 = r0[i];
      const float v1 = r1[i];
      tmp[i] = v0 + wy * (v1 - v0);
    }
    for (int c = 0; c < 3; ++c) {
      const float* in = tmp + (channels == 1 ? 0 : c);
      float* out = dst + static_cast<std::size_t>(c) * plane + ky * static_cast<std::size_t>(size);
      const float ac = a[c];
      const float bc = b[c];
      for (int ox = 0; ox < size; ++ox) {
        const auto kx = static_cast<std::size_t>(ox);
        const float v0 = in[cols.lo[kx]];
        const float v1 = in[cols.hi[kx]];
        out[ox] = (v0 + cols.weight[kx] * (v1 - v0)) * ac + bc;
      }
    }
  }
}

}  // namespace image_folder
