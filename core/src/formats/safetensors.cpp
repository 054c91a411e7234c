#include "formats/safetensors.hpp"

#include <cstdint>
#include <fstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "formats/safetensors_layout.hpp"
#include "rig/error.hpp"

namespace rig::formats {

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
  NamedTensors tensors;
  // Every entry's size is checked against the file before its tensor is allocated.
  for (const auto& entry : read_safetensors_layout(in, file_size, file.string())) {
    Tensor t = Tensor::empty(entry.shape, entry.dtype);
    in.seekg(static_cast<std::streamoff>(entry.offset));
    in.read(reinterpret_cast<char*>(t.raw_data()), static_cast<std::streamsize>(entry.bytes));
    if (!in) {
      throw UserError(
          fmt::format("checkpoint file {} is truncated or corrupt: tensor '{}' could "
                      "not be read",
                      file.string(), entry.name));
    }
    tensors.emplace(entry.name, std::move(t));
  }
  return tensors;
}

}  // namespace rig::formats
