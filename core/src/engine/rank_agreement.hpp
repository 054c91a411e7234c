// Before the first collective that matters, every rank checks that it runs
// the same experiment as rank 0: the same resolved config, the same plugin
// versions, the same number of parameters. Otherwise the gradients would be
// averaged across different models, silently.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>

#include "rig/communicator.hpp"

namespace rig::engine {

struct RankIdentity {
  std::string config_yaml;  // the resolved config
  std::string plugins;      // "kind name version" per plugin
  std::int64_t parameters = 0;
};

// Thrown on every rank when the ranks disagree, with the same message naming
// each rank that differs and how: rank 0 prints it, every rank exits with 2
// (no abort needed: they all know).
class RanksDisagree : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Nothing in one process.
void check_ranks_agree(Communicator& comm, const RankIdentity& mine);

}  // namespace rig::engine
