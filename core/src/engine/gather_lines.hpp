// Text lines computed on several ranks (each rank decodes its share of an
// eval or infer set) brought together on rank 0, keyed by sample index, so
// the files are written once, in input order.
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include "rig/communicator.hpp"

namespace rig::engine {

using IndexedLines = std::map<std::int64_t, std::string>;

// Every rank passes its own lines; rank 0 gets the union (indices are
// distinct across ranks), the others an empty map. In one process: `mine`.
IndexedLines gather_lines(Communicator& comm, IndexedLines mine);

}  // namespace rig::engine
