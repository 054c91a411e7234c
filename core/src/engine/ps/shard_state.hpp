// An optimizer's state cut into one server's shard, and put back together
// from every server's: a state tensor laid out like the flat parameter buffer
// is cut by offset, one with an element per parameter (novograd's per-layer
// norms) by the shard's parameters, and anything else (adam's step count) is
// the same on every server and travels whole.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "engine/ps/shard_plan.hpp"
#include "rig/tensor.hpp"

namespace rig::engine::ps {

using OptimizerState = std::map<std::string, Tensor>;

// `full` covers `total_numel` elements in `parameter_count` parameters.
OptimizerState shard_state(const OptimizerState& full, const Shard& shard, std::int64_t total_numel,
                           std::size_t parameter_count);

// states[i] is server i's, for shards[i]; the result lives on the CPU.
OptimizerState merge_state(const std::vector<OptimizerState>& states,
                           const std::vector<Shard>& shards, std::int64_t total_numel,
                           std::size_t parameter_count);

}  // namespace rig::engine::ps
