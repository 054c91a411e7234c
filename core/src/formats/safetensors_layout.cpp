#include "formats/safetensors_layout.hpp"

#include <algorithm>
#include <optional>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "rig/error.hpp"

namespace rig::formats {
namespace {

constexpr DType kDTypes[] = {DType::f32, DType::f16, DType::bf16,
                             DType::i32, DType::i64, DType::u8};

std::optional<DType> parse_dtype(const std::string& text) {
  for (DType d : kDTypes) {
    if (safetensors_dtype(d) == text) return d;
  }
  return std::nullopt;
}

// numel x `element` bytes, or nullopt when a dimension is negative or the
// product overflows 64 bits (a header that says so is corrupt).
std::optional<std::uint64_t> byte_count(const Shape& shape, std::uint64_t element) {
  std::uint64_t bytes = element;
  for (const std::int64_t dim : shape) {
    if (dim < 0) return std::nullopt;
    if (__builtin_mul_overflow(bytes, static_cast<std::uint64_t>(dim), &bytes)) return std::nullopt;
  }
  return bytes;
}

// A JSON array of whole numbers >= 0, `count` of them unless it is 0. Checked
// before get<>(): nlohmann converts a float (1e30, or an integer beyond 64
// bits, which it parses as a float) to an integer with an out-of-range cast.
bool whole_numbers(const nlohmann::json& array, std::size_t count = 0) {
  if (!array.is_array() || (count != 0 && array.size() != count)) return false;
  return std::all_of(array.begin(), array.end(),
                     [](const nlohmann::json& v) { return v.is_number_unsigned(); });
}

}  // namespace

std::string safetensors_dtype(DType dtype) {
  switch (dtype) {
    case DType::f32:
      return "F32";
    case DType::f16:
      return "F16";
    case DType::bf16:
      return "BF16";
    case DType::i32:
      return "I32";
    case DType::i64:
      return "I64";
    case DType::u8:
      return "U8";
  }
  return "F32";
}

std::vector<SafetensorsEntry> read_safetensors_layout(std::istream& in, std::uint64_t file_size,
                                                      const std::string& file) {
  auto corrupt = [&](const std::string& why) {
    return UserError(fmt::format("checkpoint file {} is truncated or corrupt: {}", file, why));
  };
  if (file_size < 8) throw corrupt("shorter than the 8-byte header length");
  unsigned char le[8];
  if (!in.read(reinterpret_cast<char*>(le), 8)) throw corrupt("cannot read the header length");
  std::uint64_t length = 0;
  for (int i = 0; i < 8; ++i) length |= static_cast<std::uint64_t>(le[i]) << (8 * i);
  if (length > file_size - 8) throw corrupt(fmt::format("header of {} bytes does not fit", length));
  std::string text(length, '\0');
  if (!in.read(text.data(), static_cast<std::streamsize>(length))) {
    throw corrupt(fmt::format("cannot read the header of {} bytes", length));
  }
  const nlohmann::json header = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (header.is_discarded() || !header.is_object()) throw corrupt("header is not a JSON object");
  const std::uint64_t data_start = 8 + length;
  const std::uint64_t data_size = file_size - data_start;
  std::vector<SafetensorsEntry> entries;
  for (const auto& [name, entry] : header.items()) {
    if (name == "__metadata__") continue;
    try {
      const auto dtype = parse_dtype(entry.at("dtype").get<std::string>());
      if (!dtype) {
        throw corrupt(fmt::format(
            "tensor '{}' has dtype {}, which rig does not read (F32, F16, BF16, I32, I64, U8)",
            name, entry.at("dtype").dump()));
      }
      if (!whole_numbers(entry.at("shape"))) {
        throw corrupt(fmt::format("tensor '{}' has shape {}; expected a list of whole numbers >= 0",
                                  name, entry.at("shape").dump()));
      }
      if (!whole_numbers(entry.at("data_offsets"), 2)) {
        throw corrupt(
            fmt::format("tensor '{}' has data_offsets {}; expected two whole numbers >= 0", name,
                        entry.at("data_offsets").dump()));
      }
      Shape shape = entry.at("shape").get<Shape>();
      const auto offsets = entry.at("data_offsets").get<std::vector<std::uint64_t>>();
      // Compared without adding data_start, which a huge offset would wrap past.
      if (offsets[1] < offsets[0] || offsets[1] > data_size) {
        throw corrupt(
            fmt::format("tensor '{}' lies outside the file (data_offsets {}, {} bytes of "
                        "data after the header)",
                        name, entry.at("data_offsets").dump(), data_size));
      }
      // Checked before a tensor of that shape is allocated.
      const auto bytes = byte_count(shape, dtype_size(*dtype));
      if (!bytes || *bytes != offsets[1] - offsets[0]) {
        throw corrupt(fmt::format("tensor '{}' has {} bytes for {} shape {}", name,
                                  offsets[1] - offsets[0], safetensors_dtype(*dtype),
                                  entry.at("shape").dump()));
      }
      entries.push_back({name, *dtype, std::move(shape), data_start + offsets[0], *bytes});
    } catch (const nlohmann::json::exception& e) {
      throw corrupt(fmt::format("tensor '{}': {}", name, e.what()));
    }
  }
  return entries;
}

}  // namespace rig::formats
