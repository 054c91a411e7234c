// One pass over an evaluation data layer: every sample once, metrics summed
// over batches and ranks.
#pragma once

#include <cstdint>

#include "engine/console.hpp"
#include "rig/communicator.hpp"
#include "rig/data_layer.hpp"
#include "rig/model.hpp"

namespace rig::engine {

struct EvalResult {
  Metrics metrics;           // always has "loss"
  std::int64_t batches = 0;  // on this rank
  double seconds = 0.0;
};

EvalResult evaluate(Model& model, DataLayer& data, Communicator& comm);

// "*** Validation loss: 0.1234" and one line per other metric.
void print_eval(const Console& console, const EvalResult& result, std::int64_t step);

}  // namespace rig::engine
