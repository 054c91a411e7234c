// The layout of a safetensors file (the 8-byte header length, the JSON header
// naming each tensor's dtype, shape and byte range), read and checked against
// the file's size before any tensor is allocated: a corrupt or hostile header
// is a UserError, never a huge allocation or a read past the end.
#pragma once

#include <cstdint>
#include <istream>
#include <string>
#include <vector>

#include "rig/dtype.hpp"
#include "rig/shape.hpp"

namespace rig::formats {

struct SafetensorsEntry {
  std::string name;
  DType dtype = DType::f32;
  Shape shape;
  std::uint64_t offset = 0;  // of the tensor's first byte, from the start of the file
  std::uint64_t bytes = 0;   // exactly numel x dtype size
};

// "F32", "F16", "BF16", "I32", "I64", "U8".
std::string safetensors_dtype(DType dtype);

// Reads the header from `in` (positioned at the file's start; `file_size`
// bytes long) and checks every entry: a known dtype, dimensions >= 0, a byte
// range inside the file whose length matches the shape. `file` names the
// file in messages. Throws UserError.
std::vector<SafetensorsEntry> read_safetensors_layout(std::istream& in, std::uint64_t file_size,
                                                      const std::string& file);

}  // namespace rig::formats
