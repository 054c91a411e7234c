#include "formats/safetensors.hpp"

#include <cstdint>
#include <fstream>
#include <stdexcept>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "rig/error.hpp"

namespace rig::formats {
namespace {

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

std::optional<DType> parse_dtype(const std::string& text) {
  for (DType d : {DType::f32, DType::f16, DType::bf16, DType::i32, DType::i64, DType::u8}) {
    if (safetensors_dtype(d) == text) return d;
  }
  return std::nullopt;
}

}  // namespace

files::FileDigest write_safetensors(const std::filesystem::path& file, const NamedTensors& tensors,
                                    const std::map<std::string, std::string>& metadata) {
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  std::uint64_t offset = 0;
  for (const auto& [name, tensor] : tensors) {
    header[name] = {{"dtype", safetensors_dtype(tensor.dtype())},
                    {"shape", tensor.shape()},
                    {"data_offsets", {offset, offset + tensor.nbytes()}}};
    offset += tensor.nbytes();
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');  // the format pads the header to 8 bytes
  files::SyncedFileWriter out(file);
  std::uint64_t length = text.size();
  unsigned char le[8];
  for (int i = 0; i < 8; ++i) le[i] = static_cast<unsigned char>(length >> (8 * i));
  out.write(le, 8);
  out.write(text);
  for (const auto& [name, tensor] : tensors) {
    // Device tensors come to the host here, one at a time.
    const Tensor host = tensor.to_host().contiguous();
    out.write(host.raw_data(), host.nbytes());
  }
  return out.finish();
}

NamedTensors read_safetensors(const std::filesystem::path& file) {
  std::ifstream in(file, std::ios::binary);
  if (!in) throw UserError(fmt::format("cannot open checkpoint file {}", file.string()));
  in.seekg(0, std::ios::end);
  const auto file_size = static_cast<std::uint64_t>(in.tellg());
  in.seekg(0);
  auto corrupt = [&](const std::string& why) {
    return UserError(
        fmt::format("checkpoint file {} is truncated or corrupt: {}", file.string(), why));
  };
  if (file_size < 8) throw corrupt("shorter than the 8-byte header length");
  unsigned char le[8];
  in.read(reinterpret_cast<char*>(le), 8);
  std::uint64_t length = 0;
  for (int i = 0; i < 8; ++i) length |= static_cast<std::uint64_t>(le[i]) << (8 * i);
  if (length > file_size - 8) throw corrupt(fmt::format("header of {} bytes does not fit", length));
  std::string text(length, '\0');
  in.read(text.data(), static_cast<std::streamsize>(length));
  nlohmann::json header = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (header.is_discarded() || !header.is_object()) throw corrupt("header is not a JSON object");
  const std::uint64_t data_start = 8 + length;
  NamedTensors tensors;
  for (const auto& [name, entry] : header.items()) {
    if (name == "__metadata__") continue;
    try {
      auto dtype = parse_dtype(entry.at("dtype").get<std::string>());
      if (!dtype) {
        throw corrupt(fmt::format(
            "tensor '{}' has dtype {}, which rig does not read (F32, F16, BF16, I32, I64, U8)",
            name, entry.at("dtype").dump()));
      }
      Shape shape = entry.at("shape").get<Shape>();
      auto offsets = entry.at("data_offsets").get<std::vector<std::uint64_t>>();
      if (offsets.size() != 2 || offsets[1] < offsets[0] || data_start + offsets[1] > file_size) {
        throw corrupt(fmt::format("tensor '{}' lies outside the file", name));
      }
      Tensor t = Tensor::empty(shape, *dtype);
      if (t.nbytes() != offsets[1] - offsets[0]) {
        throw corrupt(fmt::format("tensor '{}' has {} bytes for shape {}", name,
                                  offsets[1] - offsets[0], to_string(shape)));
      }
      in.seekg(static_cast<std::streamoff>(data_start + offsets[0]));
      in.read(reinterpret_cast<char*>(t.raw_data()), static_cast<std::streamsize>(t.nbytes()));
      if (!in) throw corrupt(fmt::format("tensor '{}' could not be read", name));
      tensors.emplace(name, std::move(t));
    } catch (const nlohmann::json::exception& e) {
      throw corrupt(fmt::format("tensor '{}': {}", name, e.what()));
    }
  }
  return tensors;
}

}  // namespace rig::formats
