// Dtype, device and shape helpers.
#include <algorithm>
#include <charconv>
#include <cstdlib>
#include <stdexcept>
#include <string_view>

#include <fmt/format.h>

#include "rig/device.hpp"
#include "rig/dtype.hpp"
#include "rig/environment_switch.hpp"
#include "rig/shape.hpp"

namespace rig {

std::size_t dtype_size(DType dtype) {
  switch (dtype) {
    case DType::f32:
    case DType::i32:
      return 4;
    case DType::f16:
    case DType::bf16:
      return 2;
    case DType::i64:
      return 8;
    case DType::u8:
      return 1;
  }
  throw std::invalid_argument("dtype_size: unknown dtype");
}

std::string_view dtype_name(DType dtype) {
  switch (dtype) {
    case DType::f32:
      return "f32";
    case DType::f16:
      return "f16";
    case DType::bf16:
      return "bf16";
    case DType::i32:
      return "i32";
    case DType::i64:
      return "i64";
    case DType::u8:
      return "u8";
  }
  return "unknown";
}

bool is_floating(DType dtype) {
  return dtype == DType::f32 || dtype == DType::f16 || dtype == DType::bf16;
}

bool cuda_emulator_requested() {
  return environment_switch("RIG_CUDA_EMULATOR", "run device: cuda's kernels in the SIMT emulator");
}

bool cuda_emulator_host_only_requested() {
  return environment_switch("RIG_CUDA_EMULATOR_HOST_ONLY",
                            "queue every kernel but run none, to time the host's part of a "
                            "step");
}

std::size_t cuda_emulator_memory_bytes() {
  constexpr std::size_t kMiB = std::size_t{1} << 20U;
  constexpr std::size_t kDefaultMiB = 81920;
  const char* value = std::getenv("RIG_CUDA_EMULATOR_MEMORY_MB");
  const std::string_view text = value == nullptr ? "" : value;
  if (text.empty()) return kDefaultMiB * kMiB;
  std::size_t mib = 0;
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), mib);
  if (error != std::errc() || end != text.data() + text.size() || mib == 0 ||
      mib > (std::size_t{1} << 40U)) {
    throw std::invalid_argument(fmt::format(
        "RIG_CUDA_EMULATOR_MEMORY_MB={}: expected the emulated GPU's memory as a whole number "
        "of MiB (16384 for a 16 GB GPU; unset: 81920, an 80 GB H100's)",
        text));
  }
  return mib * kMiB;
}

std::string to_string(Device device) {
  switch (device.type) {
    case Device::Type::cpu:
      return "cpu";
    case Device::Type::sim:
      return "sim";
    case Device::Type::cuda:
      break;
  }
  return fmt::format("cuda:{}", device.index);
}

std::string to_string(const Shape& shape) {
  return fmt::format("[{}]", fmt::join(shape, ","));
}

std::int64_t shape_numel(const Shape& shape) {
  std::int64_t n = 1;
  for (auto d : shape) {
    if (d < 0) throw std::invalid_argument("negative dimension in shape " + to_string(shape));
    n *= d;
  }
  return n;
}

Strides contiguous_strides(const Shape& shape) {
  Strides strides(shape.size());
  std::int64_t stride = 1;
  for (std::size_t i = shape.size(); i-- > 0;) {
    strides[i] = stride;
    stride *= std::max<std::int64_t>(shape[i], 1);
  }
  return strides;
}

Shape broadcast_shapes(const Shape& a, const Shape& b, std::string_view op) {
  const std::size_t n = std::max(a.size(), b.size());
  Shape out(n);
  for (std::size_t i = 0; i < n; ++i) {
    // Aligned from the right; a missing axis counts as 1.
    const std::int64_t da = i < n - a.size() ? 1 : a[i - (n - a.size())];
    const std::int64_t db = i < n - b.size() ? 1 : b[i - (n - b.size())];
    if (da != db && da != 1 && db != 1) {
      throw std::invalid_argument(fmt::format(
          "{}: shapes {} and {} cannot be broadcast (axis {}: {} vs {})", op, to_string(a),
          to_string(b), static_cast<std::int64_t>(i) - static_cast<std::int64_t>(n), da, db));
    }
    out[i] = da == 1 ? db : da;
  }
  return out;
}

}  // namespace rig
