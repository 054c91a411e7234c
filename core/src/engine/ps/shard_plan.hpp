// Which part of the flat f32 parameter buffer each parameter server holds:
// S contiguous, non-empty ranges balanced by bytes, the same on every process.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "rig/shape.hpp"

namespace rig::engine::ps {

// One parameter of the flat buffer, in buffer order.
struct ParameterExtent {
  std::string name;
  Shape shape;              // numel = product of shape (1 for a 0-d shape)
  std::int64_t offset = 0;  // in elements; parameters are contiguous and in order from 0
};

// The part of one parameter that a shard holds.
struct ShardPiece {
  std::size_t parameter = 0;  // index into the ParameterExtent list
  std::string name;           // the parameter's name (unchanged, even for a part of it)
  // The whole parameter's shape, or [rows, dims 1..] for a range of its rows.
  Shape shape;
  std::int64_t offset = 0;  // into the full flat buffer
  std::int64_t numel = 0;
  std::int64_t parameter_numel = 0;  // the whole parameter's element count
  bool whole() const { return numel == parameter_numel; }
};

struct Shard {
  std::int64_t begin = 0;  // [begin, end) of the full flat buffer, in elements
  std::int64_t end = 0;
  std::vector<ShardPiece> pieces;  // in buffer order
  std::int64_t numel() const { return end - begin; }
};

// Splits the buffer among `servers` shards (algorithm and guarantee in
// shard_plan.cpp). `split_parameters`: the optimizer is element-wise, so a
// parameter may be cut between two servers at a row boundary (a multiple of
// numel / shape[0]); else every parameter goes whole to one server (layer-wise
// optimizers such as novograd and LARC need whole parameters). Throws
// UserError when `servers` < 1 or there are fewer pieces than servers, and
// std::invalid_argument when the extents are not contiguous from 0 and in order.
std::vector<Shard> plan_shards(const std::vector<ParameterExtent>& parameters, int servers,
                               bool split_parameters);

// One line per server for the log, e.g.
// "server 0: elements [0, 1200), 3 parameter(s) (1 partial), 4.7 KiB".
std::vector<std::string> describe_shards(const std::vector<Shard>& shards);

}  // namespace rig::engine::ps
