// Reading and writing the safetensors format (an 8-byte little-endian header
// length, a JSON header naming each tensor's dtype, shape and byte range, then
// the raw bytes), so checkpoints open in other tools.
#pragma once

#include <filesystem>
#include <map>
#include <string>

#include "formats/checkpoint_files.hpp"
#include "rig/tensor.hpp"

namespace rig::formats {

using NamedTensors = std::map<std::string, Tensor>;

// Writes `tensors` (contiguous CPU tensors) and string metadata to `file`,
// fsynced; returns the written file's size and CRC-32C.
files::FileDigest write_safetensors(const std::filesystem::path& file, const NamedTensors& tensors,
                                    const std::map<std::string, std::string>& metadata = {});

// Reads every tensor; throws UserError naming the file if it is truncated or corrupt.
NamedTensors read_safetensors(const std::filesystem::path& file);

}  // namespace rig::formats
