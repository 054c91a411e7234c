// interactive_infer: one sample per input line, one answer per output line.
#pragma once

#include <cstdint>
#include <istream>
#include <ostream>

#include "engine/console.hpp"
#include "rig/data_layer.hpp"
#include "rig/model.hpp"

namespace rig::engine {

// Answers every non-empty line of `in` on `out` (flushed per line) until end
// of input. A line the data layer cannot parse gets "error: <why>" on the
// console and the loop goes on. Returns the number of lines answered.
std::int64_t interactive_infer(Model& model, const DataLayer& data, std::istream& in,
                               std::ostream& out, const Console& console);

}  // namespace rig::engine
