// The safetensors reader of checkpoints (model.safetensors,
// optimizer.safetensors): its header and every tensor's byte range, checked
// before a tensor is allocated. Input: the file's bytes.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <sstream>
#include <string>
#include <vector>

#include "formats/safetensors_layout.hpp"
#include "fuzz_util.hpp"
#include "rig/error.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::istringstream in(std::string(rig_fuzz::as_text(data, size)));
  try {
    const auto entries = rig::formats::read_safetensors_layout(in, size, "fuzz.safetensors");
    for (const auto& e : entries) {
      // What read_safetensors then allocates and reads must lie inside the input.
      if (e.offset > size || e.bytes > size - e.offset) std::abort();
      if (static_cast<std::uint64_t>(rig::shape_numel(e.shape)) * rig::dtype_size(e.dtype) !=
          e.bytes) {
        std::abort();
      }
      std::vector<char> tensor(e.bytes);
      in.clear();
      in.seekg(static_cast<std::streamoff>(e.offset));
      in.read(tensor.data(), static_cast<std::streamsize>(e.bytes));
      if (!in) std::abort();
    }
  } catch (const rig::UserError&) {
  }
  return 0;
}
