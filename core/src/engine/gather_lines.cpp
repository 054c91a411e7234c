#include "engine/gather_lines.hpp"

#include <algorithm>
#include <cstring>
#include <vector>

#include "rig/error.hpp"

namespace rig::engine {
namespace {

// index (8 bytes), length (8 bytes), the bytes; repeated.
std::vector<std::uint8_t> pack(const IndexedLines& lines) {
  std::vector<std::uint8_t> bytes;
  for (const auto& [index, line] : lines) {
    const std::int64_t header[2] = {index, static_cast<std::int64_t>(line.size())};
    const auto* h = reinterpret_cast<const std::uint8_t*>(header);
    bytes.insert(bytes.end(), h, h + sizeof(header));
    bytes.insert(bytes.end(), line.begin(), line.end());
  }
  return bytes;
}

void unpack(const std::uint8_t* bytes, std::int64_t size, IndexedLines& into) {
  std::int64_t at = 0;
  while (at < size) {
    std::int64_t header[2];
    std::memcpy(header, bytes + at, sizeof(header));
    at += static_cast<std::int64_t>(sizeof(header));
    into[header[0]].assign(reinterpret_cast<const char*>(bytes + at),
                           static_cast<std::size_t>(header[1]));
    at += header[1];
  }
}

}  // namespace

IndexedLines gather_lines(Communicator& comm, IndexedLines mine) {
  if (comm.size() == 1) return mine;
  const std::vector<std::uint8_t> packed = pack(mine);
  Tensor size =
      Tensor::from_vector(std::vector<std::int64_t>{static_cast<std::int64_t>(packed.size())}, {1});
  Tensor sizes = Tensor::zeros({comm.size()}, DType::i64);
  comm.allgather(size, sizes)->wait();
  const std::vector<std::int64_t> all = sizes.to_int_vector();
  const std::int64_t longest = *std::max_element(all.begin(), all.end());
  // allgather wants equal inputs: every rank pads to the longest.
  Tensor padded = Tensor::zeros({std::max<std::int64_t>(longest, 1)}, DType::u8);
  std::copy(packed.begin(), packed.end(), padded.data<std::uint8_t>());
  Tensor gathered = Tensor::zeros({comm.size() * padded.numel()}, DType::u8);
  comm.allgather(padded, gathered)->wait();
  IndexedLines lines;
  if (comm.rank() != 0) return lines;
  for (int r = 0; r < comm.size(); ++r) {
    unpack(gathered.data<std::uint8_t>() + r * padded.numel(), all[static_cast<std::size_t>(r)],
           lines);
  }
  return lines;
}

}  // namespace rig::engine
