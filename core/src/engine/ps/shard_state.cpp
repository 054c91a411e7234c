#include "engine/ps/shard_state.hpp"

#include <fmt/format.h>

#include "engine/ps/protocol.hpp"
#include "rig/error.hpp"

namespace rig::engine::ps {
namespace {

Tensor host_flat(const Tensor& t) {
  return host_contiguous(t).reshape({t.numel()});
}

bool whole_pieces(const Shard& shard) {
  for (const ShardPiece& p : shard.pieces) {
    if (!p.whole()) return false;
  }
  return true;
}

}  // namespace

OptimizerState shard_state(const OptimizerState& full, const Shard& shard, std::int64_t total_numel,
                           std::size_t parameter_count) {
  OptimizerState out;
  for (const auto& [name, tensor] : full) {
    const Tensor flat = host_flat(tensor);
    // Counters (adam's step, an integer) are never laid out like the parameters.
    if (!is_floating(flat.dtype())) {
      out[name] = flat.clone();
    } else if (flat.numel() == total_numel) {
      out[name] = flat.slice(0, shard.begin, shard.end).contiguous();
    } else if (flat.numel() == static_cast<std::int64_t>(parameter_count)) {
      if (!whole_pieces(shard)) {
        throw UserError(fmt::format(
            "the optimizer keeps '{}' per parameter, but the parameter server split a parameter "
            "between servers: this optimizer must say it is not element-wise",
            name));
      }
      Tensor part = Tensor::empty({static_cast<std::int64_t>(shard.pieces.size())}, flat.dtype(),
                                  Device::cpu());
      for (std::size_t i = 0; i < shard.pieces.size(); ++i) {
        const auto at = static_cast<std::int64_t>(i);
        const auto p = static_cast<std::int64_t>(shard.pieces[i].parameter);
        part.slice(0, at, at + 1).copy_from(flat.slice(0, p, p + 1));
      }
      out[name] = part;
    } else {
      out[name] = flat.clone();
    }
  }
  return out;
}

OptimizerState merge_state(const std::vector<OptimizerState>& states,
                           const std::vector<Shard>& shards, std::int64_t total_numel,
                           std::size_t parameter_count) {
  OptimizerState out;
  if (states.empty()) return out;
  for (const auto& [name, first] : states.front()) {
    bool flat = is_floating(first.dtype());
    bool per_parameter = flat;
    for (std::size_t s = 0; s < shards.size(); ++s) {
      const auto it = states[s].find(name);
      if (it == states[s].end()) {
        throw std::runtime_error(fmt::format(
            "parameter server: server {} has no optimizer state '{}' but server 0 has", s, name));
      }
      flat = flat && it->second.numel() == shards[s].numel();
      per_parameter = per_parameter && whole_pieces(shards[s]) &&
                      it->second.numel() == static_cast<std::int64_t>(shards[s].pieces.size());
    }
    if (flat) {
      Tensor whole = Tensor::empty({total_numel}, first.dtype(), Device::cpu());
      for (std::size_t s = 0; s < shards.size(); ++s) {
        whole.slice(0, shards[s].begin, shards[s].end).copy_from(host_flat(states[s].at(name)));
      }
      out[name] = whole;
    } else if (per_parameter) {
      Tensor whole =
          Tensor::empty({static_cast<std::int64_t>(parameter_count)}, first.dtype(), Device::cpu());
      for (std::size_t s = 0; s < shards.size(); ++s) {
        const Tensor part = host_flat(states[s].at(name));
        for (std::size_t i = 0; i < shards[s].pieces.size(); ++i) {
          const auto at = static_cast<std::int64_t>(i);
          const auto p = static_cast<std::int64_t>(shards[s].pieces[i].parameter);
          whole.slice(0, p, p + 1).copy_from(part.slice(0, at, at + 1));
        }
      }
      out[name] = whole;
    } else {
      out[name] = host_flat(first).clone();
    }
  }
  return out;
}

}  // namespace rig::engine::ps
