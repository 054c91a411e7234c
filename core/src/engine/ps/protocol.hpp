// The parameter-server protocol: what each message kind means, and how a set
// of named tensors travels in one payload (a YAML header, then the raw data).
//
//   worker -> server  init      worker 0, once: the server's shard, its values and optimizer
//                               state, the run's length (payload: a pack)
//   worker -> server  push      a piece of a worker's gradient for `clock`, at flat `offset`
//   worker -> server  pull      the weights a worker needs to compute its push for `clock`
//                               (kFinalClock: the final ones, once every worker is done)
//   server -> worker  weights   the shard's values; count = applied pushes, offset = staleness
//   worker -> server  snapshot  worker 0: values and optimizer state for a checkpoint at step
//                               `clock`; count 1: the final one, after every worker is done
//   server -> worker  state     the snapshot (payload: a pack)
//   worker -> server  done      the worker pushed its last gradient; count bit 0: the
//                               final snapshot follows (worker 0), bit 1: a final pull
//                               follows (the server stays until it has answered it)
#pragma once

#include <cstdint>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include <yaml-cpp/yaml.h>

#include "rig/parameter_server.hpp"
#include "rig/tensor.hpp"

namespace rig::engine::ps {

// A pull for this clock is answered once every worker is done: the final weights.
inline constexpr std::int64_t kFinalClock = std::numeric_limits<std::int64_t>::max();

enum class Kind : std::int32_t { init = 1, push, pull, weights, snapshot, state, done };
// The bits of a done message's count.
inline constexpr std::int64_t kDoneSnapshotFollows = 1;
inline constexpr std::int64_t kDonePullFollows = 2;

std::string_view kind_name(std::int32_t kind);

PsMessage message(Kind kind, int peer, std::int64_t clock = 0, std::int64_t offset = 0,
                  std::int64_t count = 0);

// `t` itself when it is a contiguous CPU tensor, else a contiguous host copy.
Tensor host_contiguous(const Tensor& t);
// A contiguous tensor's bytes (read from the device when it lives there).
std::vector<std::byte> bytes_of(const Tensor& t);
// A payload's f32 values into `dst` (a contiguous f32 CPU tensor, a slice of
// the buffer they belong in: no tensor of their own); throws when the payload
// holds another number of bytes.
void copy_floats(const PsMessage& m, Tensor dst);

using NamedTensors = std::vector<std::pair<std::string, Tensor>>;

struct Pack {
  YAML::Node meta;
  NamedTensors tensors;  // on the CPU, 1-D
  const Tensor& at(const std::string& name) const;
};

std::vector<std::byte> pack(const YAML::Node& meta, const NamedTensors& tensors);
Pack unpack(const std::vector<std::byte>& payload);

}  // namespace rig::engine::ps
